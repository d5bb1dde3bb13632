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
call. A process that is not connected to Ray records nothing.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["METRICS", "count", "gauge", "observe"]

_MS = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 30_000, 60_000, 300_000]

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
        self.made: dict[str, Any] = {}
        self.thread: threading.Thread | None = None
        self.pid = 0

    def started(self) -> bool:
        import os

        import ray

        if self.thread is not None and self.pid == os.getpid():
            return True
        if not ray.is_initialized():
            return False
        self.pid, self.made = os.getpid(), {}
        self.thread = threading.Thread(target=self._loop, name="dsh-metrics", daemon=True)
        self.thread.start()
        return True

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
