"""Named policies an episode can load (``"policies": [...]``).

* ``deny-destructive`` — a pre-execute gate: destructive ``bash`` commands are denied
  (recursive deletes, raw device writes, formatting, shutdowns: :mod:`.destructive`).
* ``redact-secrets`` — post-execute: results mentioning a password or a private key are blocked.
* ``ask-writes`` — pre-execute: ``write_file`` / ``edit_file`` ask for approval (without a
  queue mounted that degrades to deny).
* ``timeout`` — the reference timeout wrapper (``timeout_ms`` budgets).
* ``retry`` — the reference retry wrapper (idempotent tools).
"""

from __future__ import annotations

import re
from typing import Any, Callable

from ..core.decisions import accept, ask, block, deny
from ..core.registry import Event
from ..policies import retry_policy, timeout_policy
from .destructive import destructive

__all__ = ["NAMED_POLICIES", "policy_listeners"]

_SECRET = re.compile(r"password|BEGIN [A-Z ]*PRIVATE KEY", re.IGNORECASE)


async def deny_destructive(execution: Any, call_next: Callable[[], Any]) -> Any:
    if execution.name == "bash":
        reason = destructive(str(execution.arguments.get("command", "")))
        if reason is not None:
            return deny(f"destructive commands are not allowed in this evaluation ({reason})")
    return await call_next()


async def redact_secrets(execution: Any, result: Any, call_next: Callable[[], Any]) -> Any:
    if _SECRET.search(result.text):
        return block("the output contained a secret and was withheld; do not print secrets")
    return accept()


async def ask_writes(execution: Any, call_next: Callable[[], Any]) -> Any:
    if execution.name in ("write_file", "edit_file"):
        return ask(f"{execution.name} changes the workspace")
    return await call_next()


NAMED_POLICIES: dict[str, tuple[Event, Any]] = {
    "deny-destructive": ("tools/pre-execute", deny_destructive),
    "redact-secrets": ("tools/post-execute", redact_secrets),
    "ask-writes": ("tools/pre-execute", ask_writes),
    "timeout": ("tools/execute", timeout_policy),
    "retry": ("tools/execute", retry_policy(3)),
}


def policy_listeners(names: list[str]) -> list[tuple[Event, Any]]:
    """``(event, listener)`` for each named policy; an unknown name raises with the list."""
    unknown = [n for n in names if n not in NAMED_POLICIES]
    if unknown:
        raise ValueError(f"unknown policies {unknown}; known: {', '.join(sorted(NAMED_POLICIES))}")
    return [NAMED_POLICIES[n] for n in names]
