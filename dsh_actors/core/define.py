"""Defining tools: ``define_tool`` (the SchemaSpec DSL) and ``@tool`` (typed Python functions).

Both give a :class:`~dsh_actors.core.types.ToolDefinition` whose ``execute`` validates
the model's arguments first. The model's JSON is untrusted: a mismatch raises
:class:`~dsh_actors.core.errors.ToolArgsError` (``INVALID_ARGS``) listing path-qualified
violations, which the pipeline turns into an ``is_error`` result the model can correct
from. Presenters validate softly: arguments that do not fit give ``None`` (the generic
card) instead of an exception, because presenters also run on replayed logs.
"""

from __future__ import annotations

import copy
import inspect
import logging
import math
from typing import Any, Awaitable, Callable, Mapping, get_type_hints

import pydantic

from .body import run_body
from .boundary import is_own_cancellation
from .errors import DefinitionError, ToolArgsError, error_message
from .jsonvalue import FrozenDict, NotLosslessJSONError, snapshot, thaw
from .presentation import PresentationError, validate_call_view, validate_result_view
from .schema import SchemaSpec, check_schema_spec, schema_spec_to_json_schema, validate_args
from .types import ToolDefinition, ToolRunContext, text_block

__all__ = ["check_timeout_ms", "define_tool", "tool"]

log = logging.getLogger("dsh_actors.tools")


def check_timeout_ms(owner: str, timeout_ms: object) -> float | None:
    """``timeout_ms`` if absent or a positive finite number, else :class:`DefinitionError`."""
    if timeout_ms is None:
        return None
    if (
        isinstance(timeout_ms, bool)
        or not isinstance(timeout_ms, (int, float))
        or not math.isfinite(timeout_ms)
        or timeout_ms <= 0
    ):
        raise DefinitionError(f"{owner}: timeout_ms must be a positive finite number")
    return timeout_ms


def _soft_presenter(
    name: str,
    author: Callable[..., Any] | None,
    accepts: Callable[[Any], bool],
    validate: Callable[[object], dict[str, Any] | None],
) -> Callable[..., Any] | None:
    """Wrap a presenter: ``None`` for arguments that do not fit, for a raising author, or
    for a malformed view — display must never crash a live UI or a replay."""
    if author is None:
        return None

    def present(args: Any, *rest: Any) -> dict[str, Any] | None:
        if not accepts(args):
            return None
        try:
            return validate(author(args, *rest))
        except PresentationError as exc:
            log.warning("tool %r presenter returned an invalid view: %s", name, exc)
        except BaseException as exc:  # a presenter never stops a replay or a process
            if is_own_cancellation(exc):
                raise
            log.warning("tool %r presenter failed: %s", name, error_message(exc))
        return None

    present.__name__ = getattr(author, "__name__", "present")
    present.__doc__ = getattr(author, "__doc__", None)
    return present


def _check_name(owner: str, name: object, description: object) -> None:
    if not isinstance(name, str) or not name:
        raise DefinitionError(f"{owner}: name must be a non-empty str")
    if not isinstance(description, str):
        raise DefinitionError(f"{owner}: description must be a str")


def define_tool(
    *,
    name: str,
    description: str,
    parameters: SchemaSpec,
    execute: Callable[[Any, ToolRunContext], Awaitable[Any] | Any],
    timeout_ms: float | None = None,
    present_call: Callable[[Any], Any] | None = None,
    present_result: Callable[[Any, Mapping[str, Any]], Any] | None = None,
    is_concurrency_safe: Callable[[Any], bool] | None = None,
    extras: Mapping[str, Any] | None = None,
) -> ToolDefinition:
    """Define a tool from the ``SchemaSpec`` DSL.

    ``execute(args, ctx)`` may be sync or async and returns content blocks or
    ``{"content": [...], "meta": ...}``; it runs only after ``args`` validated.
    ``timeout_ms`` (policy metadata, never sent to the model) is checked here.
    ``is_concurrency_safe(args) -> bool`` classifies one call for parallel steps; it is
    never called on invalid arguments (those calls are exclusive).
    """
    owner = f"define_tool({name})"
    _check_name(owner, name, description)
    budget = check_timeout_ms(owner, timeout_ms)
    check_schema_spec(parameters, owner=owner)
    if not callable(execute):
        raise DefinitionError(f"{owner}: execute must be callable")
    spec = copy.deepcopy(dict(parameters))  # later edits to the caller's spec change nothing
    json_schema = schema_spec_to_json_schema(spec)

    async def run(args: Any, ctx: ToolRunContext) -> Any:
        violations = validate_args(spec, args)
        if violations:
            raise ToolArgsError(violations)
        return await run_body(execute, args, ctx)

    run.__name__ = getattr(execute, "__name__", name)
    run.__doc__ = getattr(execute, "__doc__", None)

    def fits(args: Any) -> bool:
        try:
            return not validate_args(spec, args)
        except Exception:
            return False

    return _definition(owner, name, description, json_schema, run, budget, fits,
                       present_call, present_result, is_concurrency_safe, extras)


def _classifier(owner: str, classify: Callable[[Any], Any] | None,
                fits: Callable[[Any], bool]) -> Callable[[Any], Any] | None:
    """The author's classifier behind an argument check: invalid arguments are never
    classified (the call is exclusive)."""
    if classify is None:
        return None
    if not callable(classify) or inspect.iscoroutinefunction(classify):
        raise DefinitionError(f"{owner}: is_concurrency_safe must be a plain (synchronous) callable")

    def is_concurrency_safe(args: Any) -> Any:
        return classify(args) if fits(args) else False

    return is_concurrency_safe


