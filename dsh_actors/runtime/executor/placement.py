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

A body that needs resources no node has (a GPU on a CPU-only cluster) waits up to
``extras["placement_timeout_s"]`` (default 30 s) for such a node to join, then its call
fails with ``PLACEMENT_FAILED``; the body never starts.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ...core.errors import DefinitionError
from ...core.types import ToolDefinition

__all__ = ["ALLOWED_OPTIONS", "demand", "execution_options", "feasible", "force_stop"]

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


def demand(options: Mapping[str, Any]) -> dict[str, float]:
    """The resources a body task with ``options`` needs on one node (a task takes one CPU
    unless told otherwise)."""
    needed: dict[str, float] = {"CPU": float(options.get("num_cpus", 1) or 0)}
    if options.get("num_gpus"):
        needed["GPU"] = float(options["num_gpus"])
    if options.get("memory"):
        needed["memory"] = float(options["memory"])
    for name, amount in (options.get("resources") or {}).items():
        needed[str(name)] = float(amount)
    if options.get("accelerator_type"):
        needed[f"accelerator_type:{options['accelerator_type']}"] = 0.001
    return {name: amount for name, amount in needed.items() if amount > 0}


def feasible(needed: Mapping[str, float], nodes: Sequence[Mapping[str, float]]) -> bool:
    """Whether some node's total resources cover ``needed`` (busy or not)."""
    return any(all(node.get(name, 0.0) >= amount for name, amount in needed.items()) for node in nodes)
