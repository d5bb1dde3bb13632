"""The registry's tables and the in-process registry built on them.

:class:`RegistryState` holds the layers (global, and one per agent), restrictions,
guards and listener chains, and derives each scope's :class:`ExecutionPlan`. Plans are
computed when something changes, never during a call, and a call runs against the
plan it started with — registry changes during a call never mix two views inside it.

:class:`InMemoryRegistry` is the specification's service in one process: global
registrations, ``scope(agent_id)`` for per-agent layers, ``plugin(name)`` for grouped
disposal, and ``execute``. The Ray runtime keeps the same state in actors and ships
plans to execution tasks.
"""

from __future__ import annotations

import inspect
import math
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Mapping

from .errors import DefinitionError, DuplicateToolError, ReservedNameError, RestrictionError
from .jsonvalue import FrozenDict, NotLosslessJSONError, snapshot
from .pipeline import ApprovalSeam, ExecutionPlan, execute as run_pipeline
from .pipeline.chain import settle
from .types import ToolDefinition, ToolExecutionResult, ToolSchema

__all__ = [
    "EVENTS",
    "MODES",
    "RUN_CODE",
    "ScopeLayer",
    "compose_plan",
    "visible_tools",
    "AgentScopeView",
    "Disposer",
    "InMemoryRegistry",
    "Plugin",
    "RegistryState",
    "ToolRestriction",
    "snapshot_definition",
]

Event = Literal["tools/pre-execute", "tools/execute", "tools/post-execute", "tools/result"]
EVENTS: tuple[str, ...] = ("tools/pre-execute", "tools/execute", "tools/post-execute", "tools/result")
_PLAN_FIELD = {
    "tools/pre-execute": "pre_execute",
    "tools/execute": "execute",
    "tools/post-execute": "post_execute",
    "tools/result": "result",
}


class Disposer:
    """Undoes exactly one registration. Idempotent; also a context manager."""

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

    def __enter__(self) -> "Disposer":
        return self

    def __exit__(self, *_: object) -> None:
        self()


# --- definitions -----------------------------------------------------------------------

_DEFINITION_FIELDS = ("name", "description", "parameters", "execute", "timeout_ms",
                      "present_call", "present_result", "extras")


def snapshot_definition(definition: Any) -> ToolDefinition:
    """Freeze a definition for registration.

    Accepts a :class:`ToolDefinition`, a mapping, or any object with the fields.
    ``parameters`` must be a lossless JSON object; callbacks are read once (a method is
    bound to the original object then), so replacing one on the original later changes
    nothing; ``timeout_ms`` must be a positive finite number when present.
    """
    if isinstance(definition, Mapping):
        read: Callable[[str], Any] = definition.get
    else:
        read = lambda key: getattr(definition, key, None)  # noqa: E731
    fields = {key: read(key) for key in _DEFINITION_FIELDS}
    name = fields["name"]
    if not isinstance(name, str) or not name:
        raise DefinitionError("a tool definition needs a non-empty str name")
    budget = fields["timeout_ms"]
    if budget is not None and (
        isinstance(budget, bool) or not isinstance(budget, (int, float))
        or not math.isfinite(budget) or budget <= 0
    ):
        raise DefinitionError(f'tool "{name}" timeout_ms must be a positive finite number')
    if not isinstance(fields["description"], str):
        raise DefinitionError(f'tool "{name}" description must be a str')
    try:
        parameters = snapshot(fields["parameters"], path="parameters")
    except NotLosslessJSONError as exc:
        raise DefinitionError(f'tool "{name}" parameters must be lossless JSON ({exc})') from None
    if not isinstance(parameters, Mapping):
        raise DefinitionError(f'tool "{name}" parameters must be a JSON Schema object')
    if not callable(fields["execute"]):
        raise DefinitionError(f'tool "{name}" needs a callable execute(args, ctx)')
    for key in ("present_call", "present_result"):
        if fields[key] is not None and not callable(fields[key]):
            raise DefinitionError(f'tool "{name}" {key} must be callable or None')
    extras = fields["extras"] or {}
    if not isinstance(extras, Mapping):
        raise DefinitionError(f'tool "{name}" extras must be a mapping')
    return ToolDefinition(
        name=name, description=fields["description"], parameters=parameters,
        execute=fields["execute"], timeout_ms=budget,
        present_call=fields["present_call"], present_result=fields["present_result"],
        extras=FrozenDict(extras),
    )