def _definition(owner: str, name: str, description: str, json_schema: Any, run: Callable[..., Any],
                budget: float | None, fits: Callable[[Any], bool], present_call: Callable[..., Any] | None,
                present_result: Callable[..., Any] | None, classify: Callable[[Any], Any] | None,
                extras: Mapping[str, Any] | None) -> ToolDefinition:
    """The frozen definition both ``define_tool`` and ``@tool`` produce."""
    return ToolDefinition(
        name=name,
        description=description,
        parameters=_frozen_schema(owner, json_schema),
        execute=run,
        timeout_ms=budget,
        present_call=_soft_presenter(name, present_call, fits, validate_call_view),
        present_result=_soft_presenter(name, present_result, fits, validate_result_view),
        is_concurrency_safe=_classifier(owner, classify, fits),
        extras=FrozenDict(extras or {}),
    )


def _frozen_schema(owner: str, schema: Any) -> Any:
    try:
        return snapshot(schema, path="parameters")
    except NotLosslessJSONError as exc:
        raise DefinitionError(f"{owner}: parameters must be lossless JSON ({exc})") from None


# --- @tool: a typed Python function as a tool --------------------------------------------


def _path(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "arguments"


def _violations(error: pydantic.ValidationError) -> list[str]:
    out: list[str] = []
    for item in error.errors(include_url=False):
        path = _path(tuple(item.get("loc", ())))
        if item.get("type") == "missing":
            out.append(f'missing required property "{path}"')
        else:
            message = str(item.get("msg", "is invalid"))
            out.append(f'"{path}" {message[:1].lower()}{message[1:]}')
    return out


def _strip_titles(node: Any, *, is_name_map: bool = False) -> Any:
    """Drop pydantic's generated ``title`` keys (but keep properties *named* title)."""
    if isinstance(node, dict):
        out = {}
        for key, value in node.items():
            if key == "title" and not is_name_map:
                continue
            out[key] = _strip_titles(value, is_name_map=(key in ("properties", "$defs") and not is_name_map))
        return out
    if isinstance(node, list):
        return [_strip_titles(item) for item in node]
    return node


def _returned(value: Any) -> Any:
    """Normalise a typed tool's return value: str → one text block; a model → its JSON."""
    if isinstance(value, str):
        return [text_block(value)]
    if isinstance(value, pydantic.BaseModel):
        return [text_block(value.model_dump_json())]
    return value


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout_ms: float | None = None,
    present_call: Callable[[Any], Any] | None = None,
    present_result: Callable[[Any, Mapping[str, Any]], Any] | None = None,
    is_concurrency_safe: Callable[[Any], bool] | None = None,
    extras: Mapping[str, Any] | None = None,
) -> Any:
    """Turn a typed function into a tool; the JSON Schema comes from its type hints.

    ``@tool`` or ``@tool(name=..., description=..., timeout_ms=...)``. Every parameter
    except one annotated :class:`ToolRunContext` becomes a property; defaults make a
    property optional. Arguments are validated strictly by pydantic (no ``"5"`` → ``5``
    coercion); violations become ``ToolArgsError``. Returning a ``str`` gives one text
    block; content blocks or ``{"content", "meta"}`` pass through.
    """
    if fn is None:
        return lambda f: tool(
            f, name=name, description=description, timeout_ms=timeout_ms,
            present_call=present_call, present_result=present_result,
            is_concurrency_safe=is_concurrency_safe, extras=extras,
        )
    tool_name = name or fn.__name__
    owner = f"tool({tool_name})"
    doc = inspect.getdoc(fn) or ""
    summary = description if description is not None else doc.split("\n\n")[0].strip()
    _check_name(owner, tool_name, summary)
    budget = check_timeout_ms(owner, timeout_ms)
    model, context_param = _arguments_model(owner, fn)
    json_schema = _strip_titles(model.model_json_schema())

    async def run(args: Any, ctx: ToolRunContext) -> Any:
        try:
            parsed = model.model_validate(thaw(args) if isinstance(args, (dict, list)) else args, strict=True)
        except pydantic.ValidationError as exc:
            raise ToolArgsError(_violations(exc) or ['"arguments" must be an object']) from None
        kwargs = {field: getattr(parsed, field) for field in model.model_fields}
        if context_param is not None:
            kwargs[context_param] = ctx
        return _returned(await run_body(fn, **kwargs))

    run.__name__ = fn.__name__
    run.__doc__ = fn.__doc__

    def fits(args: Any) -> bool:
        try:
            model.model_validate(thaw(args) if isinstance(args, (dict, list)) else args, strict=True)
        except Exception:
            return False
        return True

    return _definition(owner, tool_name, summary, json_schema, run, budget, fits,
                       present_call, present_result, is_concurrency_safe, extras)


def _arguments_model(owner: str, fn: Callable[..., Any]) -> tuple[type[pydantic.BaseModel], str | None]:
    try:
        hints = get_type_hints(fn)
    except Exception as exc:
        raise DefinitionError(f"{owner}: cannot resolve type hints ({exc})") from None
    fields: dict[str, Any] = {}
    context_param = None
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise DefinitionError(f"{owner}: parameter {param.name!r} must be a plain named parameter")
        hint = hints.get(param.name, Any)
        if hint is ToolRunContext:
            context_param = param.name
            continue
        if param.name not in hints:
            raise DefinitionError(f"{owner}: parameter {param.name!r} needs a type hint (it becomes the schema)")
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hint, default)
    try:
        model = pydantic.create_model(
            f"{fn.__name__}_arguments",
            __config__=pydantic.ConfigDict(extra="ignore", arbitrary_types_allowed=False),
            **fields,
        )
        model.model_json_schema()
    except Exception as exc:
        raise DefinitionError(f"{owner}: parameters cannot be described as JSON Schema ({exc})") from None
    return model, context_param
