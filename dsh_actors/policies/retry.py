"""The retry policy: a ``tools/execute`` wrapper that runs a failed call again.

Only where running again is safe: by default a call is retried when its result is an
error and its tool declares ``extras["idempotent"] = True``. Attempts stop early when the
call's signal aborts (a timeout registered *outside* this wrapper therefore bounds the
whole sequence; registered inside, it bounds each attempt).
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from ..core.types import ToolExecution

__all__ = ["retry_policy"]

RetryIf = Callable[[ToolExecution, Any], bool]


def _idempotent_error(execution: ToolExecution, result: Any) -> bool:
    definition = execution.definition
    return bool(result.is_error and definition is not None and definition.extras.get("idempotent") is True)


def retry_policy(max_attempts: int = 3, *, backoff_s: float = 0.05,
                 retry_if: RetryIf = _idempotent_error) -> Callable[..., Awaitable[Any]]:
    """A ``tools/execute`` listener making up to ``max_attempts`` attempts (backoff doubles)."""
    if not isinstance(max_attempts, int) or isinstance(max_attempts, bool) or max_attempts < 1:
        raise ValueError("max_attempts must be an int >= 1")
    if not (isinstance(backoff_s, (int, float)) and backoff_s >= 0):
        raise ValueError("backoff_s must be a non-negative number of seconds")

    async def retry(execution: ToolExecution, call_next: Callable[[], Awaitable[Any]]) -> Any:
        delay = backoff_s
        for attempt in range(1, max_attempts + 1):
            result = await call_next()
            signal = execution.signal
            if attempt == max_attempts or not retry_if(execution, result) or (signal is not None and signal.aborted):
                return result
            await asyncio.sleep(delay)
            delay *= 2
        return result  # pragma: no cover - the loop always returns

    retry.__name__ = f"retry_policy({max_attempts})"
    return retry
