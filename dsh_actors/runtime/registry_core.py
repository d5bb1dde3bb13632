"""The registry's store, without Ray: the global layer, the version, the agents' journals.

:class:`RegistryCore` holds the global tools, guards and listeners (a
:class:`~dsh_actors.core.registry.RegistryState`), each registration's undo step and owner,
the version it publishes on every change, and, per agent, the journal of that agent's
scope changes (replayed into a scope host that replaces a dead one). It never validates a
definition twice: what reaches it was frozen once by the client.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any, Callable

from ..core.errors import error_message
from ..core.pipeline import ExecutionPlan
from ..core.registry import Chains, RegistryState, check_frozen
from ..core.types import ToolDefinition, ToolSchema
from .placement import execution_options
from .wire import PlanTicket

__all__ = ["Journal", "RegistryCore"]

log = logging.getLogger("dsh_actors.runtime")

Journal = list[tuple[int, str, Any]]
"""One agent's scope changes, in order: (registration id, kind, validated payload)."""


class RegistryCore:
    """The registry's state and bookkeeping. ``publish`` is told each new version (the
    actor writes it where executions read it)."""

    def __init__(self, name: str, namespace: str, publish: Callable[[int], None], *,
                 transport: ToolDefinition | None = None, version: int = 0) -> None:
        self.name = name
        self.namespace = namespace
        self.state = RegistryState(reserved=[transport] if transport is not None else [])
        self._publish = publish
        self.version = version  # a recreated registry starts from the last one published
        self._ids = itertools.count(1)
        self._undo: dict[int, tuple[str | None, Callable[[], None]]] = {}
        self._by_owner: dict[str, list[int]] = {}
        self.journals: dict[str, Journal] = {}
        self._ticket: PlanTicket | None = None

    def bump(self) -> int:
        """Publish a new version: every cached plan older than it is refused by executions."""
        self.version += 1
        self._publish(self.version)
        return self.version

    # global registrations

    def _track(self, owner: str | None, undo: Callable[[], None]) -> int:
        reg_id = next(self._ids)
        self._undo[reg_id] = (owner, undo)
        if owner is not None:
            self._by_owner.setdefault(owner, []).append(reg_id)
        self.bump()
        return reg_id

    def register(self, frozen: ToolDefinition, owner: str | None) -> int:
        """Register a definition the client froze (:func:`~dsh_actors.core.registry.snapshot_definition`)."""
        execution_options(check_frozen(frozen))  # misuse of Ray options fails loud, now
        return self._track(owner, self.state.add_tool(frozen, frozen=True))

    def guard(self, guard: Callable[..., Any], owner: str | None) -> int:
        return self._track(owner, self.state.add_guard(guard, None))

    def on(self, event: str, listener: Callable[..., Any], prepend: bool, owner: str | None) -> int:
        return self._track(owner, self.state.add_listener(event, listener, None, prepend))

    def on_change(self, listener: Callable[[], Any], owner: str | None) -> int:
        return self._track(owner, self.state.add_change_listener(listener))

    def dispose(self, reg_id: int) -> None:
        entry = self._undo.pop(reg_id, None)
        if entry is None:
            return
        owner, undo = entry
        if owner is not None and reg_id in self._by_owner.get(owner, ()):
            self._by_owner[owner].remove(reg_id)
        try:
            undo()
        finally:
            self.bump()

    def dispose_owner(self, owner: str) -> int:
        """Dispose every registration of ``owner``, last first; returns how many."""
        ids = self._by_owner.pop(owner, [])
        for reg_id in reversed(ids):
            try:
                self.dispose(reg_id)
            except Exception as exc:  # a change listener failing must not keep the rest alive
                log.warning("disposing registration %s of %s: %s", reg_id, owner, error_message(exc))
        return len(ids)

    # the agents' journals (each scope change is recorded and published in one step)

    def scope_changed(self, agent: str, reg_id: int, kind: str, payload: Any) -> int:
        """Record one validated change of ``agent``'s scope and publish a new version."""
        self.journals.setdefault(agent, []).append((reg_id, kind, payload))
        return self.bump()

    def scope_disposed(self, agent: str, reg_id: int) -> int:
        """Forget change ``reg_id`` of ``agent``'s scope and publish a new version."""
        self.journals[agent] = [entry for entry in self.journals.get(agent, []) if entry[0] != reg_id]
        return self.bump()

    def drop_journal(self, agent: str) -> bool:
        """Forget ``agent``'s journal (its scope closed); whether it had changed anything."""
        return bool(self.journals.pop(agent, None))

    # views and plans

    def global_names(self) -> list[str]:
        return list(self.state.globals)

    def base_plan(self) -> tuple[int, ExecutionPlan, Chains]:
        """What a scope composes its agent's plan from: the version, the global plan and
        the global listeners (its own listeners take their places among them)."""
        return self.version, self.state.base_plan(), self.state.chains

    def plan_ticket(self) -> PlanTicket:
        """The ticket for calls with no agent (the global view), made once per version."""
        version, plan, _ = self.base_plan()
        if self._ticket is None or self._ticket.version != version:
            self._ticket = PlanTicket.of(version, plan)
        return self._ticket

    def get(self, name: str) -> ToolDefinition | None:
        return self.state.plan(None).tools.get(name)

    def visible(self) -> list[ToolDefinition]:
        return list(self.state.plan(None).tools.values())

    def schemas(self) -> list[ToolSchema]:
        return [d.schema() for d in self.state.plan(None).tools.values()]
