"""What a registry is made with: one frozen, validated-once value.

The client builds it from ``ToolRegistry.connect``'s arguments (so misuse raises in the
caller, before any actor starts) and hands it to the registry actor, which reads it and
never validates it again. Connecting to a registry that already runs compares the parts
that must agree (:meth:`RegistryConfig.conflicts_with`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ...core.errors import DefinitionError
from ...core.registry import MODES

__all__ = ["CODE_DISPATCHES", "SCOPE_HOSTINGS", "RegistryConfig"]

SCOPE_HOSTINGS = ("dedicated", "shared")
"""How agent scopes are hosted: one actor per agent, or many agents per host actor."""

CODE_DISPATCHES = ("in-task", "queue-actor")
"""Where a Code Mode run's sub-calls are queued: on its own executor, or in a pooled queue actor."""


def _one_of(what: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise DefinitionError(f"{what} must be one of {', '.join(choices)}; got {value!r}")


def _count(what: str, value: Any, *, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise DefinitionError(f"{what} must be a positive int{' or None' if optional else ''}; got {value!r}")


@dataclasses.dataclass(frozen=True)
class RegistryConfig:
    """A registry's name and shape. ``executors`` and ``scope_hosts`` of ``None`` mean one
    per alive node, at least two (counted when the registry starts)."""

    name: str
    namespace: str
    detached: bool = False
    mode: str = "native"
    code_runtime: Any = None
    code_dispatch: str = "in-task"
    queues: int = 2
    executors: int | None = None
    executor_concurrency: int = 10_000
    scope_hosting: str = "dedicated"
    scope_hosts: int | None = None
    sessions: str | None = None
    """Its agents' session log ids (:func:`~.wire.agent_session`): ``None``, the agent ids."""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise DefinitionError(f"a registry needs a non-empty str name; got {self.name!r}")
        _one_of("tools mode", self.mode, MODES)
        _one_of("scope_hosting", self.scope_hosting, SCOPE_HOSTINGS)
        _one_of("code_dispatch", self.code_dispatch, CODE_DISPATCHES)
        _count("executors", self.executors, optional=True)
        _count("scope_hosts", self.scope_hosts, optional=True)
        _count("queues", self.queues, optional=False)
        _count("executor_concurrency", self.executor_concurrency, optional=False)
        if self.sessions is not None and (not isinstance(self.sessions, str) or not self.sessions):
            raise DefinitionError(f"sessions must be a non-empty str or None; got {self.sessions!r}")

    def described(self) -> dict[str, Any]:
        """What clients ask a running registry for: its mode, hosting, and whether (and in
        which dialect) it runs code."""
        from ...codemode.runtime import dialect

        return {"mode": self.mode, "code_runtime": self.code_runtime is not None,
                "scope_hosting": self.scope_hosting, "sessions": self.sessions,
                "dialect": dialect(self.code_runtime) if self.code_runtime is not None else None}

    def conflicts_with(self, running: dict[str, Any]) -> str | None:
        """Why a connect with this config cannot use the registry that ``running`` describes
        (its :meth:`described`), or ``None`` when it can."""
        if running["mode"] != self.mode:
            return f'registry "{self.name}" already runs in mode "{running["mode"]}", not "{self.mode}"'
        if running["scope_hosting"] != self.scope_hosting:
            return (f'registry "{self.name}" already hosts its scopes "{running["scope_hosting"]}", not '
                    f'"{self.scope_hosting}"; connect with scope_hosting="{running["scope_hosting"]}"')
        return None
