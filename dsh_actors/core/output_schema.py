"""The structured-output schema subset: a narrow, object-rooted JSON Schema as data.

Callers that demand a machine-readable value from an agent pass such a schema; it is
sent verbatim to the model and the produced value is validated against it. The subset
rejects loudly outside itself, because accepting a keyword the validator does not
enforce would validate less than the schema promises.

Supported: a single-string ``type`` (object/array/string/number/integer/boolean/null),
``properties`` / ``required`` / ``additionalProperties`` (bool), ``items``, scalar-only
``enum`` / ``const``; the annotations ``description`` / ``title`` / ``default`` /
``examples`` are ignored but must be JSON data.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from .errors import OutputSchemaError, unreachable
from .jsonvalue import FrozenDict, compact, is_lossless, json_equal
from .schema import MAX_SCHEMA_DEPTH

__all__ = ["assert_supported_output_schema", "validate_structured_value"]

_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
_CONSTRAINTS = {"type", "properties", "required", "additionalProperties", "items", "enum", "const"}
_ANNOTATIONS = ("description", "title", "default", "examples")
_OBJECT_ONLY = ("properties", "required", "additionalProperties")
_SCALAR_ONLY = ("enum", "const")
_SCALAR_TYPES = ("string", "number", "integer", "boolean", "null")


def _is_plain_object(value: object) -> bool:
    return type(value) in (dict, FrozenDict)


def _is_scalar(value: object) -> bool:
    if value is None or isinstance(value, (str, bool)):
        return True
    if isinstance(value, int):
        return True
    return isinstance(value, float) and math.isfinite(value)


def _walk(node: Any, path: str, ancestors: set[int], out: list[str]) -> None:
    if not _is_plain_object(node):
        out.append(f"{path} must be a schema object")
        return
    if id(node) in ancestors:
        out.append(f"{path} is circular")
        return
    if len(ancestors) >= MAX_SCHEMA_DEPTH:  # the walk's depth: deeper would exhaust the stack
        out.append(f"{path} is nested deeper than {MAX_SCHEMA_DEPTH} levels")
        return
    ancestors.add(id(node))
    try:
        _walk_node(node, path, ancestors, out)
    finally:
        ancestors.discard(id(node))


def _walk_node(node: Mapping[str, Any], path: str, ancestors: set[int], out: list[str]) -> None:
    for key, value in node.items():
        if key in _CONSTRAINTS:
            continue
        if key in _ANNOTATIONS:
            if not is_lossless(value):
                out.append(f"{path}.{key} annotation must be JSON data")
            continue
        out.append(
            f"{path}.{key} is not a supported keyword (subset: "
            "type/properties/required/additionalProperties/items/enum/const + annotations)"
        )
    for key in ("description", "title"):
        if key in node and not isinstance(node[key], str):
            out.append(f"{path}.{key} must be a string")

    kind = node.get("type")
    if isinstance(kind, list):
        out.append(f"{path}.type must be a single type string (type arrays are not supported)")
        return
    if kind not in _TYPES:
        out.append(f"{path}.type must be one of object/array/string/number/integer/boolean/null")
        return

    for keyword in _OBJECT_ONLY:
        if keyword in node and kind != "object":
            out.append(f'{path}.{keyword} is not supported on type "{kind}"')
    if "items" in node and kind != "array":
        out.append(f'{path}.items is not supported on type "{kind}"')
    for keyword in _SCALAR_ONLY:
        if keyword in node and kind not in _SCALAR_TYPES:
            out.append(f'{path}.{keyword} is not supported on type "{kind}"')

    if kind == "object":
        _walk_object(node, path, ancestors, out)
    elif kind == "array":
        if "items" in node:
            _walk(node["items"], f"{path}.items", ancestors, out)
    else:
        if "enum" in node:
            enum = node["enum"]
            if not isinstance(enum, list) or not enum or not all(_is_scalar(m) for m in enum):
                out.append(f"{path}.enum must be a non-empty array of scalars")
        if "const" in node and not _is_scalar(node["const"]):
            out.append(f"{path}.const must be a scalar")


def _walk_object(node: Mapping[str, Any], path: str, ancestors: set[int], out: list[str]) -> None:
    properties = node.get("properties")
    declared: Mapping[str, Any] = {}
    if "properties" in node:
        if not isinstance(properties, Mapping) or not _is_plain_object(properties):
            out.append(f"{path}.properties must be an object of schemas")
        else:
            declared = properties
            for key, child in declared.items():
                _walk(child, f"{path}.properties.{key}", ancestors, out)
    if "required" in node:
        required = node["required"]
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            out.append(f"{path}.required must be an array of strings")
        else:
            for name in required:
                if name not in declared:
                    out.append(f'{path}.required names "{name}" which is not in properties')
    if "additionalProperties" in node and not isinstance(node["additionalProperties"], bool):
        out.append(f"{path}.additionalProperties must be a boolean")


def assert_supported_output_schema(schema: Any) -> None:
    """Raise :class:`OutputSchemaError` listing every violation, in walk order."""
    out: list[str] = []
    _walk(schema, "schema", set(), out)
    root_type = schema.get("type") if _is_plain_object(schema) else None
    if isinstance(root_type, str) and root_type in _TYPES and root_type != "object":
        out.append('schema.type must be "object" (structured output is object-rooted)')
    if out:
        raise OutputSchemaError(out)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and (
        not isinstance(value, float) or math.isfinite(value)
    )


def _check(schema: Mapping[str, Any], value: Any, path: str, out: list[str]) -> None:
    kind = schema.get("type")
    if kind == "object":
        if not isinstance(value, Mapping):
            out.append(f'"{path}" must be an object')
            return
        properties = schema.get("properties") or {}
        for name in schema.get("required") or []:
            if name not in value:
                out.append(f'missing required property "{path}.{name}"')
        for name, child in properties.items():
            if name in value:
                _check(child, value[name], f"{path}.{name}", out)
        if schema.get("additionalProperties") is False:
            for name in value:
                if name not in properties:
                    out.append(f'"{path}.{name}" is not a declared property (additionalProperties: false)')
        return
    if kind == "array":
        if not isinstance(value, list):
            out.append(f'"{path}" must be an array')
            return
        if "items" in schema:
            for index, item in enumerate(value):
                _check(schema["items"], item, f"{path}[{index}]", out)
        return
    if kind == "string":
        ok, problem = isinstance(value, str), "must be a string"
    elif kind == "number":
        ok, problem = _is_number(value), "must be a finite number"
    elif kind == "integer":
        ok = _is_number(value) and float(value).is_integer()
        problem = "must be an integer"
    elif kind == "boolean":
        ok, problem = isinstance(value, bool), "must be a boolean"
    elif kind == "null":
        ok, problem = value is None, "must be null"
    else:
        raise unreachable("validate_structured_value", kind)
    if not ok:
        out.append(f'"{path}" {problem}')
        return
    if "enum" in schema and not any(json_equal(value, member) for member in schema["enum"]):
        out.append(f'"{path}" must be one of {compact(schema["enum"])}')
    if "const" in schema and not json_equal(value, schema["const"]):
        out.append(f'"{path}" must be {compact(schema["const"])}')


def validate_structured_value(schema: Mapping[str, Any], value: Any) -> list[str]:
    """Path-qualified violations of ``value`` (empty means valid). Never raises over ``value``.

    ``schema`` must already have passed :func:`assert_supported_output_schema`; a forged
    schema with an unknown type raises an ``UnreachableVariantError``.
    """
    out: list[str] = []
    _check(schema, value, "value", out)
    return out
