"""The timeout policy: the reference ``tools/execute`` wrapper for ``timeout_ms`` budgets.

For each call, the budget is the ``timeout_ms`` of the definition the call resolves to
in the caller's view (a scoped shadow's budget wins). With no budget the call passes
through untouched — the tool sees the caller's own signal. With one, the wrapper sets
``execution.signal`` to a deadline fused with the caller's signal (first reason wins),
awaits the rest of the chain, and if the deadline fired replaces the result with
``Error: tool call timed out after <budget>ms`` (``ToolTimeoutError`` /
``TOOL_TIMEOUT``) — even when the tool returned. Afterwards the caller's signal is put
back (or removed), so post-execute sees the original.

The deadline is cooperative: it tells the tool (``ctx.signal``); a tool that ignores it
runs on. A definition with ``extras["force_stop"] = True`` is also stopped for real by
the Ray runtime, which cancels its task when the budget runs out.

Register it first to bound everything after it (a retry wrapper included), or after a
retry wrapper to bound each attempt.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Mapping

from ..core.errors import ToolTimeoutError, error_result
from ..core.signal import TimeoutReason, deadline_signal
from ..core.types import ToolExecution, ToolExecutionResult

__all__ = ["TOOL_TIMEOUT", "deadline_policy", "timed_out", "timeout_policy"]

TOOL_TIMEOUT = "TOOL_TIMEOUT"


def timed_out(reason: Any, code: str | None = TOOL_TIMEOUT) -> TimeoutReason | None:
    """The :class:`TimeoutReason` in ``reason`` (a signal or a reason), matching ``code``."""
    reason = getattr(reason, "reason", reason)
    if isinstance(reason, TimeoutReason) and (code is None or reason.code == code):
        return reason
    return None


def deadline_policy(default_s: float, per_agent_s: Mapping[str, float] | None = None,
                    grace_s: float = 1.0) -> Callable[..., Awaitable[Any]]:
    """A ``tools/execute`` wrapper giving every call a deadline: the tool's own
    ``timeout_ms``, else its agent's entry in ``per_agent_s``, else ``default_s``. Unlike
    :func:`timeout_policy` it does not wait for a tool that ignores its signal: ``grace_s``
    after the deadline the call ends with ``TOOL_TIMEOUT`` and the rest of the chain is
    cancelled (an async body stops there; a plain body's thread runs on until it returns,
    its result discarded). The batch job puts it outermost, so no call can wait forever."""
    agents = dict(per_agent_s or {})

    async def deadline(execution: ToolExecution, call_next: Callable[[], Awaitable[Any]]) -> Any:
        definition = execution.definition
        own = definition.timeout_ms if definition is not None else None
        budget = own if own is not None else agents.get(execution.agent, default_s) * 1000.0
        caller = execution.signal
        signal, dispose = deadline_signal(
            time.monotonic() + budget / 1000.0, upstream=caller, reason=TimeoutReason(TOOL_TIMEOUT, budget))
        execution.signal = signal
        rest = asyncio.ensure_future(call_next())
        try:
            done, _ = await asyncio.wait({rest}, timeout=budget / 1000.0 + grace_s)
            if rest not in done:
                rest.cancel()
                return ToolExecutionResult(error_result(ToolTimeoutError(budget)))
            result = rest.result()
            if timed_out(signal) is not None:
                return ToolExecutionResult(error_result(ToolTimeoutError(budget)))
            return result
        except BaseException:
            rest.cancel()
            raise
        finally:
            dispose()
            execution.signal = caller

    deadline.__name__ = f"deadline_policy({default_s:g} s)"
    return deadline


async def timeout_policy(execution: ToolExecution, call_next: Callable[[], Awaitable[Any]]) -> Any:
    """The ``tools/execute`` listener: ``registry.on("tools/execute", timeout_policy)``."""
    definition = execution.definition
    budget = definition.timeout_ms if definition is not None else None
    if budget is None:
        return await call_next()
    caller = execution.signal
    deadline, dispose = deadline_signal(
        time.monotonic() + budget / 1000.0, upstream=caller, reason=TimeoutReason(TOOL_TIMEOUT, budget),
    )
    execution.signal = deadline
    try:
        result = await call_next()
        if timed_out(deadline) is not None:
            return ToolExecutionResult(error_result(ToolTimeoutError(budget)))
        return result
    finally:
        dispose()
        execution.signal = caller
