"""The clients: :class:`ToolRegistry`, :class:`AgentScope` and :class:`Plugin`.

They mirror the specification's service in snake_case over the registry actor and the
agent scope actors. Every call returns a :class:`~dsh_actors.runtime.response.Response`:
``await`` it in async code, ``.result(timeout_s=...)`` in a plain driver. Clients pickle
as their names and reconnect on the other side, so an actor or a task can receive one.

Lifetimes: registrations made directly on a registry or scope live until disposed (or
until their registry goes away); a :meth:`ToolRegistry.plugin` handle groups
registrations that are disposed together — explicitly, or when the process that made the
plugin (a driver, a job, an actor) dies.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

import msgpack
import ray

from ..core.errors import error_result
from ..core.jsonvalue import refreeze
from ..core.pipeline import ExecutionPlan, finish
from ..core.pipeline.create import create_execution
from ..core.errors import DefinitionError
from ..core.registry import MODES, RUN_CODE, Event, check_guard, check_listener, snapshot_definition
from ..core.types import ExecutionToken, ToolDefinition, ToolExecution, ToolExecutionResult, ToolSchema
from .errors import (
    RegistryUnavailableError,
    DEAD_ACTORS,
    ScopeUnavailableError,
    WorkerCrashedError,
    remote_call,
    translate,
)
from .signals import portable_reason, publish_signal
from .execution import NEED_PLAN, pack_call
from .executor import cancel_task
from .local import ensure_ray
from .registry_actor import HEARTBEAT_S, LEASE_S, PlanTicket, RegistryActor
from .response import Response, background_loop
from .revive import live_actor
from .version import version_key

if TYPE_CHECKING:
    from .approval import ApprovalQueue

__all__ = ["AgentScope", "Disposer", "Plugin", "ToolRegistry"]

DEFAULT_NAMESPACE = "dsh-actors"
_FIELDS = ("call_id", "name", "arguments", "agent", "parent", "signal")
_STALE_RETRIES = 3
_SICK_S = 5.0
"""How long a client avoids an executor that just failed a call (Ray is restarting it)."""


class Disposer:
    """Undoes one registration: ``await disposer()`` or ``disposer().result()``. Idempotent."""

    __slots__ = ("_undo", "_done", "_lock")

    def __init__(self, undo: Callable[[], Any]) -> None:
        self._undo = undo
        self._done = False
        self._lock = threading.Lock()

    def __call__(self) -> Response[None]:
        with self._lock:
            if self._done:
                return Response.of(None)
            self._done = True
        return Response(self._undo)

    @property
    def disposed(self) -> bool:
        return self._done


# --- the owner anchor: fate-sharing plugins with the process that made them -------------


@ray.remote(num_cpus=0, max_restarts=0)
class _OwnerAnchor:
    """A tiny actor owned by one client process: Ray kills it when that process dies,
    which tells the registry to dispose that process's plugins."""

    async def wait(self) -> None:
        await asyncio.Event().wait()


_anchor: Any = None
_anchor_lock = threading.Lock()


def _process_anchor() -> Any:
    global _anchor
    with _anchor_lock:
        if _anchor is None:
            _anchor = _OwnerAnchor.remote()  # type: ignore[attr-defined]
        return _anchor


# --- execution --------------------------------------------------------------------------


class _Overlay(Mapping[str, Any]):
    """The caller's input with some fields overridden (a scope sets ``agent``), read lazily
    so the pipeline's creation stage reads each field once and turns a raising getter
    into the call's result, exactly as in one process."""

    def __init__(self, call: Any, overrides: Mapping[str, Any]) -> None:
        self._call = call
        self._overrides = overrides

    def _has(self, key: str) -> bool:
        if key in self._overrides:
            return True
        if self._call is None:
            return False
        if isinstance(self._call, Mapping):
            return key in self._call
        return True  # attributes: read (and let a getter raise) in __getitem__

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self._has(key)

    def __getitem__(self, key: str) -> Any:
        if key in self._overrides:
            return self._overrides[key]
        if isinstance(self._call, Mapping):
            return self._call[key]
        return getattr(self._call, key, None)

    def __iter__(self) -> Any:
        return iter(_FIELDS)

    def __len__(self) -> int:
        return len(_FIELDS)


