"""The clients: :class:`ToolRegistry`, :class:`AgentScope` and :class:`Plugin`.

They mirror the specification's service in snake_case over the registry actor and the agent
scope actors. Every call returns a :class:`~dsh_actors.runtime.response.Response`: ``await``
it in async code, ``.result(timeout_s=...)`` in a plain driver. Clients pickle as their
names and reconnect on the other side, so an actor or a task can receive one.

Lifetimes: a registration made on a registry or scope lives until disposed (or until its
registry goes away); a :meth:`ToolRegistry.plugin` groups registrations disposed together —
explicitly, or when the process that made it (a driver, a job, an actor) dies.
"""

from __future__ import annotations

import threading
import uuid
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..codemode.sdk import sdk_section_text
from ..codemode.transport import CodeRuntimeMissingError
from ..core.errors import DefinitionError
from ..core.trace_export import FLUSH_S
from ..core.registry import RUN_CODE, Event, check_guard, check_listener
from ..core.definitions import EXCLUSIVE, call_fields, execution_mode, snapshot_definition
from ..core.restrictions import unscoped_restriction
from ..core.types import ToolDefinition, ToolExecutionResult, ToolSchema
from .caller.calls import Call, CallInput
from .errors import RAY_ERROR, RegistryUnavailableError
from .caller.link import RegistryLink
from .caller.owner import forget, owner
from .local import ensure_ray
from .registry.registry_actor import REGISTRY_OPTIONS, RegistryActor
from .registry.registry_config import RegistryConfig
from .disposer import Disposer, process_anchor
from .response import Response
from .revive import live_actor, release
from .wire import DEFAULT_NAMESPACE, agent_session

if TYPE_CHECKING:
    from .registry.approval import ApprovalQueue

__all__ = ["AgentScope", "Plugin", "ToolRegistry"]

_UNKNOWN: Any = ("not asked yet",)  # a registry's ``sessions`` before it is known (it pickles; no str is it)


