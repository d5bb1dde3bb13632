"""Stage 6 — ``tools/post-execute``: inspect the result, replace content, block, add context.

Listeners get ``(execution, result, call_next)``; the base returns accept.

* accept keeps ``is_error``, ``error`` and ``meta`` (it can never turn a failure into a
  success); supplied ``content`` replaces the content; its contexts are appended.
* block gives ``{content: feedback, is_error: True}``; ``error``, ``meta`` and every
  earlier context are dropped; only the decision's own contexts survive.
"""

from __future__ import annotations

from typing import Any

from ..decisions import accept, parse_post_decision
from ..types import ToolExecution, ToolExecutionResult
from .chain import run_chain
from .plan import ExecutionPlan

__all__ = ["apply_post_decision", "run_post_execute"]


async def _accept() -> dict[str, Any]:
    return accept()


def apply_post_decision(result: ToolExecutionResult, decision: dict[str, Any]) -> ToolExecutionResult:
    """The result a validated post-execute decision makes of ``result``."""
    contexts = decision.get("additional_context") or []
    if decision["kind"] == "block":
        blocked: dict[str, Any] = {"content": decision["feedback"], "is_error": True}
        if contexts:
            blocked["additional_context"] = contexts
        return ToolExecutionResult(blocked)
    merged = [*(result.get("additional_context") or []), *contexts]
    return result.evolve(
        content=decision.get("content", result["content"]),
        additional_context=merged if merged else ...,
    )


async def run_post_execute(execution: ToolExecution, result: ToolExecutionResult, plan: ExecutionPlan) -> ToolExecutionResult:
    """The post-policy result (raises on a listener failure or a malformed decision)."""
    if not plan.post_execute:
        return result
    decision = parse_post_decision(await run_chain(plan.post_execute, (execution, result), _accept))
    return apply_post_decision(result, decision)
