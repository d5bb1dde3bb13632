import asyncio

import pytest
from hypothesis import given, strategies as st

from dsh_actors import DefinitionError, ToolArgsError, define_tool
from dsh_actors.core.errors import UnreachableVariantError
from dsh_actors.core.schema import schema_spec_to_json_schema, validate_args
from dsh_actors.core.jsonvalue import is_lossless

FILE_SPEC = {
    "path": {"type": "string", "required": True, "description": "Absolute file path"},
    "limit": {"type": "number"},
    "opts": {"type": "object", "properties": {"deep": {"type": "boolean", "required": True}}},
}


def test_schema_spec_converts_to_json_schema_with_required_in_declaration_order():
    spec = {
        "b": {"type": "string", "required": True, "description": ""},
        "a": {"type": "string", "enum": ["x", "y"], "default": "x", "required": True},
        "tags": {"type": "array", "items": {"type": "string", "required": True}},
        "raw": {"type": "object"},
        "list": {"type": "array"},
    }
    assert schema_spec_to_json_schema(spec) == {
        "type": "object",
        "properties": {
            "b": {"type": "string"},
            "a": {"type": "string", "enum": ["x", "y"], "default": "x"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "raw": {"type": "object"},
            "list": {"type": "array"},
        },
        "required": ["b", "a"],
    }


def test_nested_objects_carry_their_own_required_and_an_empty_required_is_left_out():
    schema = schema_spec_to_json_schema(FILE_SPEC)
    assert schema["properties"]["opts"] == {
        "type": "object", "properties": {"deep": {"type": "boolean"}}, "required": ["deep"],
    }
    assert "required" not in schema_spec_to_json_schema({"x": {"type": "number"}})


@pytest.mark.parametrize("args", [None, "text", [1, 2], 3, True])
def test_arguments_that_are_not_an_object_give_exactly_one_violation(args):
    assert validate_args(FILE_SPEC, args) == ['"arguments" must be an object']


def test_violations_are_path_qualified_and_collected_in_declaration_order():
    spec = {
        "config": {"type": "object", "properties": {"host": {"type": "string", "required": True}}},
        "servers": {"type": "array", "items": {"type": "object", "properties": {"host": {"type": "string"}}}},
        "color": {"type": "string", "enum": ["red", "green"]},
        "n": {"type": "number", "enum": ["1"]},
        "name": {"type": "string", "required": True},
    }
    args = {"config": {}, "servers": [{"host": "a"}, {"host": 2}], "color": "blue", "n": 1}
    assert validate_args(spec, args) == [
        'missing required property "config.host"',
        '"servers[1].host" must be a string',
        '"color" must be one of ["red","green"]',
        '"n" must be one of ["1"]',
        'missing required property "name"',
    ]


def test_a_scalar_type_failure_stops_before_the_enum_check():
    spec = {"color": {"type": "string", "enum": ["red"]}}
    assert validate_args(spec, {"color": 3}) == ['"color" must be a string']


def test_extra_keys_are_allowed_and_defaults_are_never_applied():
    spec = {"mode": {"type": "string", "default": "fast"}}
    args = {"other": object()}
    assert validate_args(spec, args) == []
    assert "mode" not in args


def test_booleans_are_not_numbers_and_objects_without_properties_only_type_check():
    spec = {"n": {"type": "number"}, "o": {"type": "object"}, "a": {"type": "array"}}
    assert validate_args(spec, {"n": True, "o": [], "a": {}}) == [
        '"n" must be a number', '"o" must be an object', '"a" must be an array',
    ]
    assert validate_args(spec, {"n": 1.5, "o": {"any": 1}, "a": [1, "x"]}) == []


def test_a_forged_spec_with_an_unknown_type_raises_unreachable():
    with pytest.raises(UnreachableVariantError, match=r"unreachable variant.*validate_args"):
        validate_args({"x": {"type": "tuple"}}, {"x": 1})


anything = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text() | st.binary(),
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c, max_size=3) | st.tuples(c),
    max_leaves=10,
)
props = st.deferred(lambda: st.one_of(
    st.fixed_dictionaries({"type": st.sampled_from(["string", "number", "boolean"])},
                          optional={"required": st.booleans(), "enum": st.lists(st.text(max_size=3), max_size=3),
                                    "description": st.text(max_size=5), "default": st.integers(-1000, 1000)}),
    st.fixed_dictionaries({"type": st.just("object")},
                          optional={"required": st.booleans(), "properties": specs}),
    st.fixed_dictionaries({"type": st.just("array")}, optional={"items": props}),
))
specs = st.dictionaries(st.text(min_size=1, max_size=4), props, max_size=4)