def _names_now(value: Any) -> Any:
    """A restriction's name list copied at the call (the scope actor refuses anything else)."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        return value
    return list(value)


_PLAN_VIEWS = ("get", "visible", "tools", "schemas", "known_names")


def _agent_id(scope: "str | AgentScope | None") -> str | None:
    return scope.agent_id if isinstance(scope, AgentScope) else scope


class _Registrar:
    """What registries, scopes and plugins share: registration and listener methods.

    Global registrations go to the registry actor under this client's ``_owner``; a
    scope overrides :meth:`_register` to send them to its scope actor instead.
    """

    _owner: str | None = None
    _link: RegistryLink

    def _claim(self) -> None:
        """Called before each registration (a plugin starts watching its owner)."""

    def _register(self, method: str, *args: Any) -> Response[Disposer]:
        self._claim()
        target = self._link

        async def run() -> Disposer:
            reg_id = await target.call(method, *args, self._owner)
            return Disposer(lambda: target.call("dispose", reg_id))
        return Response(run)

    def register(self, definition: Any) -> Response[Disposer]:
        """Register a tool as a frozen snapshot (callbacks captured now)."""
        return self._register("register", snapshot_definition(definition))

    def guard(self, guard: Callable[..., Any]) -> Response[Disposer]:
        """Add a guard ``guard(execution) -> reason | None``."""
        check_guard(guard)
        return self._register("guard", guard)

    def on(self, event: Event, listener: Callable[..., Any], *, prepend: bool = False) -> Response[Disposer]:
        """Add a listener (a plain callable or an :func:`actor_listener`) to ``event``; a
        scope's listeners hear only its agent's calls."""
        check_listener(event, listener)
        return self._register("on", event, listener, prepend)


class ToolRegistry(_Registrar):
    """Client of the registry actor named ``name`` in ``namespace``.

    ``ToolRegistry.connect(name)`` gets or creates it (starting a local Ray instance when
    none is running). ``detached=True`` makes a fresh registry outlive the driver that
    created it (for long-lived fleets).
    """

    def __init__(self, name: str, namespace: str = DEFAULT_NAMESPACE, handle: Any = None,
                 mode: str | None = None, sessions: Any = _UNKNOWN) -> None:
        self.name = name
        self.namespace = namespace
        self._owner_state = owner(name, namespace)
        self._link = self._owner_state.link
        self._link.adopt(handle)
        self._mode = mode
        self._sessions = sessions

    @classmethod
    def connect(cls, name: str = "default", *, namespace: str = DEFAULT_NAMESPACE, detached: bool = False,
                mode: str = "native", code_runtime: Any = None, code_dispatch: str = "in-task",
                executors: int | None = None, scope_hosting: str = "dedicated",
                scope_hosts: int | None = None, sessions: str | None = None) -> "ToolRegistry":
        """Get or create the registry actor ``name`` and return its client.

        ``mode`` is ``native`` (default), ``code`` or ``both``; Code Mode needs
        ``code_runtime``, a :class:`~dsh_actors.codemode.runtime.CodeRuntimeConfig` for the
        sandbox programs run in. ``code_dispatch`` is ``in-task`` (default: the run's own
        executor sends its sub-calls, in order) or ``queue-actor`` (each run's queue lives
        in a pooled queue actor: one actor hop more per sub-call). ``executors`` is the
        size of the pool of executor actors that run the calls (default: one per alive
        node, at least two). ``scope_hosting`` is ``dedicated`` (one actor per agent scope)
        or ``shared`` (agent scopes hashed onto ``scope_hosts`` host actors, default one per
        alive node and at least two: a scope costs kilobytes, not a process); the README
        says which to choose when. ``sessions`` scopes the ids of its agents' session logs
        (the approval queue's records and Code Mode's dispatch events go to
        ``<sessions>/<agent>``; default: the agent id): one batch job's. Connecting to an
        existing registry with a different mode or scope hosting raises.
        """
        config = RegistryConfig(name, namespace, detached=detached, mode=mode, code_runtime=code_runtime,
                                code_dispatch=code_dispatch, executors=executors, scope_hosting=scope_hosting,
                                scope_hosts=scope_hosts, sessions=sessions)  # misuse raises here, before any actor starts
        ensure_ray()
        options: dict[str, Any] = {"name": name, "namespace": namespace, "get_if_exists": True,
                                   **REGISTRY_OPTIONS}
        # On its maker's node (a driver's is the one that stays): a registry placed on a
        # worker node would take every agent's calls down with that node.
        options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(
            ray.get_runtime_context().get_node_id(), soft=False)
        if detached:
            options["lifetime"] = "detached"
        handle, running = live_actor(
            lambda: RegistryActor.options(**options).remote(config),  # type: ignore[attr-defined]
            lambda h: h.config.remote(), what=f'registry "{name}"', unavailable=RegistryUnavailableError)
        conflict = config.conflicts_with(running)
        if conflict is not None:
            raise DefinitionError(conflict)
        return cls(name, namespace, handle, mode, running.get("sessions"))

    def session_id(self, agent: str) -> str:
        """The id of ``agent``'s session log in this registry (see ``connect``'s ``sessions``):
        the log an agent's asks and Code Mode dispatches are recorded in."""
        if self._sessions == _UNKNOWN:
            self._sessions = ray.get(self._handle().config.remote(), timeout=120).get("sessions")
        return agent_session(self._sessions, agent)  # type: ignore[arg-type]

    @property
    def mode(self) -> str:
        """``native``, ``code`` or ``both`` (asked of the registry once, then cached)."""
        if self._mode is None:
            self._mode = ray.get(self._handle().config.remote(), timeout=120)["mode"]
        return self._mode

    def sdk(self, scope: "str | AgentScope | None" = None) -> Response[str]:
        """The ``tools:sdk`` section for ``scope`` (Code Mode); raises without a code runtime."""
        async def run() -> str:
            config = await self._link.call("config")
            if config["mode"] == "native":
                raise CodeRuntimeMissingError('the tools:sdk section exists only in mode "code" or "both"')
            if not config["code_runtime"]:
                raise CodeRuntimeMissingError(
                    f'dsh-actors: mode "{config["mode"]}" requires a code runtime — connect with '
                    "code_runtime=CodeRuntimeConfig() or set tools mode to \"native\"")
            schemas = await self.schemas(scope)
            return sdk_section_text((s for s in schemas if s["name"] != RUN_CODE), config.get("dialect"))
        return Response(run)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ToolRegistry, (self.name, self.namespace, None, self._mode, self._sessions))

    def __repr__(self) -> str:
        return f"<ToolRegistry {self.namespace}/{self.name}>"

    def _handle(self) -> Any:
        """The registry actor's handle (re-resolved by name once seen dead)."""
        return self._link.actor()

    async def _scope_handle(self, agent: str) -> Any:
        """The scope actor of ``agent`` (replaced from its journal once seen dead)."""
        return await self._link.scope(agent)

    # registrations (register, guard and on come from _Registrar)

    def on_change(self, listener: Callable[[], Any]) -> Response[Disposer]:
        """``tools/change``: unfiltered, called in the registry actor after each change;
        a listener that raises rolls a registration back."""
        return self._register("on_change", listener)

    def restrict(self, *_: Any, **__: Any) -> Response[Disposer]:
        """Always raises: restrictions belong to an agent scope."""
        raise unscoped_restriction()

    # views (global, or of ``scope``)

    def _view(self, scope: "str | AgentScope | None", method: str, *args: Any) -> Response[Any]:
        agent = _agent_id(scope)
        if method in _PLAN_VIEWS:
            return Response(lambda: self._plan_view(agent, method, *args))
        return Response(lambda: self._ask_owner(agent, method, *args))

    async def _ask_owner(self, agent: str | None, method: str, *args: Any) -> Any:
        if agent is not None:
            return await self._link.call_scope(agent, method, *args, resend=True)  # a view runs nothing
        return await self._link.call(method, *args)

    async def _plan_view(self, agent: str | None, method: str, *args: Any) -> Any:
        """A view read from the agent's current plan, which this process fetches once per
        plan (an agent step reads the view on every step: shipping each definition, its
        callbacks pickled, on every read cost more than the calls)."""
        plan = await self._owner_state.plans.current_plan(agent)
        if plan is None and method == "tools":
            return {d.name: d for d in await self._ask_owner(agent, "visible")}
        if plan is None:  # the plan object is lost: its owner answers
            return await self._ask_owner(agent, method, *args)
        if method == "tools":
            return plan.tools
        if method == "get":
            return plan.tools.get(args[0])
        if method == "visible":
            return list(plan.tools.values())
        if method == "known_names":
            return list(plan.known_names)
        return [d.schema() for d in plan.tools.values()]

    # A view's ``scope`` is an agent id or an AgentScope; without one, the global view.

    def get(self, name: str, scope: "str | AgentScope | None" = None) -> Response[ToolDefinition | None]:
        return self._view(scope, "get", name)

    def visible(self, scope: "str | AgentScope | None" = None) -> Response[list[ToolDefinition]]:
        return self._view(scope, "visible")

    def tools(self, scope: "str | AgentScope | None" = None) -> Response[Mapping[str, ToolDefinition]]:
        """The visible tools by name (:meth:`visible` as a read-only mapping): read from the
        scope's current plan, held in this process, so a frequent reader costs no copy."""
        return self._view(scope, "tools")

    def known_names(self, scope: "str | AgentScope | None" = None) -> Response[list[str]]:
        return self._view(scope, "known_names")

    def schemas(self, scope: "str | AgentScope | None" = None) -> Response[list[ToolSchema]]:
        return self._view(scope, "schemas")

    # execution

    def execute(self, call: Any = None, /, **fields: Any) -> Response[ToolExecutionResult]:
        """Run one call through the pipeline on an executor actor; resolves to exactly one
        result.

        Accepts a :class:`ToolExecutionInput`, a mapping, or keyword fields. ``signal``
        (an :class:`AbortSignal`) aborts the call wherever it runs; ``response.cancel()``
        cancels it. A crash, cancellation or lost object becomes an ``is_error`` result
        with a stable code; observers hear every call exactly once.
        """
        running = Call.of(self._owner_state, CallInput(call, fields))  # snapshot at the call
        return Response(running.run, on_cancel=running.cancel)

    def execution_mode(self, call: Any = None, /, **fields: Any) -> Response[Mapping[str, str]]:
        """``{"kind": "parallel"}`` when the call may run alongside the others of its step
        (the tool as its agent sees it declares ``is_concurrency_safe``, and that returns
        exactly ``True`` for the call's arguments, as given — it runs here, in the
        caller's process); else ``{"kind": "exclusive"}``."""
        name, arguments, agent = call_fields(CallInput(call, fields))

        async def run() -> Mapping[str, str]:
            if not isinstance(name, str):
                return EXCLUSIVE
            definition = await self.get(name, agent if isinstance(agent, str) else None)
            return execution_mode(definition, arguments)
        return Response(run)

    # approval

    def approvals(self, policy: str | None = None, *, timeout_s: float | None = None,
                  agent_timeouts: dict[str, float] | None = None) -> Response["ApprovalQueue"]:
        """Mount this registry's approval queue (``ask`` decisions wait for an answer) and
        return its client; ``policy`` ("ask", "never" or "always") sets its default;
        ``timeout_s`` (and ``agent_timeouts``, by agent) how long an ask waits for an answer
        before its call fails with ``APPROVAL_TIMEOUT`` (default: no deadline)."""
        from .registry.approval import ApprovalQueue, check_timeout

        check_timeout(timeout_s)
        for seconds in (agent_timeouts or {}).values():
            check_timeout(seconds)
        timeout = (timeout_s, dict(agent_timeouts or {})) if timeout_s is not None or agent_timeouts else None

        async def run() -> ApprovalQueue:
            handle = await self._link.call("approvals", policy, timeout)
            return ApprovalQueue(self.name, self.namespace, handle)
        return Response(run)

    def abort_agents(self, agents: Sequence[str], why: str = "aborted") -> Response[int]:
        """Cancel every running call, Code Mode run and pending ask of ``agents``, wherever
        they run (their callers are gone: a batch job runs an episode again only after its
        dead attempt's work is stopped); how many were cancelled."""
        return Response(lambda: self._link.call("abort_agents", list(agents), why))

    def unmount_approvals(self) -> Response[None]:
        """Unmount the approval queue: ``ask`` degrades to deny again."""
        return Response(lambda: self._link.call("unmount_approvals"))

    # scopes and plugins

    def scope(self, agent_id: str) -> "AgentScope":
        """The scope client of ``agent_id``; its actor is created on first use."""
        if not isinstance(agent_id, str) or not agent_id:
            raise TypeError("an agent scope needs a non-empty str agent id")
        return AgentScope(self, agent_id)

    def plugin(self, name: str) -> "Plugin":
        """A handle whose registrations are disposed together, explicitly or when this
        process dies."""
        return Plugin(self, name)

    def shutdown(self) -> None:
        """Kill the registry actor and every scope host it made (ends the registry; its
        executors and queues end with it, once they flushed their spans), and drop what this
        process kept of it (its plans, and with them the policy actors' handles they hold)."""
        handle = self._handle()
        try:
            scopes = ray.get(handle.scope_handles.remote(), timeout=30)
        except RAY_ERROR:
            scopes = []
        try:
            ray.get(handle.flush_spans.remote(FLUSH_S), timeout=FLUSH_S + 5)
        except RAY_ERROR:
            pass  # a registry already gone: its fleet went with it
        for scope in scopes:
            release(scope)
        ray.kill(handle)
        forget(self.name, self.namespace)


