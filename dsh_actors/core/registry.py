"""The registry's tables: layers, restrictions, guards, listener chains, and plans.

:class:`RegistryState` holds the global layer and one :class:`ScopeLayer` per agent, and
derives each scope's :class:`ExecutionPlan`. Plans are computed when something changes,
never during a call, and a call runs against the plan it started with — registry
changes during a call never mix two views inside it. The in-process registry
(:mod:`dsh_actors.inmemory`) and the Ray runtime's actors are built on these tables.
"""

from __future__ import annotations

import bisect
import heapq
import inspect
import itertools
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Mapping

from .definitions import check_frozen, snapshot_definition
from .errors import DefinitionError, DuplicateToolError, ReservedNameError
from .jsonvalue import FrozenDict
from .pipeline import ApprovalSeam, ExecutionPlan
from .restrictions import ToolRestriction, compile_restriction, unscoped_restriction
from .types import ToolDefinition

__all__ = [
    "Chains",
    "EVENTS",
    "InMemoryDisposer",
    "MODES",
    "RUN_CODE",
    "RegistryState",
    "ScopeLayer",
    "check_guard",
    "check_listener",
    "check_reserved",
    "compose_plan",
    "visible_tools",
]

Event = Literal["tools/pre-execute", "tools/execute", "tools/post-execute", "tools/result"]
EVENTS: tuple[str, ...] = ("tools/pre-execute", "tools/execute", "tools/post-execute", "tools/result")
_PLAN_FIELD = {
    "tools/pre-execute": "pre_execute",
    "tools/execute": "execute",
    "tools/post-execute": "post_execute",
    "tools/result": "result",
}


class InMemoryDisposer:
    """Undoes exactly one in-process registration. Idempotent; also a context manager."""

    __slots__ = ("_undo", "_lock")

    def __init__(self, undo: Callable[[], None]) -> None:
        self._undo: Callable[[], None] | None = undo
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            undo, self._undo = self._undo, None
        if undo is not None:
            undo()

    @property
    def disposed(self) -> bool:
        return self._undo is None

    def __enter__(self) -> "InMemoryDisposer":
        return self

    def __exit__(self, *_: object) -> None:
        self()


# --- the tables ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class _Entry:
    """One registered listener or guard: the callable and the scope it hears (None: all).

    Compared by identity: the same function registered twice is two entries.
    """

    fn: Callable[..., Any]
    scope: str | None


@dataclass(frozen=True, slots=True, eq=False)
class _Listener:
    """One registered listener and where it sits: prepends before appends, the latest
    prepend first, appends in registration order — across the global layer and every
    scope, so ``key`` comes from one sequence (the registry's)."""

    fn: Callable[..., Any]
    key: tuple[int, int]


class Chains:
    """The four listener chains of one layer (global, or one agent's), each kept in order."""

    def __init__(self) -> None:
        self.entries: dict[str, list[_Listener]] = {event: [] for event in EVENTS}

    @property
    def empty(self) -> bool:
        return not any(self.entries.values())

    def add(self, event: str, fn: Callable[..., Any], seq: int, prepend: bool) -> Callable[[], bool]:
        """Add ``fn`` as registration number ``seq``; returns the exact undo."""
        check_listener(event, fn)
        entry = _Listener(fn, (0, -seq) if prepend else (1, seq))
        bisect.insort(self.entries[event], entry, key=lambda e: e.key)
        return lambda: _remove_entry(self.entries[event], entry)

    def plan_fields(self, *others: "Chains") -> dict[str, tuple[Callable[..., Any], ...]]:
        """The plan's chain fields: this layer's listeners merged with ``others``' in order."""
        return {
            _PLAN_FIELD[event]: tuple(e.fn for e in heapq.merge(
                entries, *(o.entries[event] for o in others), key=lambda e: e.key))
            for event, entries in self.entries.items()
        }


def _remove_entry(entries: list[Any], entry: Any) -> bool:
    for index, candidate in enumerate(entries):
        if candidate is entry:
            del entries[index]
            return True
    return False


def _add_named(layer: dict[str, ToolDefinition], frozen: ToolDefinition, duplicate: str) -> Callable[[], bool]:
    """Put ``frozen`` in ``layer`` (refusing a name already there); returns the exact undo."""
    if frozen.name in layer:
        raise DuplicateToolError(duplicate)
    layer[frozen.name] = frozen

    def remove() -> bool:
        if layer.get(frozen.name) is not frozen:
            return False
        del layer[frozen.name]
        return True

    return remove


def check_guard(guard: Callable[..., Any]) -> None:
    """Misuse check for a guard (callable, synchronous)."""
    if not callable(guard):
        raise DefinitionError("a guard must be callable: guard(execution) -> reason | None")
    if inspect.iscoroutinefunction(guard):
        raise DefinitionError("guards are synchronous: guard(execution) -> reason | None")


