"""The agent scope actor: one per agent, owning everything scoped to that agent.

Its layer is the agent's scoped tools (shadowing same-named globals), restrictions,
guards and listeners (which hear only its calls; their order among the global listeners
comes from the registry's one registration sequence). It composes the agent's plan from
the registry's base plan and its layer, and reports every change to the registry, which
publishes the new version before the change's call returns. ``ScopeCore`` is the plain
class; the actor is a thin shell over it.

Every change, once validated, is also written to the registry's journal for this agent
(its frozen definition, compiled restriction, guard or listener, under its registration
id). When a scope actor dies, the registry starts a new one from that journal: the agent
keeps its shadows, restrictions, guards and listeners — it never comes back with more
tools than it had — and the registration ids its clients hold still dispose the same
things.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Iterable, Mapping

import ray

from ..core.pipeline import ExecutionPlan
from ..core.registry import Chains, ScopeLayer, check_listener, check_reserved, compile_restriction, compose_plan, \
    snapshot_definition
from ..core.types import ToolDefinition, ToolSchema
from .placement import execution_options
from .wire import PlanTicket

__all__ = ["SCOPE_OPTIONS", "ScopeActor", "ScopeCore"]


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

    def register(self, definition: Any, reserved: tuple[str, ...] = ()) -> tuple[int, ToolDefinition]:
        frozen = snapshot_definition(definition)
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

    def known_names(self, global_names: list[str]) -> list[str]:
        return [*global_names, *(n for n in self.layer.tools if n not in global_names)]


SCOPE_OPTIONS = {"num_cpus": 0, "max_restarts": 0}
"""Options of a scope actor (a dead one is replaced from its journal, not restarted)."""


@ray.remote
class ScopeActor:
    """Ray shell over :class:`ScopeCore`; async so plan requests never queue behind a change."""

    def __init__(self, registry_name: str, namespace: str, agent: str,
                 journal: list[tuple[int, str, Any]] | None = None) -> None:
        self._core = ScopeCore(agent, journal or [])
        self._registry = ray.get_actor(registry_name, namespace=namespace)
        self._lock = asyncio.Lock()
        self._base: tuple[int, ExecutionPlan, Chains] | None = None
        self._ticket: PlanTicket | None = None
        self._closed = False

    async def _reserved(self) -> tuple[str, ...]:
        _, base, _ = await self._base_plan()
        return tuple(base.reserved)

    async def _changed(self) -> int:
        return await self._registry.bump.remote()  # type: ignore[no-any-return]

    async def _base_plan(self) -> tuple[int, ExecutionPlan, Chains]:
        # Every change (this scope's included) moves the registry's version: it alone
        # says whether anything cached here is current.
        version = await self._registry.version.remote()
        if self._base is None or self._base[0] != version:
            self._base = await self._registry.base_plan.remote()
        return self._base

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"the scope of agent {self._core.agent!r} is closed; ask the registry for a new one")

    # registrations

    async def _journaled(self, kind: str, reg_id: int, payload: Any) -> int:
        await self._registry.journal_add.remote(self._core.agent, reg_id, kind, payload)
        await self._changed()
        return reg_id

    async def register(self, definition: Any) -> int:
        async with self._lock:
            self._check_open()
            reg_id, frozen = self._core.register(definition, await self._reserved())
            return await self._journaled("tool", reg_id, frozen)

    async def restrict(self, spec: Mapping[str, Any] | None) -> int:
        async with self._lock:
            self._check_open()
            names = await self._registry.global_names.remote()
            reg_id, compiled = self._core.restrict(spec, names, await self._reserved())
            return await self._journaled("restriction", reg_id, compiled)

    async def guard(self, guard: Callable[..., Any]) -> int:
        async with self._lock:
            self._check_open()
            reg_id, checked = self._core.guard(guard)
            return await self._journaled("guard", reg_id, checked)

    async def on(self, event: str, listener: Callable[..., Any], prepend: bool) -> int:
        async with self._lock:
            self._check_open()
            reg_id, payload = self._core.on(event, listener, await self._registry.sequence.remote(), prepend)
            return await self._journaled("listener", reg_id, payload)

    async def dispose(self, reg_id: int) -> None:
        async with self._lock:
            if self._core.dispose(reg_id):
                await self._registry.journal_drop.remote(self._core.agent, reg_id)
                await self._changed()

    async def close(self) -> None:
        """Dispose everything this scope registered; the registry then releases this actor."""
        async with self._lock:
            self._core.dispose_all()
            self._closed = True

    # views and plans

    async def _plan(self) -> tuple[int, ExecutionPlan]:
        version, base, chains = await self._base_plan()
        return version, compose_plan(base, chains, self._core.layer)

    async def plan(self) -> PlanTicket:
        async with self._lock:
            version, base, chains = await self._base_plan()
            if self._ticket is None or self._ticket.version != version:  # composed only when stale
                self._ticket = PlanTicket.of(version, compose_plan(base, chains, self._core.layer))
            return self._ticket

    async def get(self, name: str) -> ToolDefinition | None:
        return (await self._plan())[1].tools.get(name)

    async def visible(self) -> list[ToolDefinition]:
        return list((await self._plan())[1].tools.values())

    async def known_names(self) -> list[str]:
        return self._core.known_names(await self._registry.global_names.remote())

    async def schemas(self) -> list[ToolSchema]:
        return [d.schema() for d in (await self._plan())[1].tools.values()]

    def ping(self) -> str:
        return "pong"

