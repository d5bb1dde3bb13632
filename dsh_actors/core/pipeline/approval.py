"""Stage 3 — resolve an ``ask`` through the approval seam.

No seam ⇒ deny (with the ask's reason, or a default); a call with no agent ⇒ deny
without asking anyone. The seam's four outcomes map to allow or to a denial text; any
other answer is a non-conforming seam and fails the call (``unreachable``).
"""

from __future__ import annotations

from typing import Any

from ..errors import unreachable
from ..types import ToolExecution
from .chain import settle
from .plan import ApprovalRequest, ExecutionPlan

__all__ = ["resolve_ask"]


async def resolve_ask(execution: ToolExecution, plan: ExecutionPlan, decision: dict[str, Any]) -> str | None:
    """``None`` when approval granted the call, else the denial reason."""
    name = execution.name
    reason = decision.get("reason")
    if plan.approval is None:
        return reason if reason is not None else f'tool "{name}" requires approval (not yet supported)'
    if execution.agent is None:
        return f'tool "{name}" requires approval, but the call has no agent to route it through'
    outcome = await settle(plan.approval.request(ApprovalRequest(
        agent=execution.agent, tool_name=name, call_id=execution.call_id,
        reason=reason, signal=execution.signal,
    )))
    if outcome == "allowed-once":
        return None
    if outcome == "rejected":
        return f'the user rejected tool "{name}"'
    if outcome == "cancelled":
        return f'approval for tool "{name}" was cancelled'
    if outcome == "unavailable":
        return f'tool "{name}" requires approval, but no approval channel is available'
    raise unreachable("approval outcome", outcome)