class AgentScope(_Registrar):
    """One agent's view and layer: scoped tools, restrictions, guards and listeners,
    all held by that agent's scope actor."""

    def __init__(self, registry: ToolRegistry, agent_id: str) -> None:
        self.registry = registry
        self.agent_id = agent_id
        self._link = registry._link

    def __reduce__(self) -> tuple[Any, ...]:
        return (AgentScope, (self.registry, self.agent_id))

    def __repr__(self) -> str:
        return f"<AgentScope {self.agent_id!r} of {self.registry!r}>"

    def _call(self, method: str, *args: Any) -> Any:
        return self._link.call_scope(self.agent_id, method, *args)

    def _register(self, method: str, *args: Any) -> Response[Disposer]:
        async def run() -> Disposer:
            reg_id = await self._call(method, *args)
            # Resolved again at disposal: the scope may have been replaced (same ids) since;
            # disposing twice disposes once, so a dispose that met a dead host goes again.
            return Disposer(lambda: self._link.call_scope(self.agent_id, "dispose", reg_id, resend=True))
        return Response(run)

    def register(self, definition: Any) -> Response[Disposer]:
        """Register a tool for this agent alone (shadowing a same-named global in place)."""
        return super().register(definition)

    def restrict(self, spec: Mapping[str, Any] | None = None, *, allow: Iterable[str] | None = None,
                 deny: Iterable[str] | None = None) -> Response[Disposer]:
        """Mask the global tools for this agent (``allow`` keeps only, ``deny`` hides)."""
        merged = {key: _names_now(value) for key, value in dict(spec or {}).items()}  # snapshot at the call
        if allow is not None:
            merged["allow"] = _names_now(allow)
        if deny is not None:
            merged["deny"] = _names_now(deny)
        return self._register("restrict", merged)

    def get(self, name: str) -> Response[ToolDefinition | None]:
        return self.registry.get(name, self.agent_id)

    def visible(self) -> Response[list[ToolDefinition]]:
        return self.registry.visible(self.agent_id)

    def tools(self) -> Response[Mapping[str, ToolDefinition]]:
        return self.registry.tools(self.agent_id)

    def known_names(self) -> Response[list[str]]:
        return self.registry.known_names(self.agent_id)

    def schemas(self) -> Response[list[ToolSchema]]:
        return self.registry.schemas(self.agent_id)

    def execute(self, call: Any = None, /, **fields: Any) -> Response[ToolExecutionResult]:
        """Execute on this agent's behalf (``agent`` is this scope's id)."""
        return self.registry.execute(call, **{**fields, "agent": self.agent_id})

    def execution_mode(self, call: Any = None, /, **fields: Any) -> Response[Mapping[str, str]]:
        """:meth:`ToolRegistry.execution_mode` on this agent's behalf."""
        return self.registry.execution_mode(call, **{**fields, "agent": self.agent_id})

    def close(self) -> Response[None]:
        """Dispose everything this scope registered and release its actor; the agent id
        can be used again (a new, empty scope)."""
        async def run() -> None:
            if not self._nothing_to_close():
                await self._link.call("drop_scope", self.agent_id)  # closes it on its host, then forgets it
            self._link.forget_scope(self.agent_id)
            self.registry._owner_state.plans.forget(self.agent_id)
        return Response(run)

    def _nothing_to_close(self) -> bool:
        """Whether this scope provably holds nothing anywhere, so closing it needs no call:
        its hosts are shared (no actor of its own), and the plan this process holds for it
        was answered for no scope (it never changed anything: no layer on its host, no
        journal in the registry) at the registry's version as of a live lease — so no
        change to it has returned since. An episode that changes nothing then costs the
        registry nothing when it ends (every other close is one registry call, as before)."""
        plans = self.registry._owner_state.plans
        ticket = plans.cached(self.agent_id)
        return self._link.shares_hosts and ticket is not None and not ticket.scoped and plans.current(ticket)


class Plugin(_Registrar):
    """Global registrations grouped under one owner, disposed together.

    Disposed by :meth:`dispose`, or by the registry when the process that created the
    plugin dies (a tiny actor fate-shared with that process tells it).
    """

    def __init__(self, registry: ToolRegistry, name: str) -> None:
        self.registry = registry
        self.name = name
        self._link = registry._link
        self._owner = f"plugin:{name}:{uuid.uuid4().hex}"
        self._watched = False
        self._lock = threading.Lock()

    def _claim(self) -> None:
        with self._lock:
            if self._watched:
                return
            self._watched = True
        self._link.actor().watch_owner.remote(self._owner, process_anchor())

    def dispose(self) -> Response[int]:
        """Dispose every registration of this plugin, last first; resolves to how many."""
        return Response(lambda: self._link.call("dispose_owner", self._owner))
