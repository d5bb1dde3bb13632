"""Stage 4 — guards: monotonic denials after the pre-execute waterfall (and any ask).

Global guards run first, then the calling agent's, each in registration order; the
first non-``None`` answer is the denial reason and the rest are not called. No
listener can turn a guard's denial back into permission.
"""

from __future__ import annotations

import inspect

from ..errors import HarnessError
from ..types import ToolExecution
from .plan import ExecutionPlan

__all__ = ["GuardError", "run_guards"]


class GuardError(HarnessError):
    """A guard answered with something other than a reason (str) or ``None``."""

    code = "MALFORMED_GUARD"


async def run_guards(execution: ToolExecution, plan: ExecutionPlan) -> str | None:
    """The first guard's denial reason, or ``None`` when every guard passes.

    User guards are synchronous (registration refuses coroutine functions); the runtime's
    adapters for guards living in policy actors return an awaitable, which is awaited.
    """
    for guard in plan.guards:
        reason = guard(execution)
        if inspect.isawaitable(reason):
            reason = await reason
        if reason is None:
            continue
        if not isinstance(reason, str):
            raise GuardError(
                f"guard {getattr(guard, '__name__', guard)!r} returned {type(reason).__name__}; "
                "a guard returns a denial reason (str) or None"
            )
        return reason
    return None
