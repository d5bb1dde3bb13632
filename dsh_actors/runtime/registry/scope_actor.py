"""Agent scopes on Ray: each agent's scope lives in a scope host actor.

Two hostings, chosen when the registry is connected (:data:`~.registry_config.SCOPE_HOSTINGS`):
``dedicated`` — one host actor per agent (its own process: isolation, and a crash takes
one agent's scope with it); ``shared`` — agents hashed onto a fixed set of hosts spread
over the nodes, so a scope costs kilobytes and no process start. Either way a scope is
the same unit: its own state, its changes applied in order, its own ``close()``.

An agent's layer is the agent's scoped tools (shadowing same-named globals), restrictions,
guards and listeners (which hear only its calls; their order among the global listeners
comes from the registry's one registration sequence). It composes the agent's plan from
the registry's base plan and its layer, and reports every change to the registry, which
publishes the new version before the change's call returns. ``ScopeCore`` is the plain
class; :class:`ScopeHost` is the actor that keeps scopes and talks to the registry.

Every change, once validated, is also written to the registry's journal for this agent
(its frozen definition, compiled restriction, guard or listener, under its registration
id). When a host dies, the registry starts a new one from its agents' journals: each agent
keeps its shadows, restrictions, guards and listeners — it never comes back with more
tools than it had — and the registration ids its clients hold still dispose the same
things.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterable, Mapping

import ray

from ...core.pipeline import ExecutionPlan
from ...core.registry import Chains, ScopeLayer, check_listener, check_reserved, compose_plan
from ...core.definitions import check_frozen
from ...core.restrictions import compile_restriction
from ...core.types import ToolDefinition, ToolSchema
from ..executor.placement import execution_options
from ..wire import PlanTicket

__all__ = ["SCOPE_OPTIONS", "SHARED_HOST_CONCURRENCY", "ScopeCore", "ScopeHost", "ScopeHostService"]


class ScopeCore:
    """An agent's layer and its undo steps."""

    def __init__(self, agent: str, journal: Iterable[tuple[int, str, Any]] = ()) -> None:
        self.agent = agent
        self.layer = ScopeLayer()
        self._undo: dict[int, Callable[[], bool]] = {}
        self._last_id = 0
        for reg_id, kind, payload in journal:  # a replacement scope: the same changes, the same ids
            self._apply(kind, payload, reg_id)

    def _apply(self, kind: str, payload: Any, reg_id: int | None = None) -> int:
        """Apply one already-validated change; returns its registration id."""
        if kind == "tool":
            undo = self.layer.add_tool(payload)
        elif kind == "restriction":
            undo = self.layer.add_restriction(payload)
        elif kind == "listener":
            event, fn, seq, prepend = payload
            undo = self.layer.listeners.add(event, fn, seq, prepend)
        else:
            undo = self.layer.add_guard(payload, self.agent)
        reg_id = reg_id if reg_id is not None else self._last_id + 1
        self._last_id = max(self._last_id, reg_id)
        self._undo[reg_id] = undo
        return reg_id

    def register(self, definition: ToolDefinition, reserved: tuple[str, ...] = ()) -> tuple[int, ToolDefinition]:
        """Add a tool the client froze (:func:`~dsh_actors.core.registry.snapshot_definition`)."""
        frozen = check_frozen(definition)
        check_reserved(frozen.name, reserved)
        execution_options(frozen)
        return self._apply("tool", frozen), frozen

    def restrict(self, spec: Mapping[str, Any] | None, global_names: list[str],
                 reserved: tuple[str, ...] = ()) -> tuple[int, Any]:
        compiled = compile_restriction(spec, global_names, reserved)
        return self._apply("restriction", compiled), compiled

    def guard(self, guard: Callable[..., Any]) -> tuple[int, Callable[..., Any]]:
        return self._apply("guard", guard), guard

    def on(self, event: str, fn: Callable[..., Any], seq: int, prepend: bool) -> tuple[int, Any]:
        """Add a listener that hears this agent's calls; ``seq`` is its place in the
        registry's one registration sequence."""
        check_listener(event, fn)
        payload = (event, fn, seq, prepend)
        return self._apply("listener", payload), payload

    def dispose(self, reg_id: int) -> bool:
        undo = self._undo.pop(reg_id, None)
        return bool(undo and undo())

    def dispose_all(self) -> None:
        for reg_id in sorted(self._undo, reverse=True):
            self.dispose(reg_id)