_LOCAL_PLANS: "OrderedDict[str, ExecutionPlan]" = OrderedDict()


async def _local_plan(ticket: PlanTicket) -> ExecutionPlan | None:
    key = ticket.plan_box[0].hex()
    plan = _LOCAL_PLANS.get(key)
    if plan is None:
        try:
            plan = await ticket.plan_box[0]
        except ray.exceptions.RayError:
            return None
        _LOCAL_PLANS[key] = plan
        if len(_LOCAL_PLANS) > 64:
            _LOCAL_PLANS.popitem(last=False)
    return plan


class _Subscription:
    """This process's subscription to one registry's version (see ``RegistryActor``).

    A poller on the background loop keeps ``known`` current and renews the lease; while
    the lease is live, a plan ticket of version ``known`` is current and executions skip
    the per-call version read.
    """

    def __init__(self, registry: "ToolRegistry", on_change: Callable[[int], None]) -> None:
        self._registry = registry
        self._on_change = on_change
        self._id = uuid.uuid4().hex
        self.known = 0
        self._valid_until = 0.0
        self._started = False
        self._lock = threading.Lock()

    def current(self, version: int) -> bool:
        """``True`` when ``version`` is the registry's version as of a live lease."""
        if not self._started:
            self._start()
            return False
        return version == self.known and time.monotonic() < self._valid_until

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        asyncio.run_coroutine_threadsafe(self._poll(), background_loop())

    async def _poll(self) -> None:
        try:
            await self._poll_until_gone()
        finally:
            self._valid_until = 0.0
            self._started = False  # the next call starts a new poller if it can

    async def _poll_until_gone(self) -> None:
        handle = self._registry._handle()
        while ray.is_initialized():  # never re-initialise Ray from this thread after shutdown
            sent = time.monotonic()
            try:
                version = await handle.subscribe.remote(self._id, self.known)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                return  # the registry is gone; executions fall back to reading the version
            except ray.exceptions.RayError:
                self._valid_until = 0.0
                await asyncio.sleep(HEARTBEAT_S)
                continue
            if version != self.known:
                self._valid_until = 0.0
                self._on_change(version)
                self.known = version
            # The registry renewed our lease on receiving this poll (after ``sent``).
            self._valid_until = sent + LEASE_S


class _ExecutorPool:
    """This process's view of a registry's executor actors, picked in turn.

    An executor that failed a call is avoided for :data:`_SICK_S` while Ray restarts it
    (calls sent to a restarting actor fail at once, and executions never retry); one that
    died for good is reported to the registry, which replaces it, and the view refreshed.
    """

    def __init__(self, registry: "ToolRegistry") -> None:
        self._registry = registry
        self._handles: list[Any] = []
        self._owner: Any = None  # the registry incarnation the handles came from
        self._sick: dict[Any, float] = {}  # actor id -> avoided until (monotonic)
        self._next = 0

    async def pick(self) -> Any:
        registry = self._registry._handle()
        if not self._handles or self._owner != registry._actor_id:
            self._handles = list(await remote_call(registry.executors, unavailable=RegistryUnavailableError,
                                                   what="the registry"))
            self._owner = registry._actor_id
        now = time.monotonic()
        for _ in range(len(self._handles)):
            self._next = (self._next + 1) % len(self._handles)
            handle = self._handles[self._next]
            if self._sick.get(handle._actor_id, 0.0) <= now:
                return handle
        return self._handles[self._next]  # all recently failed: try anyway

    def failed(self, handle: Any, died: bool) -> None:
        self._sick[handle._actor_id] = time.monotonic() + _SICK_S
        if not died:
            return
        self._handles = []
        try:
            self._registry._handle().replace_executor.remote(handle._actor_id.hex())
        except Exception:
            pass  # the registry is gone too: the next call reports that


