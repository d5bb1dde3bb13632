"""Stage 2 — ``tools/pre-execute``: the reorderable allow / deny / ask gate.

Listeners get ``(execution, call_next)``; the base returns allow. The decision is
validated as an exact union: anything else fails the call closed.
"""

from __future__ import annotations

from typing import Any

from ..decisions import allow, parse_pre_decision
from ..types import ToolExecution
from .chain import run_chain
from .plan import ExecutionPlan

__all__ = ["run_pre_execute"]


async def _allow() -> dict[str, Any]:
    return allow()


async def run_pre_execute(execution: ToolExecution, plan: ExecutionPlan) -> dict[str, Any]:
    """The validated decision (raises on a listener failure or a malformed decision)."""
    if not plan.pre_execute:
        return allow()
    return parse_pre_decision(await run_chain(plan.pre_execute, (execution,), _allow))
