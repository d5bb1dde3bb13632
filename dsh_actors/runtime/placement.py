"""Where a tool body runs: the Ray options a definition declares.

A definition declares them under ``extras["ray_options"]``::

    define_tool(..., extras={"ray_options": {"num_gpus": 1, "runtime_env": {...}}})

Allowed keys: ``num_cpus``, ``num_gpus``, ``memory``, ``resources``, ``runtime_env``,
``scheduling_strategy``, ``accelerator_type``, ``label_selector``. Executions never
retry by default (a tool with side effects must not run twice); a definition that sets
``extras["idempotent"] = True`` may also set ``max_retries``.

A definition with a ``timeout_ms`` budget may also declare ``extras["force_stop"] = True``:
when its budget (plus ``extras["force_stop_grace_ms"]``, default 200 ms, for a
cooperative stop) runs out, or its caller aborts and it has not stopped within the grace,
its task is cancelled for real and the caller gets one ``TOOL_TIMEOUT`` (or ``CANCELLED``)
result.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..core.errors import DefinitionError
from ..core.types import ToolDefinition

__all__ = ["ALLOWED_OPTIONS", "execution_options", "force_stop"]

DEFAULT_FORCE_STOP_GRACE_MS = 200.0

ALLOWED_OPTIONS = frozenset({
    "num_cpus", "num_gpus", "memory", "resources", "runtime_env", "scheduling_strategy",
    "accelerator_type", "label_selector",
})


def execution_options(definition: ToolDefinition) -> dict[str, Any]:
    """The task options for ``definition``'s executions; misuse raises at registration."""
    raw = definition.extras.get("ray_options") or {}
    if not isinstance(raw, Mapping):
        raise DefinitionError(f'tool "{definition.name}" extras["ray_options"] must be a mapping')
    options = dict(raw)
    retries = options.pop("max_retries", 0)
    unknown = sorted(set(options) - ALLOWED_OPTIONS)
    if unknown:
        raise DefinitionError(
            f'tool "{definition.name}" declares unsupported Ray options {unknown}; allowed: {sorted(ALLOWED_OPTIONS)}'
        )
    if retries and definition.extras.get("idempotent") is not True:
        raise DefinitionError(
            f'tool "{definition.name}" sets max_retries without extras["idempotent"] = True: '
            "a retried execution would run the tool body again"
        )
    for key in ("num_cpus", "num_gpus", "memory"):
        value = options.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise DefinitionError(f'tool "{definition.name}" ray option {key} must be a non-negative number')
    options["max_retries"] = retries
    force_stop(definition)  # misuse fails loud at registration
    return options


def force_stop(definition: ToolDefinition) -> tuple[float, float] | None:
    """``(timeout_ms, grace_ms)`` when ``definition`` may be force-stopped, else ``None``."""
    if definition.extras.get("force_stop") is not True:
        return None
    if definition.timeout_ms is None:
        raise DefinitionError(
            f'tool "{definition.name}" declares force_stop without timeout_ms: a force stop needs a budget'
        )
    grace = definition.extras.get("force_stop_grace_ms", DEFAULT_FORCE_STOP_GRACE_MS)
    if isinstance(grace, bool) or not isinstance(grace, (int, float)) or grace < 0:
        raise DefinitionError(f'tool "{definition.name}" force_stop_grace_ms must be a non-negative number')
    return float(definition.timeout_ms), float(grace)