def check_listener(event: str, fn: Callable[..., Any]) -> None:
    """Misuse check for a listener of ``event``."""
    if event not in EVENTS:
        raise DefinitionError(f"unknown event {event!r}; expected one of {', '.join(EVENTS)}")
    if not callable(fn):
        raise DefinitionError(f"a {event} listener must be callable")
    if event == "tools/result" and inspect.iscoroutinefunction(fn):
        raise DefinitionError("tools/result observers are synchronous (observe-only); use a plain function")


MODES = ("native", "code", "both")
RUN_CODE = "run_code"


def check_reserved(name: str, reserved: Iterable[str]) -> None:
    """Misuse check: a reserved transport's name cannot be registered or shadowed."""
    if name in reserved:
        raise ReservedNameError(
            f'tool name "{name}" is reserved for the Code Mode presentation transport and cannot be '
            "registered or shadowed"
        )


class ScopeLayer:
    """One agent's own layer: its tools (shadowing globals), restrictions, guards and
    listeners (which hear only its calls).

    The in-memory registry keeps one per agent; the Ray runtime keeps one in each agent
    scope actor. Mutators return the exact undo step.
    """

    def __init__(self) -> None:
        self.tools: dict[str, ToolDefinition] = {}
        self.restrictions: list[ToolRestriction] = []
        self.guards: list[_Entry] = []
        self.listeners = Chains()

    @property
    def empty(self) -> bool:
        return not (self.tools or self.restrictions or self.guards) and self.listeners.empty

    def add_tool(self, frozen: ToolDefinition) -> Callable[[], bool]:
        return _add_named(self.tools, frozen, f'tool "{frozen.name}" is already registered in this scope')

    def add_restriction(self, restriction: ToolRestriction) -> Callable[[], bool]:
        self.restrictions.append(restriction)
        return lambda: _remove_entry(self.restrictions, restriction)

    def add_guard(self, guard: Callable[..., Any], agent: str) -> Callable[[], bool]:
        check_guard(guard)
        entry = _Entry(guard, agent)
        self.guards.append(entry)
        return lambda: _remove_entry(self.guards, entry)


def visible_tools(global_tools: Mapping[str, ToolDefinition], layer: ScopeLayer | None) -> dict[str, ToolDefinition]:
    """Restricted global layer, then the scope's own tools (a shadow keeps the global's position)."""
    if layer is None:
        return dict(global_tools)
    view = {
        name: definition for name, definition in global_tools.items()
        if all(r.admits(name) for r in layer.restrictions)
    }
    view.update(layer.tools)
    return view


def compose_plan(base: ExecutionPlan, chains: Chains, layer: ScopeLayer | None) -> ExecutionPlan:
    """An agent's plan: ``base`` (global tools, global ``chains``, global guards) plus its
    layer, whose listeners take their places among the global ones; reserved transports
    stay last and are never masked."""
    if layer is None or layer.empty:
        return base
    tools = visible_tools({n: d for n, d in base.tools.items() if n not in base.reserved}, layer)
    tools.update(base.reserved)
    listening = chains.plan_fields(layer.listeners) if not layer.listeners.empty else {
        "pre_execute": base.pre_execute, "execute": base.execute, "post_execute": base.post_execute,
        "result": base.result}
    return ExecutionPlan(
        tools=FrozenDict(tools), reserved=base.reserved, **listening,
        guards=base.guards + tuple(e.fn for e in layer.guards), approval=base.approval,
        known_names=base.known_names + tuple(n for n in layer.tools if n not in base.known_names),
    )


