"""Reference policies: ``tools/execute`` wrappers for timeouts, retries and metrics."""

from .metrics import MetricsSink, RayMetricsSink, metrics_policy
from .retry import retry_policy
from .timeout import TOOL_TIMEOUT, timed_out, timeout_policy

__all__ = [
    "TOOL_TIMEOUT",
    "MetricsSink",
    "RayMetricsSink",
    "metrics_policy",
    "retry_policy",
    "timed_out",
    "timeout_policy",
]
