"""Where a tool body runs: the Ray options a definition declares.

A definition declares them under ``extras["ray_options"]``::

    define_tool(..., extras={"ray_options": {"num_gpus": 1, "runtime_env": {...}}})

Allowed keys: ``num_cpus``, ``num_gpus``, ``memory``, ``resources``, ``runtime_env``,
``scheduling_strategy``, ``accelerator_type``, ``label_selector``. Executions never
retry by default (a tool with side effects must not run twice); a definition that sets
``extras["idempotent"] = True`` may also set ``max_retries``.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..core.errors import DefinitionError
from ..core.types import ToolDefinition

__all__ = ["ALLOWED_OPTIONS", "execution_options"]

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
    return options
