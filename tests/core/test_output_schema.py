import pytest

from dsh_actors.core.errors import OutputSchemaError, UnreachableVariantError
from dsh_actors.core.output_schema import assert_supported_output_schema, validate_structured_value

SUPPORTED = "(subset: type/properties/required/additionalProperties/items/enum/const + annotations)"


def violations(schema):
    with pytest.raises(OutputSchemaError) as info:
        assert_supported_output_schema(schema)
    assert info.value.code == "UNSUPPORTED_SCHEMA" and info.value.name == "OutputSchemaError"
    assert str(info.value) == "unsupported output schema: " + "; ".join(info.value.violations)
    return info.value.violations


def test_a_schema_inside_the_subset_passes():
    assert_supported_output_schema({
        "type": "object", "title": "Bug", "description": "a bug", "additionalProperties": False,
        "properties": {
            "kind": {"type": "string", "enum": ["bug", "task"], "default": "bug", "examples": ["bug"]},
            "n": {"type": "integer", "const": 3}, "tags": {"type": "array", "items": {"type": "string"}},
            "none": {"type": "null"},
        },
        "required": ["kind"],
    })


def test_every_violation_is_reported_in_walk_order():
    assert violations({
        "type": "object", "oneOf": [],
        "properties": {"a": {"type": ["string", "null"]}, "b": {"type": "string", "items": {}}},
        "required": ["a", "ghost"],
    }) == [
        f"schema.oneOf is not a supported keyword {SUPPORTED}",
        "schema.properties.a.type must be a single type string (type arrays are not supported)",
        'schema.properties.b.items is not supported on type "string"',
        'schema.required names "ghost" which is not in properties',
    ]


def test_the_root_must_be_an_object_schema():
    assert violations({"type": "string"}) == ['schema.type must be "object" (structured output is object-rooted)']
    assert violations({"type": "array", "properties": {}}) == [
        'schema.properties is not supported on type "array"',
        'schema.type must be "object" (structured output is object-rooted)',
    ]
    assert violations([]) == ["schema must be a schema object"]


@pytest.mark.parametrize("node, message", [
    ({"type": "tuple"}, "schema.properties.x.type must be one of object/array/string/number/integer/boolean/null"),
    ({"type": "string", "enum": []}, "schema.properties.x.enum must be a non-empty array of scalars"),
    ({"type": "string", "enum": [{}]}, "schema.properties.x.enum must be a non-empty array of scalars"),
    ({"type": "string", "enum": [float("nan")]}, "schema.properties.x.enum must be a non-empty array of scalars"),
    ({"type": "string", "enum": "a"}, "schema.properties.x.enum must be a non-empty array of scalars"),
    ({"type": "string", "const": []}, "schema.properties.x.const must be a scalar"),
    ({"type": "object", "properties": []}, "schema.properties.x.properties must be an object of schemas"),
    ({"type": "object", "required": "a"}, "schema.properties.x.required must be an array of strings"),
    ({"type": "object", "additionalProperties": {}}, "schema.properties.x.additionalProperties must be a boolean"),
    ({"type": "string", "description": 3}, "schema.properties.x.description must be a string"),
    ({"type": "string", "title": None}, "schema.properties.x.title must be a string"),
    ({"type": "string", "default": float("inf")}, "schema.properties.x.default annotation must be JSON data"),
    ({"type": "object", "required": ["toString"]}, 'schema.properties.x.required names "toString" which is not in properties'),
])
def test_each_rule_of_the_subset_has_its_own_message(node, message):
    assert message in violations({"type": "object", "properties": {"x": node}})


def test_a_node_on_its_own_ancestor_path_is_circular_but_a_reused_sibling_is_fine():
    shared = {"type": "string"}
    assert_supported_output_schema({"type": "object", "properties": {"a": shared, "b": shared}})
    loop = {"type": "object", "properties": {}}
    loop["properties"]["self"] = loop
    assert violations(loop) == ["schema.properties.self is circular"]


SCHEMA = {
    "type": "object", "additionalProperties": False, "required": ["kind", "n"],
    "properties": {
        "kind": {"type": "string", "const": "bug"}, "n": {"type": "integer"},
        "x": {"type": "number"}, "ok": {"type": "boolean"}, "nil": {"type": "null"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]}},
    },
}


def test_a_valid_value_has_no_violations():
    assert validate_structured_value(SCHEMA, {"kind": "bug", "n": 2.0, "tags": ["a"], "nil": None}) == []


def test_value_violations_are_path_qualified_and_collected():
    assert validate_structured_value(SCHEMA, {
        "kind": "task", "n": 1.5, "x": float("nan"), "ok": 1, "nil": 0, "tags": ["a", "c", 3], "extra": 1,
    }) == [
        '"value.kind" must be "bug"',
        '"value.n" must be an integer',
        '"value.x" must be a finite number',
        '"value.ok" must be a boolean',
        '"value.nil" must be null',
        '"value.tags[1]" must be one of ["a","b"]',
        '"value.tags[2]" must be a string',
        '"value.extra" is not a declared property (additionalProperties: false)',
    ]
    assert validate_structured_value(SCHEMA, {}) == [
        'missing required property "value.kind"', 'missing required property "value.n"']
    assert validate_structured_value(SCHEMA, "nope") == ['"value" must be an object']


def test_validation_is_total_over_odd_values_and_a_forged_type_raises_unreachable():
    assert validate_structured_value(SCHEMA, {"kind": "bug", "n": True}) == ['"value.n" must be an integer']
    with pytest.raises(UnreachableVariantError, match="tuple"):
        validate_structured_value({"type": "tuple"}, 1)