# --- restrictions ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ToolRestriction:
    """A compiled mask over the global layer: ``allow`` keeps only, ``deny`` removes."""

    allow: frozenset[str] | None = None
    deny: frozenset[str] | None = None

    def admits(self, name: str) -> bool:
        return (self.allow is None or name in self.allow) and (self.deny is None or name not in self.deny)


def _names(value: object, key: str) -> list[str] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise RestrictionError(f"tools.restrict() {key} must be a list of tool names")
    names = list(value)
    if not all(isinstance(n, str) for n in names):
        raise RestrictionError(f"tools.restrict() {key} must contain only str tool names")
    return names


def compile_restriction(spec: Mapping[str, Any] | None, known_globals: Iterable[str],
                        reserved: Iterable[str] = ()) -> ToolRestriction:
    """Validate a ``{allow?, deny?}`` filter against the current global names and compile it."""
    spec = spec or {}
    extra = sorted(str(k) for k in spec if k not in ("allow", "deny"))
    if extra:
        raise RestrictionError(f"tools.restrict() got unknown key(s) {extra}; use allow and/or deny")
    allow = _names(spec.get("allow"), "allow")
    deny = _names(spec.get("deny"), "deny")
    if allow is None and deny is None:
        raise RestrictionError(
            "tools.restrict({}) is a no-op: pass allow=[...] to keep only those tools "
            "and/or deny=[...] to hide them"
        )
    named = [*(allow or []), *(deny or [])]
    for name in named:
        if name in reserved:
            raise RestrictionError(
                f'tools.restrict() cannot name reserved Code Mode presentation transport "{name}"; '
                "restrict end-capability tools instead"
            )
    known = set(known_globals)
    unknown = [name for name in named if name not in known]
    if unknown:
        listing = ", ".join(sorted(known)) or "(none)"
        quoted = ", ".join(f'"{name}"' for name in unknown)
        noun = "tool" if len(unknown) == 1 else "tools"
        raise RestrictionError(
            f"tools.restrict() names unknown global {noun} {quoted}; known global tools: {listing}"
        )
    return ToolRestriction(
        allow=None if allow is None else frozenset(allow),
        deny=None if deny is None else frozenset(deny),
    )


# --- the tables ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, eq=False)
class _Entry:
    """One registered listener or guard: the callable and the scope it hears (None: all).

    Compared by identity: the same function registered twice is two entries.
    """

    fn: Callable[..., Any]
    scope: str | None


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
    """One agent's own layer: its tools (shadowing globals), restrictions and guards.

    The in-memory registry keeps one per agent; the Ray runtime keeps one in each agent
    scope actor. Mutators return the exact undo step.
    """

    def __init__(self) -> None:
        self.tools: dict[str, ToolDefinition] = {}
        self.restrictions: list[ToolRestriction] = []
        self.guards: list[_Entry] = []

    @property
    def empty(self) -> bool:
        return not (self.tools or self.restrictions or self.guards)

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


def compose_plan(base: ExecutionPlan, layer: ScopeLayer | None) -> ExecutionPlan:
    """An agent's plan: ``base`` (global tools, the agent's chains, global guards) plus its
    layer; reserved transports stay last and are never masked."""
    if layer is None or layer.empty:
        return base
    tools = visible_tools({n: d for n, d in base.tools.items() if n not in base.reserved}, layer)
    tools.update(base.reserved)
    return ExecutionPlan(
        tools=FrozenDict(tools), reserved=base.reserved,
        pre_execute=base.pre_execute, execute=base.execute, post_execute=base.post_execute,
        result=base.result, guards=base.guards + tuple(e.fn for e in layer.guards), approval=base.approval,
    )


