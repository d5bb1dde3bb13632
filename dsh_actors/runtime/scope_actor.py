"""The agent scope actor: one per agent, holding that agent's own layer.

Its layer is the agent's scoped tools (shadowing same-named globals), restrictions and
guards. It composes the agent's plan from the registry's base plan (global tools, the
chains this agent hears, global guards) and its layer, and reports every change to the
registry, which publishes the new version before the change's call returns.
``ScopeCore`` is the plain class; the actor is a thin shell over it.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, Callable, Mapping

import ray

from ..core.pipeline import ExecutionPlan
from ..core.registry import ScopeLayer, check_reserved, compile_restriction, compose_plan, snapshot_definition
from ..core.types import ToolDefinition, ToolSchema
from .placement import execution_options
from .registry_actor import PlanTicket

__all__ = ["ScopeActor", "ScopeCore"]


class ScopeCore:
    """An agent's layer and its undo steps."""

    def __init__(self, agent: str) -> None:
        self.agent = agent
        self.layer = ScopeLayer()
        self._ids = itertools.count(1)
        self._undo: dict[int, Callable[[], bool]] = {}

    def _track(self, undo: Callable[[], bool]) -> int:
        reg_id = next(self._ids)
        self._undo[reg_id] = undo
        return reg_id

    def register(self, definition: Any, reserved: tuple[str, ...] = ()) -> int:
        frozen = snapshot_definition(definition)
        check_reserved(frozen.name, reserved)
        execution_options(frozen)
        return self._track(self.layer.add_tool(frozen))

    def restrict(self, spec: Mapping[str, Any] | None, global_names: list[str], reserved: tuple[str, ...] = ()) -> int:
        return self._track(self.layer.add_restriction(compile_restriction(spec, global_names, reserved)))

    def guard(self, guard: Callable[..., Any]) -> int:
        return self._track(self.layer.add_guard(guard, self.agent))

    def dispose(self, reg_id: int) -> bool:
        undo = self._undo.pop(reg_id, None)
        return bool(undo and undo())

    def dispose_all(self) -> None:
        for reg_id in sorted(self._undo, reverse=True):
            self.dispose(reg_id)

    def known_names(self, global_names: list[str]) -> list[str]:
        return [*global_names, *(n for n in self.layer.tools if n not in global_names)]


@ray.remote(num_cpus=0, max_restarts=0)
class ScopeActor:
    """Ray shell over :class:`ScopeCore`; async so plan requests never queue behind a change."""

    def __init__(self, registry_name: str, namespace: str, agent: str) -> None:
        self._core = ScopeCore(agent)
        self._registry = ray.get_actor(registry_name, namespace=namespace)
        self._lock = asyncio.Lock()
        self._base: tuple[int, ExecutionPlan] | None = None
        self._ticket: PlanTicket | None = None
        self._ticket_layer_version = -1
        self._layer_version = 0
        self._closed = False

    async def _reserved(self) -> tuple[str, ...]:
        _, base = await self._base_plan()
        return tuple(base.reserved)

    async def _changed(self) -> int:
        self._layer_version += 1
        return await self._registry.bump.remote()

    async def _base_plan(self) -> tuple[int, ExecutionPlan]:
        version = await self._registry.version.remote()
        if self._base is None or self._base[0] != version:
            self._base = await self._registry.base_plan.remote(self._core.agent)
        return self._base

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"the scope of agent {self._core.agent!r} is closed; ask the registry for a new one")

    # registrations

    async def register(self, definition: Any) -> int:
        async with self._lock:
            self._check_open()
            reg_id = self._core.register(definition, await self._reserved())
            await self._changed()
            return reg_id

    async def restrict(self, spec: Mapping[str, Any] | None) -> int:
        async with self._lock:
            self._check_open()
            names = await self._registry.global_names.remote()
            reg_id = self._core.restrict(spec, names, await self._reserved())
            await self._changed()
            return reg_id

    async def guard(self, guard: Callable[..., Any]) -> int:
        async with self._lock:
            self._check_open()
            reg_id = self._core.guard(guard)
            await self._changed()
            return reg_id

    async def dispose(self, reg_id: int) -> None:
        async with self._lock:
            if self._core.dispose(reg_id):
                await self._changed()

    async def close(self) -> None:
        """Dispose everything this scope registered (its scoped listeners included)."""
        async with self._lock:
            self._core.dispose_all()
            self._closed = True
            await self._registry.drop_scope.remote(self._core.agent)

    # views and plans

    async def _plan(self) -> tuple[int, ExecutionPlan]:
        version, base = await self._base_plan()
        return version, compose_plan(base, self._core.layer)

    async def plan(self) -> PlanTicket:
        async with self._lock:
            version, plan = await self._plan()
            ticket = self._ticket
            if ticket is None or ticket.version != version or self._ticket_layer_version != self._layer_version:
                ticket = self._ticket = PlanTicket.of(version, plan)
                self._ticket_layer_version = self._layer_version
            return ticket

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