class _Executor:
    """Runs calls for one registry in this process: plan tickets per scope, the version
    subscription, submission, failure mapping. Shared by every client of that registry."""

    def __init__(self, registry: "ToolRegistry") -> None:
        self._registry = registry
        self._tickets: dict[str | None, PlanTicket] = {}
        self._key = version_key(registry.namespace, registry.name)
        self._subscription = _Subscription(registry, lambda version: self._tickets.clear())
        self._pool = _ExecutorPool(registry)

    async def _ticket(self, agent: str | None, refresh: bool) -> PlanTicket:
        ticket = None if refresh else self._tickets.get(agent)
        if ticket is None:
            if agent is None:
                ticket = await remote_call(self._registry._handle().plan, unavailable=RegistryUnavailableError,
                                     what="the registry")
            else:
                ticket = await self._scope_ticket(agent)
            self._tickets[agent] = ticket
        return ticket

    async def _scope_ticket(self, agent: str) -> PlanTicket:
        for last_try in (False, True):
            handle = await self._registry._scope_handle(agent)
            try:
                return await remote_call(handle.plan, unavailable=ScopeUnavailableError,
                                         what=f"the scope of agent {agent!r}")
            except ScopeUnavailableError:
                # A scope seen dead is replaced from its journal by the next _scope_handle;
                # asking for a plan runs nothing, so asking again is safe.
                if last_try or handle._actor_id.hex() not in DEAD_ACTORS:
                    raise
        raise AssertionError("unreachable")

    async def execute(self, source: Mapping[str, Any], cancel_box: list[Any]) -> ToolExecutionResult:
        token = ExecutionToken()
        # Creation runs here too: input that cannot even become an execution never leaves
        # this process, and gets the same error result the task would give.
        execution, failure = create_execution(source, token)
        agent, signal = execution.agent, execution.signal
        ticket: PlanTicket | None = None
        cleanup: list[Callable[[], None]] = []
        try:
            if failure is not None:
                ticket = await self._ticket(agent, refresh=False)
                return await self._finish_here(execution, ticket, failure)
            identity = {"call_id": execution.call_id, "name": execution.name, "arguments": execution.arguments,
                        "agent": agent, "parent": execution.parent}
            signal_id = aborted = hub = None
            if signal is not None:
                hub = await self._registry._signal_hub()
                if signal.aborted:
                    aborted = ray.cloudpickle.dumps(portable_reason(signal.reason))
                else:
                    signal_id, unpublish = publish_signal(signal, hub)
                    cleanup.append(unpublish)
            attempt, box = 0, None
            while True:
                if ticket is None:
                    ticket = await self._ticket(agent, refresh=attempt > 0)
                if attempt >= _STALE_RETRIES or self._subscription.current(ticket.version):
                    check = None
                else:
                    check = ticket.version
                envelope = pack_call(token, identity, check, ticket.plan_id, self._key, signal_id, aborted)
                executor = await self._pool.pick()
                ref = executor.execute.remote(envelope) if box is None and hub is None \
                    else executor.execute.remote(envelope, box, hub)
                cancel_box[:] = [ref]
                try:
                    outcome = await ref
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as exc:
                    # The executor died under the call (a body that killed its process, a
                    # ray.kill, a lost node): this call gets one result; the pool heals.
                    self._pool.failed(executor, died=isinstance(exc, ray.exceptions.ActorDiedError))
                    raise WorkerCrashedError(
                        f'the worker running tool call "{execution.name}" ({execution.call_id}) died before it '
                        f"finished (its executor actor is gone)") from exc
                if outcome == NEED_PLAN:  # that executor has not cached this plan yet
                    box = ticket.plan_box
                    continue
                if isinstance(outcome, bytes):  # the result, already final in the executor
                    return ToolExecutionResult(refreeze(msgpack.unpackb(outcome)))
                attempt, ticket, box = attempt + 1, None, None
        except asyncio.CancelledError:
            if cancel_box:
                cancel_task(cancel_box[0])  # the awaiting task was cancelled: stop the call too
            raise
        except Exception as exc:
            what = f'tool call "{execution.name}" ({execution.call_id})'
            return await self._finish_here(execution, ticket, error_result(translate(exc, what=what)))
        finally:
            for undo in cleanup:
                undo()

    async def _finish_here(self, execution: ToolExecution, ticket: PlanTicket | None,
                           failure: Mapping[str, Any]) -> ToolExecutionResult:
        """Finish a call in this process: its input was unusable, or its worker died or was
        cancelled. Observers still hear it once; the caller still gets exactly one result."""
        plan = await _local_plan(ticket) if ticket is not None else None
        return finish(execution, failure, plan)


