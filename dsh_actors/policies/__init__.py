"""Reference policies: ``tools/execute`` wrappers for timeouts, retries and metrics."""

from .breaker import Breaker, BreakerOpenError, breaker_policy
from .metrics import MetricsSink, RayMetricsSink, metrics_policy
from .retry import retry_policy
from .timeout import TOOL_TIMEOUT, deadline_policy, timed_out, timeout_policy

__all__ = [
    "TOOL_TIMEOUT",
    "Breaker",
    "BreakerOpenError",
    "MetricsSink",
    "RayMetricsSink",
    "breaker_policy",
    "deadline_policy",
    "metrics_policy",
    "retry_policy",
    "timed_out",
    "timeout_policy",
]
