"""The author-facing parameter DSL (``SchemaSpec``), its JSON Schema, and ``validate_args``.

A ``SchemaSpec`` maps property names to props::

    {"path": {"type": "string", "required": True, "description": "Absolute path"},
     "limit": {"type": "number"},
     "mode": {"type": "string", "enum": ["fast", "slow"]},
     "opts": {"type": "object", "properties": {"deep": {"type": "boolean", "required": True}}},
     "tags": {"type": "array", "items": {"type": "string"}}}

Types are ``string``, ``number``, ``boolean``, ``object`` and ``array``; ``enum`` is
string-only. Validation mirrors the conversion exactly: extra keys are allowed, a
``default`` is never applied, and an object without ``properties`` (or an array without
``items``) only type-checks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict

from .errors import DefinitionError, UnreachableVariantError, error_message, unreachable
from .jsonvalue import compact, is_lossless

__all__ = [
    "MAX_SCHEMA_DEPTH",
    "SchemaProp",
    "SchemaSpec",
    "check_schema_spec",
    "schema_spec_to_json_schema",
    "validate_args",
]

MAX_SCHEMA_DEPTH = 64
"""How deeply props may nest (``properties`` / ``items``); deeper is a ``DefinitionError``
(a parameter schema that deep is a mistake, and checking it would exhaust the stack)."""

PropType = Literal["string", "number", "boolean", "object", "array"]
_TYPES = ("string", "number", "boolean", "object", "array")


class SchemaProp(TypedDict):
    """One property of a :data:`SchemaSpec`."""

    type: PropType
    required: NotRequired[bool]
    description: NotRequired[str]
    enum: NotRequired[list[str]]
    default: NotRequired[Any]
    properties: NotRequired["SchemaSpec"]
    items: NotRequired["SchemaProp"]


SchemaSpec = Mapping[str, SchemaProp]


def _prop_to_json_schema(prop: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": prop["type"]}
    if prop.get("description"):
        out["description"] = prop["description"]
    if "enum" in prop:
        out["enum"] = list(prop["enum"])
    if "default" in prop:
        out["default"] = prop["default"]
    if prop["type"] == "object" and "properties" in prop:
        nested = schema_spec_to_json_schema(prop["properties"])
        out["properties"] = nested["properties"]
        if "required" in nested:
            out["required"] = nested["required"]
    if prop["type"] == "array" and "items" in prop:
        out["items"] = _prop_to_json_schema(prop["items"])
    return out


def schema_spec_to_json_schema(spec: SchemaSpec) -> dict[str, Any]:
    """Convert a ``SchemaSpec`` to the JSON Schema object sent to the model.

    ``required`` follows declaration order and is left out when empty.
    """
    properties = {key: _prop_to_json_schema(prop) for key, prop in spec.items()}
    required = [key for key, prop in spec.items() if prop.get("required") is True]
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def check_schema_spec(spec: object, *, owner: str = "schema spec", path: str = "", depth: int = 0) -> None:
    """Raise :class:`DefinitionError` unless ``spec`` is a well-formed ``SchemaSpec``
    nested at most :data:`MAX_SCHEMA_DEPTH` levels.

    Misuse fails loud at definition time, so a malformed spec never reaches a call.
    """
    where = f"{owner}: " + (f"{path}" if path else "parameters")
    if depth > MAX_SCHEMA_DEPTH:
        raise DefinitionError(f"{where} is nested deeper than {MAX_SCHEMA_DEPTH} levels")
    if not isinstance(spec, Mapping):
        raise DefinitionError(f"{where} must be a mapping of property name to prop")
    for key, prop in spec.items():
        at = f"{path}.{key}" if path else str(key)
        if not isinstance(key, str):
            raise DefinitionError(f"{owner}: property name {key!r} must be a str")
        _check_prop(prop, owner, at, depth)


def _check_prop(prop: object, owner: str, at: str, depth: int) -> None:
    if not isinstance(prop, Mapping):
        raise DefinitionError(f"{owner}: {at} must be a prop mapping with a 'type'")
    kind = prop.get("type")
    if kind not in _TYPES:
        raise DefinitionError(
            f"{owner}: {at}.type must be one of {', '.join(_TYPES)}; got {kind!r}"
        )
    known = {"type", "required", "description", "enum", "default", "properties", "items"}
    extra = sorted(str(k) for k in prop if k not in known)
    if extra:
        raise DefinitionError(f"{owner}: {at} has unsupported keys {extra}; allowed: {sorted(known)}")
    if "required" in prop and not isinstance(prop["required"], bool):
        raise DefinitionError(f"{owner}: {at}.required must be True or False")
    if "description" in prop and not isinstance(prop["description"], str):
        raise DefinitionError(f"{owner}: {at}.description must be a str")
    if "enum" in prop and not (
        isinstance(prop["enum"], (list, tuple)) and all(isinstance(m, str) for m in prop["enum"])
    ):
        raise DefinitionError(f"{owner}: {at}.enum must be a list of str (enums are string-only)")
    if "default" in prop and not is_lossless(prop["default"]):
        raise DefinitionError(f"{owner}: {at}.default must be lossless JSON")
    if "properties" in prop:
        if kind != "object":
            raise DefinitionError(f"{owner}: {at}.properties is only allowed on type object")
        check_schema_spec(prop["properties"], owner=owner, path=at, depth=depth + 1)
    if "items" in prop:
        if kind != "array":
            raise DefinitionError(f"{owner}: {at}.items is only allowed on type array")
        if depth + 1 > MAX_SCHEMA_DEPTH:
            raise DefinitionError(f"{owner}: {at}[] is nested deeper than {MAX_SCHEMA_DEPTH} levels")
        _check_prop(prop["items"], owner, f"{at}[]", depth + 1)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check(prop: Mapping[str, Any], value: Any, path: str, out: list[str]) -> None:
    kind = prop.get("type")
    if kind == "string":
        ok = isinstance(value, str)
    elif kind == "number":
        ok = _is_number(value)
    elif kind == "boolean":
        ok = isinstance(value, bool)
    elif kind == "object":
        if not isinstance(value, Mapping):
            out.append(f'"{path}" must be an object')
            return
        if "properties" in prop:
            _check_object(prop["properties"], value, path, out)
        return
    elif kind == "array":
        if not isinstance(value, list):
            out.append(f'"{path}" must be an array')
            return
        if "items" in prop:
            for index, item in enumerate(value):
                _check(prop["items"], item, f"{path}[{index}]", out)
        return
    else:
        raise unreachable("validate_args", dict(prop))
    if not ok:
        out.append(f'"{path}" must be a {kind}')
        return
    enum = prop.get("enum")
    if enum is not None and not (isinstance(value, str) and value in enum):
        out.append(f'"{path}" must be one of {compact(list(enum))}')


def _check_object(spec: SchemaSpec, value: Mapping[str, Any], prefix: str, out: list[str]) -> None:
    for key, prop in spec.items():
        path = f"{prefix}.{key}" if prefix else key
        if key not in value:
            if prop.get("required") is True:
                out.append(f'missing required property "{path}"')
            continue
        _check(prop, value[key], path, out)


def validate_args(spec: SchemaSpec, args: Any) -> list[str]:
    """Path-qualified violations of ``args`` against ``spec`` (empty means valid).

    Total over ``args``: whatever its shape, this returns a list and never raises.
    It raises only when the *spec* names an unknown type (a forged spec).
    """
    if not isinstance(args, Mapping):
        return ['"arguments" must be an object']
    out: list[str] = []
    try:
        _check_object(spec, args, "", out)
    except UnreachableVariantError:
        raise
    except Exception as exc:  # an exotic mapping whose reads raise
        out.append(f'"arguments" could not be read: {error_message(exc)}')
    return out
