"""One model step for one agent: run its tool calls, record them, buffer their context.

:func:`agent_step` executes the step's calls on the agent's behalf (one at a time, in
order — native calls are sequential), appends exactly one ``tool/result`` per call id to
the agent's session log whatever fails, and then — after all the step's results — one
``context/message`` carrying the additional context the calls attached.
"""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

from ..core.errors import error_result
from ..core.jsonvalue import NotLosslessJSONError, snapshot
from ..core.types import ToolExecutionResult
from ..log import context_message_event, tool_result_event
from .client import AgentScope
from .response import Response
from .session import SessionLog

__all__ = ["agent_step"]


def _logged_arguments(arguments: Any) -> Any:
    try:
        return snapshot(arguments)
    except NotLosslessJSONError:
        return None  # the result says why; the log still gets the call's one record


def agent_step(scope: AgentScope, session: SessionLog, calls: Sequence[Mapping[str, Any]], *,
               on_result: Callable[[Mapping[str, Any], ToolExecutionResult, float], None] | None = None,
               ) -> Response[list[ToolExecutionResult]]:
    """Run ``calls`` (each ``{call_id, name, arguments}``) for ``scope``'s agent.

    Duplicate call ids are refused before anything runs. Resolves to the results in call
    order; a failing session log raises (the durable record matters more than the step).
    ``on_result(call, result, seconds)`` is told each call's outcome and duration.
    """
    ids = [call.get("call_id") for call in calls]
    duplicates = sorted({i for i in ids if ids.count(i) > 1}, key=str)
    if duplicates:
        raise ValueError(f"a step's call ids must be unique; repeated: {duplicates}")

    async def run() -> list[ToolExecutionResult]:
        results: list[ToolExecutionResult] = []
        contexts: list[Any] = []
        for call in calls:
            started = time.perf_counter()
            try:
                result = await scope.execute(dict(call))
            except Exception as exc:  # execute never raises; a programming error still gets its record
                result = ToolExecutionResult({"call_id": call.get("call_id"), **error_result(exc)})
            if on_result is not None:
                on_result(call, result, time.perf_counter() - started)
            await session.append(tool_result_event(_logged_arguments(call.get("arguments")), str(call.get("name")), result))
            contexts.extend(result.get("additional_context") or [])
            results.append(result)
        if contexts:
            await session.append(context_message_event(contexts))
        return results

    return Response(run)