class RegistryState:
    """The global layer, per-agent layers, listener chains and guards; derives plans.

    Not thread-safe on its own: one owner (an actor, or one event loop) mutates it.
    Plans are cached until the next change, so a call never computes one.
    """

    def __init__(self, *, approval: ApprovalSeam | None = None, mode: str = "native",
                 transport: ToolDefinition | None = None) -> None:
        if mode not in MODES:
            raise DefinitionError(f'tools mode must be one of {", ".join(MODES)}; got {mode!r}')
        if (mode != "native") != (transport is not None):
            raise DefinitionError("a non-native mode needs its run_code transport, and only then")
        self.mode = mode
        self.transport = transport
        self.globals: dict[str, ToolDefinition] = {}
        self.layers: dict[str, ScopeLayer] = {}
        self.guards: list[_Entry] = []
        self.chains: dict[str, list[_Entry]] = {event: [] for event in EVENTS}
        self.change_listeners: list[Callable[[], Any]] = []
        self.approval = approval
        self.version = 0
        self._base_plans: dict[str | None, ExecutionPlan] = {}
        self._plans: dict[str | None, ExecutionPlan] = {}

    # change bookkeeping

    def touched(self) -> None:
        """Something a plan depends on changed: drop cached plans."""
        self.version += 1
        self._base_plans.clear()
        self._plans.clear()

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
        return (RUN_CODE,) if self.transport is not None else ()

    def add_tool(self, definition: Any, scope: str | None = None) -> Callable[[], None]:
        frozen = snapshot_definition(definition)
        check_reserved(frozen.name, self.reserved_names)
        if scope is None:
            remove = _add_named(self.globals, frozen, (
                f'tool "{frozen.name}" is already registered (for a per-agent variant, register '
                "through that agent's scope, registry.scope(agent_id).register, instead)"))
        else:
            layer = self.layers.get(scope) or ScopeLayer()
            remove = layer.add_tool(frozen)
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
            raise RestrictionError(
                "tools.restrict() requires a scoped context (registry.scope(agent_id)): a restriction "
                "masks one agent's view of the global tools"
            )
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
        check_listener(event, fn)
        entry = _Entry(fn, scope)
        chain = self.chains[event]
        chain.insert(0, entry) if prepend else chain.append(entry)
        self.touched()
        return self._undo(None, lambda: _remove_entry(chain, entry), notify=False)

    def add_change_listener(self, fn: Callable[[], Any]) -> Callable[[], None]:
        self.change_listeners.append(fn)
        return lambda: self.change_listeners.remove(fn) if fn in self.change_listeners else None

    def drop_scope(self, agent: str) -> None:
        """Forget everything scoped to ``agent`` (its layer and its listeners)."""
        self.layers.pop(agent, None)
        for event, chain in self.chains.items():
            self.chains[event] = [e for e in chain if e.scope != agent]
        self.touched()

    # views

    def visible(self, scope: str | None = None) -> dict[str, ToolDefinition]:
        """Restricted global layer, then the scope's own layer (a shadow keeps its position),
        then ``run_code`` in a non-native mode."""
        return dict(self.plan(scope).tools)

    def known_names(self, scope: str | None = None) -> list[str]:
        """Every global name plus the scope's own names, restrictions not applied."""
        names = list(self.globals)
        layer = self.layers.get(scope) if scope is not None else None
        if layer is not None:
            names.extend(n for n in layer.tools if n not in self.globals)
        return names

    def base_plan(self, scope: str | None) -> ExecutionPlan:
        """Global tools, the chains ``scope`` hears (in order) and global guards."""
        plan = self._base_plans.get(scope)
        if plan is None:
            chains = {
                _PLAN_FIELD[event]: tuple(e.fn for e in entries if e.scope is None or e.scope == scope)
                for event, entries in self.chains.items()
            }
            reserved = FrozenDict({RUN_CODE: self.transport} if self.transport is not None else {})
            plan = ExecutionPlan(
                tools=FrozenDict({**self.globals, **reserved}), guards=tuple(e.fn for e in self.guards),
                approval=self.approval, reserved=reserved, **chains,
            )
            self._base_plans[scope] = plan
        return plan

    def plan(self, scope: str | None) -> ExecutionPlan:
        """The frozen plan a call by ``scope`` runs against (cached until the next change)."""
        plan = self._plans.get(scope)
        if plan is None:
            layer = self.layers.get(scope) if scope is not None else None
            plan = self._plans[scope] = compose_plan(self.base_plan(scope), layer)
        return plan


