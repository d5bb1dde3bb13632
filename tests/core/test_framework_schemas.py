"""A definition's arguments as other tool layers take them (core/definitions.py): a plain
JSON Schema with an object root, its hints, and the strict form where every argument is
required."""

import pytest

from dsh_actors import define_tool
from dsh_actors.core.definitions import hints_of, object_schema, strict_schema

pytestmark = pytest.mark.timeout(30)


def _tool(extras=None, **parameters):
    return define_tool(name="t", description="", parameters=parameters, execute=lambda args, ctx: [],
                       extras=extras or {})


def test_all_required_arguments_have_a_strict_form_with_every_object_closed():
    tool = _tool(a={"type": "number", "required": True},
                 b={"type": "array", "required": True,
                    "items": {"type": "object", "properties": {"x": {"type": "string", "required": True}}}})
    strict = strict_schema(tool)
    assert strict["additionalProperties"] is False and strict["required"] == ["a", "b"]
    assert strict["properties"]["b"]["items"]["additionalProperties"] is False
    assert "additionalProperties" not in object_schema(tool)  # the plain form is left as it was


def test_an_optional_argument_anywhere_has_no_strict_form():
    assert strict_schema(_tool(a={"type": "number"})) is None
    nested = _tool(b={"type": "object", "required": True, "properties": {"x": {"type": "string"}}})
    assert strict_schema(nested) is None
    assert strict_schema(_tool()) == {"type": "object", "properties": {}, "additionalProperties": False}


def test_hints_are_the_boolean_ones_declared():
    assert hints_of(_tool(extras={"read_only": True, "destructive": "yes", "num_cpus": 1})) == {"read_only": True}
