"""One model step for one agent: run its tool calls, record them, buffer their context.

:func:`agent_step` executes the step's calls on the agent's behalf in the order the model
gave them, letting consecutive calls whose execution mode is ``parallel`` run at once and
keeping each ``exclusive`` call alone. It appends exactly one ``tool/result`` per call id
to the agent's session log, in call order, whatever fails, and then — after all the
step's results — one ``context/message`` carrying the additional context the calls
attached.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Mapping, Sequence

from ..core.errors import error_result
from ..core.jsonvalue import NotLosslessJSONError, snapshot
from ..core.definitions import execution_mode
from ..core.types import ToolExecutionResult
from ..log import context_message_event, tool_result_event
from .client import AgentScope
from .response import Response
from .session.client import SessionLog

__all__ = ["agent_step"]


def _logged_arguments(arguments: Any) -> Any:
    try:
        return snapshot(arguments)
    except NotLosslessJSONError:
        return None  # the result says why; the log still gets the call's one record


def _groups(calls: Sequence[Mapping[str, Any]], kinds: Sequence[str]) -> list[list[Mapping[str, Any]]]:
    """The step in call order: runs of consecutive parallel calls together, each exclusive
    call alone."""
    groups: list[list[Mapping[str, Any]]] = []
    joinable = False  # the last group is a run of parallel calls
    for call, kind in zip(calls, kinds):
        if kind == "parallel" and joinable:
            groups[-1].append(call)
        else:
            groups.append([call])
        joinable = kind == "parallel"
    return groups


def agent_step(scope: AgentScope, session: SessionLog, calls: Sequence[Mapping[str, Any]], *,
               on_result: Callable[[Mapping[str, Any], ToolExecutionResult, float], None] | None = None,
               refused: Mapping[str, BaseException] | None = None,
               ) -> Response[list[ToolExecutionResult]]:
    """Run ``calls`` (each ``{call_id, name, arguments}``) for ``scope``'s agent.

    Consecutive calls whose :meth:`~.client.AgentScope.execution_mode` is ``parallel`` run
    at once; an ``exclusive`` call runs alone. Duplicate call ids are refused before
    anything runs. Resolves to the results in call order; a failing session log raises
    (the durable record matters more than the step). ``on_result(call, result, seconds)``
    is told each call's outcome and duration, in call order. ``refused`` maps call ids to
    the error each of those calls ends with without being executed (the agent loop's calls
    whose arguments were not JSON): they are logged and reported like the others.
    """
    ids = [call.get("call_id") for call in calls]
    duplicates = sorted({i for i in ids if ids.count(i) > 1}, key=str)
    if duplicates:
        raise ValueError(f"a step's call ids must be unique; repeated: {duplicates}")

    async def one(call: Mapping[str, Any]) -> tuple[ToolExecutionResult, float]:
        started = time.perf_counter()
        if refused and (refusal := refused.get(call.get("call_id"))) is not None:  # type: ignore[arg-type]
            return ToolExecutionResult({"call_id": call.get("call_id"), **error_result(refusal)}), 0.0
        try:
            result = await scope.execute(dict(call))
        except Exception as exc:  # execute never raises; a programming error still gets its record
            result = ToolExecutionResult({"call_id": call.get("call_id"), **error_result(exc)})
        return result, time.perf_counter() - started

    async def modes() -> list[str]:
        """Each call's execution mode, from one read of the agent's view (a step of one call
        is one group whatever its mode: no read)."""
        if len(calls) < 2:
            return ["exclusive"] * len(calls)
        try:
            visible = {d.name: d for d in await scope.visible()}
        except Exception:
            return ["exclusive"] * len(calls)  # no view: nothing runs alongside anything
        return [execution_mode(visible.get(name) if isinstance(name := call.get("name"), str) else None,
                               call.get("arguments"))["kind"] for call in calls]

    async def run() -> list[ToolExecutionResult]:
        kinds = await modes()
        results: list[ToolExecutionResult] = []
        contexts: list[Any] = []
        for group in _groups(calls, kinds):
            outcomes = await asyncio.gather(*(one(call) for call in group))
            events: list[Mapping[str, Any]] = []
            for call, (result, seconds) in zip(group, outcomes):  # reported and logged in call order
                if on_result is not None:
                    on_result(call, result, seconds)
                events.append(tool_result_event(_logged_arguments(call.get("arguments")), str(call.get("name")),
                                                result))
                contexts.extend(result.get("additional_context") or [])
                results.append(result)
            await session.append_many(events)  # one round trip per group, still one record per call
        if contexts:
            await session.append(context_message_event(contexts))
        return results

    return Response(run)
