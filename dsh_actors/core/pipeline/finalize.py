"""Stage 7 — finish: materialise the result as lossless JSON, freeze, notify observers.

The whole result is snapshotted and deep-frozen; if it is not lossless JSON it becomes
the error ``tool result must be losslessly JSON-serializable``. The execution is frozen,
then every ``tools/result`` observer is called once, synchronously, in order; an
observer's failure is contained and logged. The caller receives the same frozen
result the observers saw.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Mapping
from typing import Any

from ..errors import MalformedResultError, error_message, error_result
from ..jsonvalue import NotLosslessJSONError, snapshot
from ..types import ToolExecution, ToolExecutionResult
from .plan import ExecutionPlan

__all__ = ["finish", "log", "notify_observers"]

log = logging.getLogger("dsh_actors.pipeline")


def _with_call_id(execution: ToolExecution, result: Mapping[str, Any]) -> dict[str, Any]:
    """The result with the pipeline's ``call_id`` first (a wrapper cannot change it)."""
    return {"call_id": execution.call_id, **{k: v for k, v in result.items() if k != "call_id"}}


def _materialise(execution: ToolExecution, result: Mapping[str, Any]) -> ToolExecutionResult:
    try:
        frozen = snapshot(_with_call_id(execution, result), path="result")
    except NotLosslessJSONError:
        failure = error_result(MalformedResultError("tool result must be losslessly JSON-serializable"))
        frozen = snapshot(_with_call_id(execution, failure))
    return ToolExecutionResult(frozen)


def notify_observers(execution: ToolExecution, result: ToolExecutionResult, plan: ExecutionPlan) -> None:
    """Call each ``tools/result`` observer once; contain and log every failure."""
    for observer in plan.result:
        try:
            returned = observer(execution, result)
            if inspect.isawaitable(returned):
                if inspect.iscoroutine(returned):
                    returned.close()
                raise TypeError("tools/result observers are synchronous; it returned an awaitable")
        except BaseException as exc:  # KeyboardInterrupt, SystemExit, … included: logged, never raised
            log.warning(
                'tool "%s" (%s): tools/result observer failed: %s',
                execution.name, execution.call_id, error_message(exc),
            )


def finish(execution: ToolExecution, result: Mapping[str, Any], plan: ExecutionPlan | None, *,
           observe: bool = True) -> ToolExecutionResult:
    """Materialise, freeze, observe; returns the frozen result. ``observe=False`` leaves
    the ``tools/result`` observers to whoever receives the result (on Ray: the caller's
    process, which is the one place that always ends a call, whatever died on the way)."""
    final = _materialise(execution, result)
    execution.freeze()
    if plan is not None and observe:
        notify_observers(execution, final, plan)
    return final