# --- the in-process registry ------------------------------------------------------------


class _Owner:
    """Registrations made through an owner are disposed with it, last first."""

    def __init__(self, registry: "InMemoryRegistry", scope: str | None) -> None:
        self._registry = registry
        self._state: RegistryState = registry._state
        self._scope = scope
        self._disposers: list[Disposer] = []
        self._closed = False

    def _adopt(self, undo: Callable[[], None]) -> Disposer:
        if self._closed:
            undo()
            raise RuntimeError("this scope or plugin is closed; create a new one to register again")
        disposer = Disposer(undo)
        self._disposers.append(disposer)
        return disposer

    def register(self, definition: Any) -> Disposer:
        """Register a tool as a frozen snapshot (globally, or shadowing for this agent)."""
        return self._adopt(self._state.add_tool(definition, self._scope))

    def guard(self, guard: Callable[..., Any]) -> Disposer:
        """Add a synchronous guard ``guard(execution) -> reason | None``."""
        return self._adopt(self._state.add_guard(guard, self._scope))

    def on(self, event: Event, listener: Callable[..., Any], *, prepend: bool = False) -> Disposer:
        """Add a listener to ``event``; a scope's listeners hear only its agent's calls."""
        return self._adopt(self._state.add_listener(event, listener, self._scope, prepend))

    def close(self) -> None:
        """Dispose everything registered through this owner, last first. Idempotent."""
        self._closed = True
        while self._disposers:
            self._disposers.pop()()

    dispose = close

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class Plugin(_Owner):
    """A group of global registrations disposed together (``registry.plugin(name)``)."""

    def __init__(self, registry: "InMemoryRegistry", name: str) -> None:
        super().__init__(registry, None)
        self.name = name


class AgentScopeView(_Owner):
    """One agent's scope: its own layer, restrictions, guards and listeners, and its view."""

    def __init__(self, registry: "InMemoryRegistry", agent_id: str) -> None:
        if not isinstance(agent_id, str) or not agent_id:
            raise DefinitionError("an agent scope needs a non-empty str agent id")
        super().__init__(registry, agent_id)
        self.agent_id = agent_id

    def restrict(self, spec: Mapping[str, Any] | None = None, *, allow: Iterable[str] | None = None,
                 deny: Iterable[str] | None = None) -> Disposer:
        """Mask the global layer for this agent: ``allow`` keeps only, ``deny`` hides.

        Several restrictions intersect; the agent's own tools are never masked. Names are
        validated against the current global names and compiled now (snapshot).
        """
        merged = dict(spec or {})
        if allow is not None:
            merged["allow"] = allow
        if deny is not None:
            merged["deny"] = deny
        return self._adopt(self._state.add_restriction(merged, self._scope))

    def get(self, name: str) -> ToolDefinition | None:
        return self._registry.get(name, self.agent_id)

    def visible(self) -> list[ToolDefinition]:
        return self._registry.visible(self.agent_id)

    def known_names(self) -> list[str]:
        return self._registry.known_names(self.agent_id)

    def schemas(self) -> list[ToolSchema]:
        return self._registry.schemas(self.agent_id)

    async def execute(self, call: Any = None, /, **fields: Any) -> ToolExecutionResult:
        """Execute on this agent's behalf (``agent`` is set to this scope's id)."""
        merged = {**_as_fields(call), **fields, "agent": self.agent_id}
        return await self._registry.execute(merged)


