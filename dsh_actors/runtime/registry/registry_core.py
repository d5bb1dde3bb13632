"""The registry's store, without Ray: the global layer, the version, the agents' journals.

:class:`RegistryCore` holds the global tools, guards and listeners (a
:class:`~dsh_actors.core.registry.RegistryState`), each registration's undo step and owner,
the version it publishes on every change, and, per agent, the journal of that agent's
scope changes (replayed into a scope host that replaces a dead one). It never validates a
definition twice: what reaches it was frozen once by the client.
"""

from __future__ import annotations

import collections
import itertools
import logging
from typing import Any, Callable

from ...core.errors import error_message
from ...core.pipeline import ExecutionPlan
from ...core.registry import Chains, RegistryState
from ...core.definitions import check_frozen
from ...core.types import ToolDefinition, ToolSchema
from ..executor.placement import execution_options
from ..wire import PlanTicket

__all__ = ["Journal", "RegistryCore"]

log = logging.getLogger("dsh_actors.runtime")

_SCOPED_LOG = 8192
"""Journal gains and losses kept for the version subscription (older asks get the whole set)."""

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
        # When an agent got or lost its journal (the version then): what the version
        # subscription tells clients, so they know which agents' plans are the base plan.
        self._scoped_log: collections.deque[tuple[int, str]] = collections.deque(maxlen=_SCOPED_LOG)
        self._scoped_log_from = self.version  # changes after this version are all in the log

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
        new = agent not in self.journals
        self.journals.setdefault(agent, []).append((reg_id, kind, payload))
        version = self.bump()
        if new:
            self._scoped_changed(agent)
        return version

    def scope_disposed(self, agent: str, reg_id: int) -> int:
        """Forget change ``reg_id`` of ``agent``'s scope and publish a new version."""
        self.journals[agent] = [entry for entry in self.journals.get(agent, []) if entry[0] != reg_id]
        return self.bump()

    def drop_journal(self, agent: str) -> bool:
        """Forget ``agent``'s journal (its scope closed); whether it had changed anything.
        The caller publishes a new version when it had (else nothing changed for anyone)."""
        journal = self.journals.pop(agent, None)
        if journal is not None:
            self._scoped_changed(agent, self.version + 1 if journal else self.version)
        return bool(journal)

    def _scoped_changed(self, agent: str, version: int | None = None) -> None:
        if len(self._scoped_log) == self._scoped_log.maxlen:
            self._scoped_log_from = self._scoped_log[0][0]  # about to be dropped: older asks get everything
        self._scoped_log.append((self.version if version is None else version, agent))

    def scoped_since(self, known: int) -> tuple[bool, list[Any]]:
        """Which agents have a journal (a scope that may differ from the base plan), for a
        client that knew version ``known``: ``(False, [(agent, has one now), …])`` for
        the agents that gained or lost one since, or ``(True, [every agent with one])``
        when the log does not reach back that far (a new client: ``known`` 0). An agent
        with no journal has the base plan as its plan (its close has nothing to dispose)."""
        if known < self._scoped_log_from or known == 0:
            return True, sorted(self.journals)
        changed: set[str] = set()
        for version, agent in reversed(self._scoped_log):
            if version <= known:
                break
            changed.add(agent)
        return False, [(agent, agent in self.journals) for agent in sorted(changed)]

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
