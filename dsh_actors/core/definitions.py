"""Tool definitions as a registry takes them: frozen once (:func:`snapshot_definition`),
and the execution mode a definition gives a call (:func:`execution_mode`)."""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

from .boundary import is_own_cancellation
from .errors import DefinitionError
from .jsonvalue import FrozenDict, NotLosslessJSONError, snapshot, thaw
from .types import ToolDefinition

__all__ = ["EXCLUSIVE", "HINTS", "PARALLEL", "call_fields", "check_frozen", "execution_mode", "hints_of", "object_schema",
           "snapshot_definition", "strict_schema"]

_DEFINITION_FIELDS = ("name", "description", "parameters", "execute", "timeout_ms",
                      "present_call", "present_result", "is_concurrency_safe", "extras")


def check_frozen(definition: Any) -> ToolDefinition:
    """``definition`` itself, when it is what :func:`snapshot_definition` returns (a
    registration frozen once, by the client that sent it); else :class:`DefinitionError`."""
    if not isinstance(definition, ToolDefinition):
        raise DefinitionError(f"a frozen registration must be a ToolDefinition; got {type(definition).__name__}")
    return definition


def snapshot_definition(definition: Any) -> ToolDefinition:
    """Freeze a definition for registration.

    Accepts a :class:`ToolDefinition`, a mapping, or any object with the fields.
    ``parameters`` must be a lossless JSON object; callbacks are read once (a method is
    bound to the original object then), so replacing one on the original later changes
    nothing; ``timeout_ms`` must be a positive finite number when present.
    """
    if isinstance(definition, Mapping):
        read: Callable[[str], Any] = definition.get
    else:
        read = lambda key: getattr(definition, key, None)  # noqa: E731
    fields = {key: read(key) for key in _DEFINITION_FIELDS}
    name = fields["name"]
    if not isinstance(name, str) or not name:
        raise DefinitionError("a tool definition needs a non-empty str name")
    budget = fields["timeout_ms"]
    if budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, (int, float))
        or not math.isfinite(budget) or budget <= 0
    ):
        raise DefinitionError(f'tool "{name}" timeout_ms must be a positive finite number')
    if not isinstance(fields["description"], str):
        raise DefinitionError(f'tool "{name}" description must be a str')
    try:
        parameters = snapshot(fields["parameters"], path="parameters")
    except NotLosslessJSONError as exc:
        raise DefinitionError(f'tool "{name}" parameters must be lossless JSON ({exc})') from None
    if not isinstance(parameters, Mapping):
        raise DefinitionError(f'tool "{name}" parameters must be a JSON Schema object')
    if not callable(fields["execute"]):
        raise DefinitionError(f'tool "{name}" needs a callable execute(args, ctx)')
    for key in ("present_call", "present_result", "is_concurrency_safe"):
        if fields[key] is not None and not callable(fields[key]):
            raise DefinitionError(f'tool "{name}" {key} must be callable or None')
    extras = fields["extras"] or {}
    if not isinstance(extras, Mapping):
        raise DefinitionError(f'tool "{name}" extras must be a mapping')
    return ToolDefinition(
        name=name, description=fields["description"], parameters=parameters,
        execute=fields["execute"], timeout_ms=budget,
        present_call=fields["present_call"], present_result=fields["present_result"],
        is_concurrency_safe=fields["is_concurrency_safe"], extras=FrozenDict(extras),
    )


PARALLEL: Mapping[str, str] = FrozenDict({"kind": "parallel"})
EXCLUSIVE: Mapping[str, str] = FrozenDict({"kind": "exclusive"})


def execution_mode(definition: ToolDefinition | None, arguments: Any) -> Mapping[str, str]:
    """``{"kind": "parallel"}`` only when ``definition`` (the tool as the calling scope
    sees it) declares a classifier and it returns exactly ``True`` for ``arguments`` (the
    caller's, as given); anything else — no tool, no classifier, ``False``, a truthy
    non-bool, a classifier that raises — is ``{"kind": "exclusive"}``."""
    classify = definition.is_concurrency_safe if definition is not None else None
    if classify is None:
        return EXCLUSIVE
    try:
        return PARALLEL if classify(arguments) is True else EXCLUSIVE
    except BaseException as exc:  # a classifier's KeyboardInterrupt too: exclusive, never raised
        if is_own_cancellation(exc):
            raise
        return EXCLUSIVE


def call_fields(call: Any) -> tuple[Any, Any, Any]:
    """``(name, arguments, agent)`` of a call given as a mapping or an object."""
    if isinstance(call, Mapping):
        return call.get("name"), call.get("arguments"), call.get("agent")
    return getattr(call, "name", None), getattr(call, "arguments", None), getattr(call, "agent", None)


HINTS = ("read_only", "destructive", "idempotent", "open_world")
"""The hints a definition's ``extras`` may declare for other tool layers (MCP's annotations,
a framework's metadata): booleans; absent, the layer's default stands."""


def hints_of(definition: ToolDefinition) -> dict[str, bool]:
    """The :data:`HINTS` ``definition`` declares as booleans."""
    return {key: definition.extras[key] for key in HINTS if isinstance(definition.extras.get(key), bool)}


def object_schema(definition: ToolDefinition) -> dict[str, Any]:
    """``definition``'s arguments as a plain JSON Schema with an object root (what MCP and
    the agent frameworks take)."""
    schema = thaw(definition.parameters)
    if not isinstance(schema, dict) or schema.get("type") != "object":
        schema = {"type": "object", **(schema if isinstance(schema, dict) else {})}
    return schema


def strict_schema(definition: ToolDefinition) -> dict[str, Any] | None:
    """``definition``'s arguments as a schema a model's strict mode (OpenAI's structured
    outputs) accepts — every object's properties all required, no others allowed — or
    ``None`` when they are not that (an optional argument: strict mode would make the model
    always send it)."""
    schema = object_schema(definition)
    return schema if _strict(schema) else None


def _strict(node: Any) -> bool:
    """Make ``node``'s objects closed (``additionalProperties: false``), in place; whether
    each has all its properties required and nothing strict mode refuses."""
    if isinstance(node, list):
        return all(_strict(item) for item in node)
    if not isinstance(node, dict):
        return True
    if node.get("type") == "object":
        properties = node.get("properties", {})
        if node.get("additionalProperties") not in (None, False) or set(node.get("required", ())) != set(properties):
            return False
        node["additionalProperties"] = False
    inner = [node.get("items"), *node.get("anyOf", ()), *node.get("properties", {}).values()]
    return all(_strict(child) for child in inner if child is not None)