_EXECUTORS: dict[tuple[str, str], _Executor] = {}
_EXECUTORS_LOCK = threading.Lock()


def _executor(registry: "ToolRegistry") -> _Executor:
    key = (registry.namespace, registry.name)
    with _EXECUTORS_LOCK:
        executor = _EXECUTORS.get(key)
        if executor is None:
            executor = _EXECUTORS[key] = _Executor(registry)
        return executor


class _Registrar:
    """What registries, scopes and plugins share: registration and listener methods."""

    _owner: str | None = None

    def _registry_client(self) -> "ToolRegistry":
        raise NotImplementedError

    def _scope(self) -> str | None:
        return None

    def _claim(self) -> None:
        """Called before each registration (a plugin starts watching its owner)."""

    def register(self, definition: Any) -> Response[Disposer]:
        """Register a tool globally as a frozen snapshot (callbacks captured now)."""
        frozen = snapshot_definition(definition)
        self._claim()
        registry = self._registry_client()
        return registry._registration(registry._handle().register, frozen, self._owner)

    def guard(self, guard: Callable[..., Any]) -> Response[Disposer]:
        """Add a global guard ``guard(execution) -> reason | None``."""
        check_guard(guard)
        self._claim()
        registry = self._registry_client()
        return registry._registration(registry._handle().guard, guard, self._owner)

    def on(self, event: Event, listener: Callable[..., Any], *, prepend: bool = False) -> Response[Disposer]:
        """Add a listener (a plain callable or an :func:`actor_listener`) to ``event``."""
        check_listener(event, listener)
        self._claim()
        registry = self._registry_client()
        return registry._registration(registry._handle().on, event, listener, self._scope(), prepend, self._owner)