class RegistryState:
    """The global layer, per-agent layers, listener chains and guards; derives plans.

    Not thread-safe on its own: one owner (an actor, or one event loop) mutates it.
    Plans are cached until the next change, so a call never computes one.
    """

    def __init__(self, *, approval: ApprovalSeam | None = None,
                 reserved: Iterable[ToolDefinition] = ()) -> None:
        self.reserved = FrozenDict({definition.name: definition for definition in reserved})
        """Transports (Code Mode's ``run_code``) that are always visible, last, and whose
        names nothing can register, shadow or restrict."""
        self.globals: dict[str, ToolDefinition] = {}
        self.layers: dict[str, ScopeLayer] = {}
        self.guards: list[_Entry] = []
        self.chains = Chains()
        self.change_listeners: list[Callable[[], Any]] = []
        self.approval = approval
        self._sequence = itertools.count(1)
        self._base_plan: ExecutionPlan | None = None
        self._plans: dict[str | None, ExecutionPlan] = {}

    # change bookkeeping

    def touched(self) -> None:
        """Something a plan depends on changed: drop cached plans."""
        self._base_plan = None
        self._plans.clear()

    def next_sequence(self) -> int:
        """The next registration number of a listener (global or scoped: one order)."""
        return next(self._sequence)

    def emit_change(self) -> None:
        """Notify ``tools/change`` listeners (unfiltered), in registration order."""
        for listener in list(self.change_listeners):
            listener()

    def _layer(self, agent: str) -> ScopeLayer:
        layer = self.layers.get(agent)
        if layer is None:
            layer = self.layers[agent] = ScopeLayer()
        return layer

    def _undo(self, agent: str | None, remove: Callable[[], bool], notify: bool) -> Callable[[], None]:
        """Wrap a layer's undo: drop an emptied layer, refresh plans, tell listeners."""
        def undo() -> None:
            if not remove():
                return
            if agent is not None and agent in self.layers and self.layers[agent].empty:
                del self.layers[agent]  # an empty scoped layer leaves nothing behind
            self.touched()
            if notify:
                self.emit_change()

        return undo

    # tools

    @property
    def reserved_names(self) -> tuple[str, ...]:
        return tuple(self.reserved)

    def add_tool(self, definition: Any, scope: str | None = None, *, frozen: bool = False) -> Callable[[], None]:
        """Register ``definition`` (in ``scope``'s layer, or globally); ``frozen``: it is a
        :func:`snapshot_definition` already (a Ray client froze it once) and is kept as is."""
        tool = check_frozen(definition) if frozen else snapshot_definition(definition)
        check_reserved(tool.name, self.reserved_names)
        if scope is None:
            remove = _add_named(self.globals, tool, (
                f'tool "{tool.name}" is already registered (for a per-agent variant, register '
                "through that agent's scope, registry.scope(agent_id).register, instead)"))
        else:
            layer = self.layers.get(scope) or ScopeLayer()
            remove = layer.add_tool(tool)
            self.layers[scope] = layer
        self.touched()
        undo = self._undo(scope, remove, notify=True)
        try:
            self.emit_change()
        except BaseException:
            # A change listener refused: undo (which tells listeners again), re-raise; nothing leaks.
            undo()
            raise
        return undo

    def add_restriction(self, spec: Mapping[str, Any] | None, scope: str | None,
                        reserved: Iterable[str] = ()) -> Callable[[], None]:
        if scope is None:
            raise unscoped_restriction()
        restriction = compile_restriction(spec, self.globals, (*reserved, *self.reserved_names))
        remove = self._layer(scope).add_restriction(restriction)
        self.touched()
        self.emit_change()
        return self._undo(scope, remove, notify=True)

    def add_guard(self, guard: Callable[..., Any], scope: str | None) -> Callable[[], None]:
        if scope is not None:
            remove = self._layer(scope).add_guard(guard, scope)
        else:
            check_guard(guard)
            entry = _Entry(guard, None)
            self.guards.append(entry)
            remove = lambda: _remove_entry(self.guards, entry)  # noqa: E731
        self.touched()
        return self._undo(scope, remove, notify=False)

    def add_listener(self, event: str, fn: Callable[..., Any], scope: str | None,
                     prepend: bool = False) -> Callable[[], None]:
        chains = self.chains if scope is None else self._layer(scope).listeners
        remove = chains.add(event, fn, self.next_sequence(), prepend)
        self.touched()
        return self._undo(scope, remove, notify=False)

    def add_change_listener(self, fn: Callable[[], Any]) -> Callable[[], None]:
        self.change_listeners.append(fn)
        return lambda: self.change_listeners.remove(fn) if fn in self.change_listeners else None

    # views

    def visible(self, scope: str | None = None) -> dict[str, ToolDefinition]:
        """Restricted global layer, then the scope's own layer (a shadow keeps its position),
        then the reserved transports."""
        return dict(self.plan(scope).tools)

    def known_names(self, scope: str | None = None) -> list[str]:
        """Every global name plus the scope's own names, restrictions not applied."""
        return list(self.plan(scope).known_names)

    def base_plan(self) -> ExecutionPlan:
        """The global layer's plan: global tools, global listeners and guards."""
        if self._base_plan is None:
            self._base_plan = ExecutionPlan(
                tools=FrozenDict({**self.globals, **self.reserved}), guards=tuple(e.fn for e in self.guards),
                approval=self.approval, reserved=self.reserved, **self.chains.plan_fields(),
                known_names=tuple(self.globals),
            )
        return self._base_plan

    def plan(self, scope: str | None) -> ExecutionPlan:
        """The frozen plan a call by ``scope`` runs against (cached until the next change)."""
        plan = self._plans.get(scope)
        if plan is None:
            layer = self.layers.get(scope) if scope is not None else None
            plan = self._plans[scope] = compose_plan(self.base_plan(), self.chains, layer)
        return plan
