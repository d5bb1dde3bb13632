"""Stage 5 — ``tools/execute``: the around-dispatch waterfall with core dispatch at its base.

Wrappers get ``(execution, call_next)``; they may change only ``execution.signal``
(adding a deadline, replacing the caller's signal, restoring it after) and may return
their own result without calling ``call_next``. The base resolves the tool in the
plan and runs its body inside an error boundary, so ``await call_next()`` always gives
a result, never an exception. Contexts the body deferred lead the result's
``additional_context``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ..body import run_body
from ..decisions import parse_content, parse_hook_contexts
from ..errors import (
    ExecutionCancelledError,
    MalformedDecisionError,
    MalformedResultError,
    ToolNotFoundError,
    error_result,
)
from ..types import ToolExecution, ToolExecutionResult, ToolRunContext
from ..boundary import as_failure, is_own_cancellation, kind_of
from .chain import run_chain
from .plan import ExecutionPlan

__all__ = ["dispatch_tool", "run_execute", "parse_result"]

STAGE = "tools/execute"


def parse_result(value: object, origin: str) -> ToolExecutionResult:
    """Check the core fields of a result; extra keys pass through unchanged."""
    if not isinstance(value, Mapping):
        raise MalformedResultError(f"{origin} returned {type(value).__name__}, not a result mapping")
    try:
        parse_content(value.get("content"), "result content", origin)
        if not isinstance(value.get("is_error"), bool):
            raise MalformedDecisionError(origin, "result is_error must be a bool")
        error = value.get("error")
        if "error" in value and not (
            isinstance(error, Mapping) and isinstance(error.get("name"), str) and isinstance(error.get("code"), str)
        ):
            raise MalformedDecisionError(origin, "result error must be {name: str, code: str}")
        if "additional_context" in value:
            parse_hook_contexts(value["additional_context"], "result additional_context", origin)
    except MalformedDecisionError as exc:
        raise MalformedResultError(f"{origin} returned a malformed result: {exc.problem}") from None
    return value if isinstance(value, ToolExecutionResult) else ToolExecutionResult(value)


def _normalise_return(name: str, value: Any) -> ToolExecutionResult:
    origin = f'tool "{name}"'
    if isinstance(value, list):
        parse_content(value, "returned content", origin)
        return ToolExecutionResult({"content": value, "is_error": False})
    if isinstance(value, Mapping) and "content" in value:
        extra = sorted(str(k) for k in value if k not in ("content", "meta"))
        if extra:
            raise MalformedResultError(f"{origin} returned unexpected field(s) {extra}; return content blocks or {{content, meta}}")
        parse_content(value["content"], "returned content", origin)
        result = {"content": value["content"], "is_error": False}
        if "meta" in value:
            result["meta"] = value["meta"]
        return ToolExecutionResult(result)
    raise MalformedResultError(
        f"{origin} returned {type(value).__name__}; a tool returns a list of content blocks "
        "or {content, meta}"
    )


async def dispatch_tool(execution: ToolExecution, plan: ExecutionPlan, deferred: list[Any]) -> ToolExecutionResult:
    """Core dispatch: resolve, run the body, normalise. Never raises (except cancellation)."""
    try:
        definition = plan.tools.get(execution.name)
        if definition is None:
            raise ToolNotFoundError(execution.name)
        value = await run_body(definition.execute, execution.arguments, ToolRunContext(execution, deferred, plan.tools))
        return _normalise_return(execution.name, value)
    except BaseException as exc:  # the tool body's error boundary: whatever it raised
        if is_own_cancellation(exc):
            raise  # the call itself is being cancelled: that keeps propagating
        if issubclass(kind_of(exc), asyncio.CancelledError):
            # A CancelledError of the body's own (a cancelled inner task it awaited) is
            # the body's outcome, not the call's cancellation.
            exc = ExecutionCancelledError(
                f'tool "{execution.name}" ({execution.call_id}) was cancelled inside its body')
        return ToolExecutionResult(error_result(as_failure(exc, f'tool "{execution.name}" ({execution.call_id})')))


async def run_execute(execution: ToolExecution, plan: ExecutionPlan) -> ToolExecutionResult:
    """The around stage's result, with deferred contexts first (raises on a wrapper failure)."""
    deferred: list[Any] = []

    async def base() -> ToolExecutionResult:
        return await dispatch_tool(execution, plan, deferred)

    if plan.execute:
        result = parse_result(await run_chain(plan.execute, (execution,), base), f"{STAGE} listener")
    else:
        result = await base()
    if deferred:
        result = result.evolve(additional_context=[*deferred, *(result.get("additional_context") or [])])
    return result