class ToolRegistry(_Registrar):
    """Client of the registry actor named ``name`` in ``namespace``.

    ``ToolRegistry.connect(name)`` gets or creates it (starting a local Ray instance when
    none is running). ``detached=True`` makes a fresh registry outlive the driver that
    created it (for long-lived fleets).
    """

    def __init__(self, name: str, namespace: str, handle: Any = None, mode: str | None = None) -> None:
        self.name = name
        self.namespace = namespace
        self._actor = handle
        self._mode = mode
        self._scope_handles: dict[str, Any] = {}
        self._hub: Any = None

    @classmethod
    def connect(cls, name: str = "default", *, namespace: str = DEFAULT_NAMESPACE, detached: bool = False,
                mode: str = "native", code_runtime: Any = None, code_dispatch: str = "in-task",
                executors: int | None = None) -> "ToolRegistry":
        """Get or create the registry actor ``name`` and return its client.

        ``mode`` is ``native`` (default), ``code`` or ``both``; Code Mode needs
        ``code_runtime``, a :class:`~dsh_actors.codemode.runtime.CodeRuntimeConfig` for the
        sandbox each worker runs programs in. ``code_dispatch`` is ``in-task`` (default: the
        run's own executor sends its sub-calls, in order, through the bridge's queue) or
        ``queue-actor`` (each run's queue lives in a pooled queue actor: one actor hop more
        per sub-call). ``executors`` is the size of the
        pool of executor actors that run the calls (default: one per alive node, at least
        two). Connecting to an existing registry with a different mode raises.
        """
        if mode not in MODES:
            raise DefinitionError(f'tools mode must be one of {", ".join(MODES)}; got {mode!r}')
        if code_dispatch not in ("queue-actor", "in-task"):
            raise DefinitionError(f'code_dispatch must be "queue-actor" or "in-task"; got {code_dispatch!r}')
        ensure_ray()
        options: dict[str, Any] = {"name": name, "namespace": namespace, "get_if_exists": True}
        if detached:
            options["lifetime"] = "detached"
        handle, config = live_actor(
            lambda: RegistryActor.options(**options).remote(  # type: ignore[attr-defined]
                name, namespace, detached, mode, code_runtime, code_dispatch, executors=executors),
            lambda h: h.config.remote(), what=f'registry "{name}"', unavailable=RegistryUnavailableError)
        actual = config["mode"]
        if actual != mode:
            raise DefinitionError(f'registry "{name}" already runs in mode "{actual}", not "{mode}"')
        return cls(name, namespace, handle, mode)

    @property
    def mode(self) -> str:
        """``native``, ``code`` or ``both`` (asked of the registry once, then cached)."""
        if self._mode is None:
            self._mode = ray.get(self._handle().config.remote(), timeout=120)["mode"]
        return self._mode

    def sdk(self, scope: str | None = None) -> Response[str]:
        """The ``tools:sdk`` section for ``scope`` (Code Mode); raises without a code runtime."""
        from ..codemode.sdk import sdk_section_text
        from ..codemode.transport import CodeRuntimeMissingError

        async def run() -> str:
            config = await remote_call(self._handle().config, unavailable=RegistryUnavailableError,
                                       what="the registry")
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
        return (ToolRegistry, (self.name, self.namespace, None, self._mode))

    def __repr__(self) -> str:
        return f"<ToolRegistry {self.namespace}/{self.name}>"

    def _handle(self) -> Any:
        """The registry actor's handle; a handle seen dead is dropped and the name resolved
        again (a registry that died is gone with its state: ``connect`` makes a fresh one,
        which its owners register into again)."""
        actor = self._actor
        if actor is None or actor._actor_id.hex() in DEAD_ACTORS:
            gone = RegistryUnavailableError(
                f'registry "{self.name}" is gone (killed or shut down); ToolRegistry.connect({self.name!r}) '
                "makes a fresh one, which its owners must register into again")
            try:
                actor = ray.get_actor(self.name, namespace=self.namespace)
            except ValueError:
                raise gone from None
            if actor._actor_id.hex() in DEAD_ACTORS:
                raise gone
            if self._actor is not None:  # a new incarnation: nothing cached for the old one holds
                self._hub = None
                self._scope_handles.clear()
                with _EXECUTORS_LOCK:
                    _EXECUTORS.pop((self.namespace, self.name), None)
            self._actor = actor
        return actor

    def _registry_client(self) -> "ToolRegistry":
        return self

    async def _signal_hub(self) -> Any:
        if self._hub is None:
            self._hub = await remote_call(self._handle().signal_hub, unavailable=RegistryUnavailableError,
                                    what="the registry")
        return self._hub

    async def _scope_handle(self, agent: str) -> Any:
        handle = self._scope_handles.get(agent)
        dead = handle._actor_id.hex() if handle is not None else None
        if dead not in DEAD_ACTORS:
            dead = None
        if handle is None or dead is not None:  # a scope seen dead is replaced from its journal
            handle = await remote_call(self._handle().ensure_scope, agent, dead, unavailable=RegistryUnavailableError,
                                       what="the registry")
            self._scope_handles[agent] = handle
        return handle

    def _registration(self, method: Any, *args: Any, dispose: Any = None) -> Response[Disposer]:
        async def run() -> Disposer:
            reg_id = await remote_call(method, *args, unavailable=RegistryUnavailableError, what="the registry")
            target = dispose or self._handle().dispose

            async def undo() -> None:
                await remote_call(target, reg_id, unavailable=RegistryUnavailableError, what="the registry")
            return Disposer(undo)

        return Response(run)

    # registrations (global; register, guard and on come from _Registrar)

    def on_change(self, listener: Callable[[], Any]) -> Response[Disposer]:
        """``tools/change``: unfiltered, called in the registry actor after each change;
        a listener that raises rolls a registration back."""
        return self._registration(self._handle().on_change, listener, None)

    def restrict(self, *_: Any, **__: Any) -> Response[Disposer]:
        """Always raises: restrictions belong to an agent scope."""
        from ..core.errors import RestrictionError

        raise RestrictionError(
            "tools.restrict() requires a scoped context (registry.scope(agent_id)): a restriction "
            "masks one agent's view of the global tools"
        )

    # views (global)

    def _view(self, method: str, *args: Any) -> Response[Any]:
        return Response(lambda: remote_call(getattr(self._handle(), method), *args,
                                      unavailable=RegistryUnavailableError, what="the registry"))

    def get(self, name: str, scope: str | None = None) -> Response[ToolDefinition | None]:
        return self.scope(scope).get(name) if scope is not None else self._view("get", name)

    def visible(self, scope: str | None = None) -> Response[list[ToolDefinition]]:
        return self.scope(scope).visible() if scope is not None else self._view("visible")

    def known_names(self, scope: str | None = None) -> Response[list[str]]:
        return self.scope(scope).known_names() if scope is not None else self._view("known_names")

    def schemas(self, scope: str | None = None) -> Response[list[ToolSchema]]:
        return self.scope(scope).schemas() if scope is not None else self._view("schemas")

    # execution

    def execute(self, call: Any = None, /, **fields: Any) -> Response[ToolExecutionResult]:
        """Run one call through the pipeline in a Ray task; resolves to exactly one result.

        Accepts a :class:`ToolExecutionInput`, a mapping, or keyword fields. ``signal``
        (an :class:`AbortSignal`) cancels the task when it aborts. ``response.cancel()``
        does the same. A crash, cancellation or lost object becomes an ``is_error`` result
        with a stable code; observers hear every call exactly once.
        """
        source = _Overlay(call, fields)
        cancel_box: list[Any] = []

        def cancel() -> None:
            if cancel_box:
                cancel_task(cancel_box[0])

        return Response(lambda: _executor(self).execute(source, cancel_box), on_cancel=cancel)

    # approval

    def approvals(self, policy: str | None = None) -> Response["ApprovalQueue"]:
        """Mount this registry's approval queue (``ask`` decisions wait for an answer) and
        return its client; ``policy`` ("ask" or "never") sets its default."""
        from .approval import ApprovalQueue

        async def run() -> ApprovalQueue:
            handle = await remote_call(self._handle().approvals, policy, unavailable=RegistryUnavailableError,
                                 what="the registry")
            return ApprovalQueue(self.name, self.namespace, handle)
        return Response(run)

    def unmount_approvals(self) -> Response[None]:
        """Unmount the approval queue: ``ask`` degrades to deny again."""
        return Response(lambda: remote_call(self._handle().unmount_approvals, unavailable=RegistryUnavailableError,
                                      what="the registry"))

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
        """Kill the registry actor and every scope actor it made (ends the registry)."""
        with _EXECUTORS_LOCK:
            _EXECUTORS.pop((self.namespace, self.name), None)
        handle = self._handle()
        try:
            scopes = ray.get(handle.scope_handles.remote(), timeout=30)
        except ray.exceptions.RayError:
            scopes = []
        for scope in scopes:
            try:
                ray.kill(scope)
            except Exception:
                pass
        ray.kill(handle)


