"""The specification's service in one process, without Ray: :class:`InMemoryRegistry`.

Global registrations, ``scope(agent_id)`` for per-agent layers, ``plugin(name)`` for
grouped disposal, and ``execute``, all over :class:`~dsh_actors.core.registry.RegistryState`
on one event loop. In mode ``code`` or ``both`` it adds Code Mode's ``run_code``
transport. The Ray runtime (:mod:`dsh_actors.runtime`) keeps the same tables in actors.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from .codemode.sdk import sdk_section_text
from .codemode.transport import build_run_code, check_runtime
from .core.errors import DefinitionError
from .core.pipeline import ApprovalSeam, execute as run_pipeline
from .core.pipeline.chain import settle
from .core.registry import MODES, RUN_CODE, Event, InMemoryDisposer, RegistryState
from .core.definitions import EXCLUSIVE, call_fields, execution_mode
from .core.restrictions import unscoped_restriction
from .core.types import ToolDefinition, ToolExecutionResult, ToolSchema

__all__ = ["InMemoryPlugin", "InMemoryRegistry", "InMemoryScope"]


class _Owner:
    """Registrations made through an owner are disposed with it, last first."""

    def __init__(self, registry: "InMemoryRegistry", scope: str | None) -> None:
        self._registry = registry
        self._state: RegistryState = registry._state
        self._scope = scope
        self._disposers: list[InMemoryDisposer] = []
        self._closed = False

    def _adopt(self, undo: Callable[[], None]) -> InMemoryDisposer:
        if self._closed:
            undo()
            raise RuntimeError("this scope or plugin is closed; create a new one to register again")
        disposer = InMemoryDisposer(undo)
        self._disposers.append(disposer)
        return disposer

    def register(self, definition: Any) -> InMemoryDisposer:
        """Register a tool as a frozen snapshot (globally, or shadowing for this agent)."""
        return self._adopt(self._state.add_tool(definition, self._scope))

    def guard(self, guard: Callable[..., Any]) -> InMemoryDisposer:
        """Add a synchronous guard ``guard(execution) -> reason | None``."""
        return self._adopt(self._state.add_guard(guard, self._scope))

    def on(self, event: Event, listener: Callable[..., Any], *, prepend: bool = False) -> InMemoryDisposer:
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


class InMemoryPlugin(_Owner):
    """A group of global registrations disposed together (``registry.plugin(name)``)."""

    def __init__(self, registry: "InMemoryRegistry", name: str) -> None:
        super().__init__(registry, None)
        self.name = name


class InMemoryScope(_Owner):
    """One agent's scope: its own layer, restrictions, guards and listeners, and its view."""

    def __init__(self, registry: "InMemoryRegistry", agent_id: str) -> None:
        if not isinstance(agent_id, str) or not agent_id:
            raise DefinitionError("an agent scope needs a non-empty str agent id")
        super().__init__(registry, agent_id)
        self.agent_id = agent_id

    def restrict(self, spec: Mapping[str, Any] | None = None, *, allow: Iterable[str] | None = None,
                 deny: Iterable[str] | None = None) -> InMemoryDisposer:
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

    def tools(self) -> Mapping[str, ToolDefinition]:
        return self._registry.tools(self.agent_id)

    def known_names(self) -> list[str]:
        return self._registry.known_names(self.agent_id)

    def schemas(self) -> list[ToolSchema]:
        return self._registry.schemas(self.agent_id)

    def execution_mode(self, call: Any = None, /, **fields: Any) -> Mapping[str, str]:
        """:meth:`InMemoryRegistry.execution_mode` on this agent's behalf."""
        return self._registry.execution_mode({**_as_fields(call), **fields, "agent": self.agent_id})

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
        if mode not in MODES:
            raise DefinitionError(f'tools mode must be one of {", ".join(MODES)}; got {mode!r}')
        transports = []
        if mode != "native":
            async def record(agent: str, event: dict[str, Any]) -> None:
                if on_code_dispatch is not None:
                    await settle(on_code_dispatch(agent, event))

            async def current() -> Any:
                return self.code_runtime

            transports.append(build_run_code(mode, current, lambda signal: self.execute, lambda: record))
        self.code_runtime = code_runtime
        self._mode = mode
        self._state = RegistryState(approval=approval, reserved=transports)
        self._scopes: dict[str, InMemoryScope] = {}
        super().__init__(self, None)

    @property
    def mode(self) -> str:
        return self._mode

    def sdk(self, scope: str | None = None) -> str:
        """The ``tools:sdk`` section text for ``scope`` (Code Mode); raises without a runtime."""
        runtime = check_runtime(self._mode, self.code_runtime)
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

    def on_change(self, listener: Callable[[], Any]) -> InMemoryDisposer:
        """``tools/change``: unfiltered notification after a tool or restriction change."""
        return self._adopt(self._state.add_change_listener(listener))

    def restrict(self, spec: Mapping[str, Any] | None = None, **_: Any) -> InMemoryDisposer:
        """Always raises: restrictions belong to an agent scope."""
        raise unscoped_restriction()

    def scope(self, agent_id: str) -> InMemoryScope:
        """The scope of ``agent_id`` (created on first use; a closed scope is replaced)."""
        current = self._scopes.get(agent_id)
        if current is None or current._closed:
            current = self._scopes[agent_id] = InMemoryScope(self, agent_id)
        return current

    def plugin(self, name: str) -> InMemoryPlugin:
        """A handle whose registrations are disposed together by ``dispose()``."""
        return InMemoryPlugin(self, name)

    def get(self, name: str, scope: str | None = None) -> ToolDefinition | None:
        """The definition ``scope`` resolves ``name`` to (absent if restricted away)."""
        return self._state.plan(scope).tools.get(name)

    def visible(self, scope: str | None = None) -> list[ToolDefinition]:
        return list(self._state.plan(scope).tools.values())

    def tools(self, scope: str | None = None) -> Mapping[str, ToolDefinition]:
        """The visible tools by name (:meth:`visible` as a read-only mapping)."""
        return self._state.plan(scope).tools

    def known_names(self, scope: str | None = None) -> list[str]:
        return self._state.known_names(scope)

    def schemas(self, scope: str | None = None) -> list[ToolSchema]:
        """``{name, description, parameters}`` of each visible tool; fresh copies each call."""
        return [definition.schema() for definition in self._state.plan(scope).tools.values()]

    def execution_mode(self, call: Any = None, /, **fields: Any) -> Mapping[str, str]:
        """``{"kind": "parallel"}`` when the call may run alongside the others of its step:
        the tool as ``agent`` sees it declares ``is_concurrency_safe`` and it returns
        exactly ``True`` for the call's arguments (as given); else ``{"kind": "exclusive"}``."""
        name, arguments, agent = call_fields(call if not fields else {**_as_fields(call), **fields})
        if not isinstance(name, str):
            return EXCLUSIVE
        return execution_mode(self.get(name, agent if isinstance(agent, str) else None), arguments)

    async def execute(self, call: Any = None, /, **fields: Any) -> ToolExecutionResult:
        """Run one call through the pipeline; never raises. Accepts a
        :class:`ToolExecutionInput`, a mapping, or keyword fields."""
        source = call if not fields else {**_as_fields(call), **fields}
        return await run_pipeline(source, self._state.plan)
