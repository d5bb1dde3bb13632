"""Named policies an episode can load (``"policies": [...]``): :data:`POLICY_HELP` says
what each does (``docs/episode-format.md`` lists them, generated from it)."""

from __future__ import annotations

import re
from typing import Any, Callable

from ..core.decisions import accept, ask, block, deny
from ..core.registry import Event
from ..policies import retry_policy, timeout_policy
from .destructive import destructive

__all__ = ["FLEET_LIMIT", "NAMED_POLICIES", "POLICY_HELP", "check_policy_names", "policy_listeners"]

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


FLEET_LIMIT = "fleet-limit:"

POLICY_HELP: dict[str, str] = {
    "deny-destructive": "a pre-execute gate: destructive `bash` commands are denied (recursive deletes, raw "
                        "device writes, formatting, shutdowns)",
    "redact-secrets": "post-execute: a result mentioning a password or a private key is blocked",
    "ask-writes": "pre-execute: `write_file` and `edit_file` ask for approval (answered by `--approvals`)",
    "timeout": "the reference timeout wrapper (a tool's `timeout_ms`)",
    "retry": "the reference retry wrapper: up to 3 attempts for tools marked idempotent",
    f"{FLEET_LIMIT}TOOLS=N,…": "at most N calls of those tools in flight at once across the whole fleet (`bash=4`; "
                               "`read_file+write_file=8` for a shared cap)",
}
"""Every named policy (and the fleet-limit form) and what it does."""


def check_policy_names(names: list[str]) -> None:
    """``ValueError`` naming what is wrong: unknown names, or a fleet limit that does not parse."""
    from ..runtime.limits import parse_fleet_limit

    unknown = [n for n in names if n not in NAMED_POLICIES and not n.startswith(FLEET_LIMIT)]
    if unknown:
        raise ValueError(f"unknown policies {unknown}; known: {', '.join(sorted(NAMED_POLICIES))}, "
                         f"{FLEET_LIMIT}TOOL=N")
    for name in names:
        if name.startswith(FLEET_LIMIT):
            parse_fleet_limit(name[len(FLEET_LIMIT):])


def check_fleet_caps(episodes: list[tuple[str, list[str]]]) -> None:
    """``ValueError`` when episodes of one job give one group of tools two caps (``(id,
    policy names)`` each): the fleet's limiter holds one cap per group, and a silent last
    word would let ``bash=1`` episodes run beside ``bash=8`` ones at eight."""
    from ..runtime.limits import parse_fleet_limit

    seen: dict[str, tuple[int, str]] = {}  # group -> (cap, the first episode to give it)
    for episode_id, names in episodes:
        for name in names:
            if not name.startswith(FLEET_LIMIT):
                continue
            for tools, cap in parse_fleet_limit(name[len(FLEET_LIMIT):]).items():
                group = "+".join(sorted(tools))
                first = seen.setdefault(group, (cap, episode_id))
                if first[0] != cap:
                    raise ValueError(f"episodes {first[1]!r} and {episode_id!r} give the fleet limit {group!r} two "
                                     f"caps ({first[0]} and {cap}); one group has one cap in a job")


def policy_listeners(names: list[str]) -> list[tuple[Event, Any]]:
    """``(event, listener)`` for each named policy; an unknown name raises with the list."""
    from ..runtime.limits import fleet_limit, parse_fleet_limit

    check_policy_names(names)
    return [("tools/execute", fleet_limit(parse_fleet_limit(n[len(FLEET_LIMIT):])))
            if n.startswith(FLEET_LIMIT) else NAMED_POLICIES[n] for n in names]