class AgentScope(_Registrar):
    """One agent's view and layer: scoped tools, restrictions, guards and listeners."""

    def __init__(self, registry: ToolRegistry, agent_id: str) -> None:
        self.registry = registry
        self.agent_id = agent_id
        self._owner = f"scope:{agent_id}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (AgentScope, (self.registry, self.agent_id))

    def __repr__(self) -> str:
        return f"<AgentScope {self.agent_id!r} of {self.registry!r}>"

    def _registry_client(self) -> ToolRegistry:
        return self.registry

    def _scope(self) -> str | None:
        return self.agent_id

    def _scoped(self, method: str, *args: Any) -> Response[Any]:
        async def run() -> Any:
            handle = await self.registry._scope_handle(self.agent_id)
            return await remote_call(getattr(handle, method), *args, unavailable=ScopeUnavailableError,
                               what=f"the scope of agent {self.agent_id!r}")
        return Response(run)

    def _scoped_registration(self, method: str, *args: Any) -> Response[Disposer]:
        async def run() -> Disposer:
            handle = await self.registry._scope_handle(self.agent_id)
            reg_id = await remote_call(getattr(handle, method), *args, unavailable=ScopeUnavailableError,
                                 what=f"the scope of agent {self.agent_id!r}")

            async def undo() -> None:
                # Resolved again: the scope may have been replaced (same ids) since.
                current = await self.registry._scope_handle(self.agent_id)
                await remote_call(current.dispose, reg_id, unavailable=ScopeUnavailableError,
                                  what=f"the scope of agent {self.agent_id!r}")
            return Disposer(undo)
        return Response(run)

    def register(self, definition: Any) -> Response[Disposer]:
        """Register a tool for this agent alone (shadowing a same-named global in place)."""
        return self._scoped_registration("register", snapshot_definition(definition))

    def restrict(self, spec: Mapping[str, Any] | None = None, *, allow: Iterable[str] | None = None,
                 deny: Iterable[str] | None = None) -> Response[Disposer]:
        """Mask the global tools for this agent (``allow`` keeps only, ``deny`` hides)."""
        merged = dict(spec or {})
        if allow is not None:
            merged["allow"] = list(allow)
        if deny is not None:
            merged["deny"] = list(deny)
        return self._scoped_registration("restrict", merged)

    def guard(self, guard: Callable[..., Any]) -> Response[Disposer]:
        """Add a guard that applies to this agent's calls only."""
        check_guard(guard)
        return self._scoped_registration("guard", guard)

    def get(self, name: str) -> Response[ToolDefinition | None]:
        return self._scoped("get", name)

    def visible(self) -> Response[list[ToolDefinition]]:
        return self._scoped("visible")

    def known_names(self) -> Response[list[str]]:
        return self._scoped("known_names")

    def schemas(self) -> Response[list[ToolSchema]]:
        return self._scoped("schemas")

    def execute(self, call: Any = None, /, **fields: Any) -> Response[ToolExecutionResult]:
        """Execute on this agent's behalf (``agent`` is this scope's id)."""
        return self.registry.execute(call, **{**fields, "agent": self.agent_id})

    def close(self) -> Response[None]:
        """Dispose everything this scope registered (its actor stays, empty, for reuse)."""
        return self._scoped("close")


class Plugin(_Registrar):
    """Global registrations grouped under one owner, disposed together.

    Disposed by :meth:`dispose`, or by the registry when the process that created the
    plugin dies (a tiny actor fate-shared with that process tells it).
    """

    def __init__(self, registry: ToolRegistry, name: str) -> None:
        self.registry = registry
        self.name = name
        self._owner = f"plugin:{name}:{uuid.uuid4().hex}"
        self._watched = False
        self._lock = threading.Lock()

    def _registry_client(self) -> ToolRegistry:
        return self.registry

    def _claim(self) -> None:
        with self._lock:
            if self._watched:
                return
            self._watched = True
        self.registry._handle().watch_owner.remote(self._owner, _process_anchor())

    def dispose(self) -> Response[int]:
        """Dispose every registration of this plugin, last first; resolves to how many."""
        return Response(lambda: remote_call(self.registry._handle().dispose_owner, self._owner,
                                      unavailable=RegistryUnavailableError, what="the registry"))

