"""The fleet's metrics, through ``ray.util.metrics``: every node's are on Ray's metrics
endpoint (``http://<node>:<metrics-export-port>/metrics``, scraped by Prometheus, on Ray's
dashboard), named ``ray_<name>`` there (counters end in ``_total``).

=============================  =========  ====================================  ==================================
name                           kind       labels                                what it counts
=============================  =========  ====================================  ==================================
``dsh_tool_calls``             counter    ``tool``, ``outcome``, ``code``        calls ended: ``ok``, ``error`` (with
                                                                                 its ``code``) or ``denied``
``dsh_tool_call_ms``           histogram  ``tool``                              a call's time in its executor
``dsh_tool_calls_in_flight``   gauge      —                                     calls running in an executor
``dsh_policy_denials``         counter    ``stage``, ``kind``, ``tool``          denials (``pre_execute``,
                                                                                 ``approval``, ``guards``) and
                                                                                 blocks (``post_execute``)
``dsh_approvals_pending``      gauge      —                                     asks waiting for an answer
``dsh_sandbox_runs``           counter    ``backend``, ``outcome``               ``run_code`` programs run
``dsh_model_requests``         counter    ``model``, ``outcome``                 model requests (``ok`` or its stop)
``dsh_model_tokens``           counter    ``model``, ``kind``                    ``prompt`` / ``completion`` tokens
``dsh_model_request_ms``       histogram  ``model``                             a model request's time
``dsh_episodes``               counter    ``status``, ``stop``                   episodes ended
=============================  =========  ====================================  ==================================

Labels are low-cardinality by design: never a call id, an agent id or an episode id.
Ray adds ``WorkerId``, ``NodeAddress`` and ``SessionName`` to each series.

Recording costs a dict update under a lock: a daemon thread hands what gathered to Ray
once a second (Ray's own export is every few seconds), so no call pays for a metrics
call. A process that is not connected to Ray records nothing, nor one whose environment
says ``DSH_METRICS=off``.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable

__all__ = ["METRICS", "call_ended", "count", "gauge", "gauge_from", "observe"]

_MS = [1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10_000.0, 30_000.0, 60_000.0,
       300_000.0]

METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "dsh_tool_calls": ("counter", "Tool calls ended, by tool, outcome (ok, error, denied) and error code",
                       ("tool", "outcome", "code")),
    "dsh_tool_call_ms": ("histogram", "A tool call's time in its executor (ms)", ("tool",)),
    "dsh_tool_calls_in_flight": ("gauge", "Tool calls running in an executor", ()),
    "dsh_policy_denials": ("counter", "Calls denied (pre_execute, approval, guards) or blocked (post_execute)",
                           ("stage", "kind", "tool")),
    "dsh_approvals_pending": ("gauge", "Asks waiting for an answer", ()),
    "dsh_sandbox_runs": ("counter", "run_code programs run, by backend and outcome", ("backend", "outcome")),
    "dsh_model_requests": ("counter", "Model requests, by model and outcome (ok or the stop)", ("model", "outcome")),
    "dsh_model_tokens": ("counter", "Model tokens, by model and kind (prompt, completion)", ("model", "kind")),
    "dsh_model_request_ms": ("histogram", "A model request's time (ms)", ("model",)),
    "dsh_episodes": ("counter", "Episodes ended, by status and stop", ("status", "stop")),
}
"""Every metric: its kind, description and label names."""


class _Recorder:
    """What this process recorded since the last flush, and the thread that flushes it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[tuple[str, tuple[str, ...]], float] = {}
        self.values: list[tuple[str, tuple[str, ...], float]] = []
        self.gauges: dict[tuple[str, tuple[str, ...]], float] = {}
        self.sources: dict[tuple[str, tuple[str, ...]], Any] = {}
        self.made: dict[str, Any] = {}
        self.thread: threading.Thread | None = None
        self.off = os.environ.get("DSH_METRICS", "on").lower() in ("0", "off", "false", "no")

    def started(self) -> bool:
        if self.thread is not None:
            return True
        if self.off:
            return False
        import ray

        if not ray.is_initialized():
            return False
        with self.lock:
            if self.thread is None:
                self.made = {}
                self.thread = threading.Thread(target=self._loop, name="dsh-metrics", daemon=True)
                self.thread.start()
        return True

    def forked(self) -> None:
        """In a forked child: nothing recorded, no flusher (the parent's is not here)."""
        self.lock = threading.Lock()
        self.counts, self.values, self.gauges, self.sources, self.made, self.thread = {}, [], {}, {}, {}, None

    def _metric(self, name: str) -> Any:
        metric = self.made.get(name)
        if metric is None:
            from ray.util import metrics

            kind, description, labels = METRICS[name]
            if kind == "counter":
                metric = metrics.Counter(name, description=description, tag_keys=labels)
            elif kind == "histogram":
                metric = metrics.Histogram(name, description=description, boundaries=_MS, tag_keys=labels)
            else:
                metric = metrics.Gauge(name, description=description, tag_keys=labels)
            self.made[name] = metric
        return metric

    def flush(self) -> None:
        with self.lock:
            counts, values, gauges = self.counts, self.values, dict(self.gauges)
            self.counts, self.values = {}, []
            sources = list(self.sources.items())
        for key, read in sources:
            try:
                gauges[key] = float(read())
            except Exception:  # noqa: BLE001 - a source that fails is skipped this time
                pass
        for (name, tags), value in counts.items():
            self._metric(name).inc(value, dict(zip(METRICS[name][2], tags)))
        for name, tags, value in values:
            self._metric(name).observe(value, dict(zip(METRICS[name][2], tags)))
        for (name, tags), value in gauges.items():
            self._metric(name).set(value, dict(zip(METRICS[name][2], tags)) or None)

    def _loop(self) -> None:
        import time

        while True:
            time.sleep(1.0)
            try:
                self.flush()
            except Exception:  # noqa: BLE001 - metrics must never take a process down
                pass


_recorder = _Recorder()
os.register_at_fork(after_in_child=_recorder.forked)


def count(name: str, *tags: str, value: float = 1.0) -> None:
    """Add ``value`` to the counter ``name`` with these label values (in :data:`METRICS` order)."""
    if _recorder.started():
        key = (name, tags)
        with _recorder.lock:
            _recorder.counts[key] = _recorder.counts.get(key, 0.0) + value


def observe(name: str, value: float, *tags: str) -> None:
    """One observation of the histogram ``name``."""
    if _recorder.started():
        with _recorder.lock:
            _recorder.values.append((name, tags, value))


def gauge(name: str, value: float, *tags: str) -> None:
    """Set the gauge ``name`` (sent at the next flush: the last value wins)."""
    if _recorder.started():
        with _recorder.lock:
            _recorder.gauges[(name, tags)] = value


def gauge_from(name: str, read: Callable[[], float], *tags: str) -> None:
    """Set the gauge ``name`` from ``read()`` at every flush (a value that changes per call,
    such as calls in flight, costs the calls nothing)."""
    if _recorder.started():
        with _recorder.lock:
            _recorder.sources[(name, tags)] = read


def call_ended(tool: str, outcome: str, code: str, ms: float) -> None:
    """One tool call's count and latency, under one lock (the executor's per-call path)."""
    if _recorder.started():
        key = ("dsh_tool_calls", (tool, outcome, code))
        with _recorder.lock:
            _recorder.counts[key] = _recorder.counts.get(key, 0.0) + 1.0
            _recorder.values.append(("dsh_tool_call_ms", (tool,), ms))