@given(specs, anything)
def test_validate_args_is_total_over_any_input(spec, args):
    violations = validate_args(spec, args)
    assert isinstance(violations, list) and all(isinstance(v, str) for v in violations)


@given(specs)
def test_schema_conversion_never_raises_and_gives_lossless_json(spec):
    schema = schema_spec_to_json_schema(spec)
    assert schema["type"] == "object" and is_lossless(schema)
    assert list(schema["properties"]) == list(spec)


def echo_tool(**overrides):
    options = dict(
        name="echo", description="echo arguments back", parameters={"text": {"type": "string"}},
        execute=lambda args, ctx: [{"type": "text", "text": args.get("text", "")}],
    )
    options.update(overrides)
    return define_tool(**options)


@pytest.mark.parametrize("bad", [0, -5, float("inf"), float("nan"), True, "10"])
def test_define_tool_rejects_a_timeout_that_is_not_a_positive_finite_number(bad):
    with pytest.raises(DefinitionError, match=r"define_tool\(echo\): timeout_ms must be a positive finite number"):
        echo_tool(timeout_ms=bad)


def test_define_tool_attaches_the_timeout_only_when_given():
    assert echo_tool().timeout_ms is None
    assert echo_tool(timeout_ms=1500).timeout_ms == 1500


def test_define_tool_rejects_a_malformed_spec_loudly_at_definition_time():
    with pytest.raises(DefinitionError, match="type must be one of"):
        echo_tool(parameters={"x": {"type": "integer"}})
    with pytest.raises(DefinitionError, match="enum must be a list of str"):
        echo_tool(parameters={"x": {"type": "string", "enum": [1]}})


def test_the_defined_execute_raises_tool_args_error_before_the_body_runs():
    ran = []
    defn = echo_tool(parameters={"text": {"type": "string", "required": True}},
                     execute=lambda args, ctx: ran.append(args) or [])
    with pytest.raises(ToolArgsError) as info:
        asyncio.run(defn.execute({}, None))
    assert info.value.violations == ['missing required property "text"'] and ran == []


def test_editing_the_callers_spec_after_definition_changes_nothing():
    spec = {"text": {"type": "string", "required": True}}
    defn = echo_tool(parameters=spec)
    spec["text"]["type"] = "number"
    spec["new"] = {"type": "string", "required": True}
    assert asyncio.run(defn.execute({"text": "ok"}, None)) == [{"type": "text", "text": "ok"}]
    assert defn.parameters == {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def test_presenters_validate_softly_and_are_absent_when_not_supplied():
    defn = echo_tool(
        parameters={"text": {"type": "string", "required": True}},
        present_call=lambda args: {"card": "generic", "title": args["text"]},
        present_result=lambda args, result: {"card": "terminal", "output": result["content"][0]["text"]},
    )
    assert defn.present_call({"text": "hi"}) == {"card": "generic", "title": "hi"}
    assert defn.present_call({"text": 5}) is None
    assert defn.present_call("garbage") is None
    assert defn.present_result({"text": "x"}, {"content": [{"type": "text", "text": "out"}], "is_error": False}) == {
        "card": "terminal", "output": "out"}
    assert echo_tool().present_call is None and echo_tool().present_result is None


def test_a_presenter_that_raises_or_returns_a_bad_view_falls_back_to_none(caplog):
    raising = echo_tool(present_call=lambda args: 1 / 0)
    malformed = echo_tool(present_call=lambda args: {"card": "hologram"})
    assert raising.present_call({}) is None
    assert malformed.present_call({}) is None
    assert "presenter" in caplog.text
