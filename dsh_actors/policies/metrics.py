"""The metrics policy: a ``tools/execute`` wrapper that counts calls and times them.

Metrics go to a *sink*. :class:`RayMetricsSink` (the default) uses Ray's metrics API
(``ray.util.metrics``), exported by every node's metrics agent: a counter
``dsh_tool_calls_total{tool, outcome, code}`` and a histogram
``dsh_tool_call_seconds{tool}``. Any object with ``record(tool, outcome, code, seconds)``
is a sink (tests use an in-memory one).
"""

from __future__ import annotations

import time
from typing import Any, Awaitable, Callable, Protocol

from ..core.types import ToolExecution

__all__ = ["MetricsSink", "RayMetricsSink", "metrics_policy"]


class MetricsSink(Protocol):
    def record(self, tool: str, outcome: str, code: str, seconds: float) -> None: ...


class RayMetricsSink:
    """Ray metrics (created lazily in each process that records; picklable)."""

    BOUNDARIES = [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 120.0]

    def __init__(self) -> None:
        self._metrics: tuple[Any, Any] | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (RayMetricsSink, ())

    def _ensure(self) -> tuple[Any, Any]:
        if self._metrics is None:
            from ray.util import metrics

            calls = metrics.Counter("dsh_tool_calls_total", description="Tool calls by outcome.",
                                    tag_keys=("tool", "outcome", "code"))
            seconds = metrics.Histogram("dsh_tool_call_seconds", description="Tool call latency (tools/execute).",
                                        boundaries=self.BOUNDARIES, tag_keys=("tool",))
            self._metrics = (calls, seconds)
        return self._metrics

    def record(self, tool: str, outcome: str, code: str, seconds: float) -> None:
        calls, latency = self._ensure()
        calls.inc(1.0, tags={"tool": tool, "outcome": outcome, "code": code})
        latency.observe(seconds, tags={"tool": tool})


def metrics_policy(sink: MetricsSink | None = None) -> Callable[..., Awaitable[Any]]:
    """A ``tools/execute`` listener recording each call's outcome and duration."""
    target = sink if sink is not None else RayMetricsSink()

    async def measure(execution: ToolExecution, call_next: Callable[[], Awaitable[Any]]) -> Any:
        start = time.perf_counter()
        result = await call_next()
        error = result.get("error") if hasattr(result, "get") else None
        code = error.get("code", "") if isinstance(error, dict) else ""
        try:
            target.record(execution.name, "error" if result["is_error"] else "ok", code,
                          time.perf_counter() - start)
        except Exception:  # metrics must never change a call's outcome
            pass
        return result

    measure.__name__ = "metrics_policy"
    return measure