def _as_fields(call: Any) -> dict[str, Any]:
    if call is None:
        return {}
    if isinstance(call, Mapping):
        return dict(call)
    return {key: getattr(call, key) for key in ("call_id", "name", "arguments", "agent", "parent", "signal")
            if hasattr(call, key)}


class InMemoryRegistry(_Owner):
    """The tool registry in one process: the specification's service, without Ray.

    Registrations made directly on it are global. ``scope(agent_id)`` gives an agent's
    scope; ``plugin(name)`` groups global registrations for disposal together.
    """

    def __init__(self, *, approval: ApprovalSeam | None = None, mode: str = "native",
                 code_runtime: Any = None, on_code_dispatch: Callable[[str, dict[str, Any]], Any] | None = None) -> None:
        transport = None
        if mode != "native":
            from ..codemode.transport import build_run_code

            async def record(agent: str, event: dict[str, Any]) -> None:
                if on_code_dispatch is not None:
                    await settle(on_code_dispatch(agent, event))

            transport = build_run_code(mode, lambda: self.code_runtime, lambda signal: self.execute, lambda: record)
        self.code_runtime = code_runtime
        self._state = RegistryState(approval=approval, mode=mode, transport=transport)
        self._scopes: dict[str, AgentScopeView] = {}
        super().__init__(self, None)

    @property
    def mode(self) -> str:
        return self._state.mode

    def sdk(self, scope: str | None = None) -> str:
        """The ``tools:sdk`` section text for ``scope`` (Code Mode); raises without a runtime."""
        from ..codemode.sdk import sdk_section_text
        from ..codemode.transport import check_runtime

        runtime = check_runtime(self._state.mode, self.code_runtime)
        dialect = getattr(runtime, "dialect", None)
        return sdk_section_text((s for s in self.schemas(scope) if s["name"] != RUN_CODE),
                                dialect if isinstance(dialect, str) else None)

    @property
    def state(self) -> RegistryState:
        return self._state

    def set_approval(self, approval: ApprovalSeam | None) -> None:
        """Mount (or unmount, with ``None``) the approval seam that answers ``ask``."""
        self._state.approval = approval
        self._state.touched()

    def on_change(self, listener: Callable[[], Any]) -> Disposer:
        """``tools/change``: unfiltered notification after a tool or restriction change."""
        return self._adopt(self._state.add_change_listener(listener))

    def restrict(self, spec: Mapping[str, Any] | None = None, **_: Any) -> Disposer:
        """Always raises: restrictions belong to an agent scope."""
        raise RestrictionError(
            "tools.restrict() requires a scoped context (registry.scope(agent_id)): a restriction "
            "masks one agent's view of the global tools"
        )

    def scope(self, agent_id: str) -> AgentScopeView:
        """The scope of ``agent_id`` (created on first use; a closed scope is replaced)."""
        current = self._scopes.get(agent_id)
        if current is None or current._closed:
            current = self._scopes[agent_id] = AgentScopeView(self, agent_id)
        return current

    def plugin(self, name: str) -> Plugin:
        """A handle whose registrations are disposed together by ``dispose()``."""
        return Plugin(self, name)

    def get(self, name: str, scope: str | None = None) -> ToolDefinition | None:
        """The definition ``scope`` resolves ``name`` to (absent if restricted away)."""
        return self._state.plan(scope).tools.get(name)

    def visible(self, scope: str | None = None) -> list[ToolDefinition]:
        return list(self._state.plan(scope).tools.values())

    def known_names(self, scope: str | None = None) -> list[str]:
        return self._state.known_names(scope)

    def schemas(self, scope: str | None = None) -> list[ToolSchema]:
        """``{name, description, parameters}`` of each visible tool; fresh copies each call."""
        return [definition.schema() for definition in self._state.plan(scope).tools.values()]

    async def execute(self, call: Any = None, /, **fields: Any) -> ToolExecutionResult:
        """Run one call through the pipeline; never raises. Accepts a
        :class:`ToolExecutionInput`, a mapping, or keyword fields."""
        source = call if not fields else {**_as_fields(call), **fields}
        return await run_pipeline(source, self._state.plan)