SCOPE_OPTIONS = {"num_cpus": 0, "max_restarts": 0}
"""Options of a scope host (a dead one is replaced from its agents' journals, not restarted)."""

SHARED_HOST_CONCURRENCY = 10_000
"""How many requests a shared host serves at once (its agents' plans, views, changes)."""


class _Scope:
    """One hosted agent scope: its layer, the lock that orders its changes, its plan ticket."""

    __slots__ = ("core", "lock", "ticket", "closed")

    def __init__(self, core: ScopeCore) -> None:
        self.core = core
        self.lock = asyncio.Lock()
        self.ticket: PlanTicket | None = None
        self.closed = False

    def check_open(self) -> None:
        if self.closed:
            raise RuntimeError(f"the scope of agent {self.core.agent!r} is closed; ask the registry for a new one")


class ScopeHostService:
    """Hosts agent scopes: one agent's (``dedicated`` hosting) or every agent hashed to it
    (``shared``). Each scope keeps its own state, its changes applied in order under its
    own lock, its own lifetime (:meth:`close`; the registry's close forgets it too). A
    scope is made on its agent's first request, from the journal the registry handed this
    host (a replacement host gets its agents' journals). Async, so plan requests never queue
    behind a change; every method names the agent it serves."""

    def __init__(self, registry_name: str, namespace: str,
                 journals: Mapping[str, list[tuple[int, str, Any]]] | None = None, registry: Any = None) -> None:
        # ``registry``: the registry's handle (found by name on Ray; a test passes its own).
        self._registry = registry if registry is not None else ray.get_actor(registry_name, namespace=namespace)
        self._journals = dict(journals or {})  # replayed into a scope when first asked for
        self._scopes: dict[str, _Scope] = {}
        self._base: tuple[int, ExecutionPlan, Chains] | None = None
        self._base_ticket: PlanTicket | None = None  # shared by every scope with an empty layer

    def _scope(self, agent: str) -> _Scope:
        scope = self._scopes.get(agent)
        if scope is None:
            scope = self._scopes[agent] = _Scope(ScopeCore(agent, self._journals.pop(agent, ())))
        return scope

    def _held(self, agent: str) -> _Scope | None:
        """``agent``'s scope if it exists (or has a journal to be rebuilt from): a read never
        makes one, so an agent that changes nothing leaves nothing here to close."""
        return self._scope(agent) if agent in self._scopes or agent in self._journals else None

    async def _reserved(self) -> tuple[str, ...]:
        _, base, _ = await self._base_plan()
        return tuple(base.reserved)

    async def _base_plan(self, known: int | None = None) -> tuple[int, ExecutionPlan, Chains]:
        # Every change (any scope's included) moves the registry's version: it alone says
        # whether anything cached here is current. A caller whose lease on the version is
        # live passes the version it knows (``known``): no change has returned since, so a base
        # of that version is current without asking the registry.
        if known is not None and self._base is not None and self._base[0] == known:
            return self._base
        version = await self._registry.version.remote()
        if self._base is None or self._base[0] != version:
            self._base = await self._registry.base_plan.remote()
        return self._base

    # registrations

    async def _change(self, agent: str, kind: str, make: Callable[[ScopeCore], Any]) -> int:
        """Apply one change to ``agent``'s scope under its lock: validate and apply it
        (``make``), then have the registry journal it and publish the new version (one
        call) — all before the change's call returns."""
        scope = self._scope(agent)
        async with scope.lock:
            scope.check_open()
            reg_id, payload = await make(scope.core)
            await self._registry.scope_changed.remote(agent, reg_id, kind, payload)  # one round trip
            return reg_id  # type: ignore[no-any-return]

    async def register(self, agent: str, definition: Any) -> int:
        async def make(core: ScopeCore) -> Any:
            return core.register(definition, await self._reserved())
        return await self._change(agent, "tool", make)

    async def restrict(self, agent: str, spec: Mapping[str, Any] | None) -> int:
        async def make(core: ScopeCore) -> Any:
            names = await self._registry.global_names.remote()
            return core.restrict(spec, names, await self._reserved())
        return await self._change(agent, "restriction", make)

    async def guard(self, agent: str, guard: Callable[..., Any]) -> int:
        async def make(core: ScopeCore) -> Any:
            return core.guard(guard)
        return await self._change(agent, "guard", make)

    async def on(self, agent: str, event: str, listener: Callable[..., Any], prepend: bool) -> int:
        async def make(core: ScopeCore) -> Any:
            return core.on(event, listener, await self._registry.sequence.remote(), prepend)
        return await self._change(agent, "listener", make)

    async def dispose(self, agent: str, reg_id: int) -> None:
        scope = self._held(agent)
        if scope is None:
            return  # nothing registered here to dispose (the scope was closed, or never changed)
        async with scope.lock:
            if scope.core.dispose(reg_id):
                await self._registry.scope_disposed.remote(agent, reg_id)

    async def close(self, agent: str, forget: bool = False) -> None:
        """Dispose everything ``agent``'s scope registered (the registry closes scopes);
        with ``forget``, drop the closed scope too: its id serves a new, empty scope."""
        scope = self._scope(agent)
        async with scope.lock:
            scope.core.dispose_all()
            scope.closed = True
        if forget:
            self.forget(agent)

    def forget(self, agent: str) -> None:
        """Drop ``agent``'s (closed) scope: its id serves a new, empty scope from now on."""
        self._scopes.pop(agent, None)
        self._journals.pop(agent, None)

    # views and plans

    async def _plan(self, agent: str) -> tuple[int, ExecutionPlan]:
        version, base, chains = await self._base_plan()
        scope = self._held(agent)
        return version, base if scope is None else compose_plan(base, chains, scope.core.layer)

    async def plan(self, agent: str, known: int | None = None) -> PlanTicket:
        """``agent``'s plan ticket; ``known``: the registry version the caller holds a live
        lease on, if any (see :meth:`_base_plan`)."""
        scope = self._held(agent)
        if scope is None:  # no scope: the base plan, and nothing made here for the agent
            version, base, _ = await self._base_plan(known)
            scope = self._held(agent)  # a change may have made one while the base plan was asked for
            if scope is None:
                return self._base_ticket_of(version, base)
        async with scope.lock:
            version, base, chains = await self._base_plan(known)
            if scope.core.layer.empty:  # its plan is the base plan (one ticket for all such scopes)
                return self._base_ticket_of(version, base).held()
            if scope.ticket is None or scope.ticket.version != version:  # composed only when stale
                scope.ticket = PlanTicket.of(version, compose_plan(base, chains, scope.core.layer))
            return scope.ticket

    def _base_ticket_of(self, version: int, base: ExecutionPlan) -> PlanTicket:
        if self._base_ticket is None or self._base_ticket.version != version:
            self._base_ticket = PlanTicket.of(version, base, scoped=False)
        return self._base_ticket

    async def get(self, agent: str, name: str) -> ToolDefinition | None:
        return (await self._plan(agent))[1].tools.get(name)

    async def visible(self, agent: str) -> list[ToolDefinition]:
        return list((await self._plan(agent))[1].tools.values())

    async def known_names(self, agent: str) -> list[str]:
        return list((await self._plan(agent))[1].known_names)

    async def schemas(self, agent: str) -> list[ToolSchema]:
        return [d.schema() for d in (await self._plan(agent))[1].tools.values()]

    def agents(self) -> list[str]:
        """The agents whose scopes live here now."""
        return sorted(self._scopes)

    def ping(self, agent: str | None = None) -> str:
        """Answer once up; with ``agent``, that agent's scope exists here afterwards."""
        if agent is not None:
            self._scope(agent)
        return "pong"


ScopeHost = ray.remote(ScopeHostService)
"""The scope host actor class (the registry's fleet applies its options)."""
