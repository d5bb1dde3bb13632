"""The registry actor: one named actor per registry, owning the global layer and the version.

It holds the global tools, global guards and listeners, the ``tools/change`` listeners,
the approval seam, the pools it starts (executors, Code Mode queues), the signal hub,
and each agent's journal. Scope actors own everything scoped (tools, restrictions,
guards, listeners) and report each change through :meth:`RegistryActor.bump`: the
registry is the version's only writer. ``RegistryCore`` is the plain class; the actor
is a thin shell over it.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any, Callable

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..codemode.runtime import dialect
from ..core.errors import error_message
from ..core.pipeline import ExecutionPlan
from ..core.registry import Chains, RegistryState, snapshot_definition
from ..core.types import ToolDefinition, ToolSchema
from .approval import APPROVALS_OPTIONS, ActorApproval, ApprovalQueueActor, check_policy
from .codemode import QUEUE_OPTIONS, CodeRunQueue, ray_run_code
from .errors import ACTOR_GONE, RAY_ERROR, RegistryUnavailableError
from .executor import ExecutorActor
from .leases import Leases
from .placement import execution_options
from .revive import live_actor_async, release
from .scope_actor import SCOPE_HOSTINGS, SCOPE_OPTIONS, SHARED_HOST_CONCURRENCY, ScopeHost
from .signals import HUB_OPTIONS, HubRef, SignalHub
from .version import read_version, version_key, write_version
from .wire import PlanTicket, approvals_actor_name, host_index, scope_actor_name

__all__ = ["EXECUTOR_OPTIONS", "REGISTRY_OPTIONS", "RegistryActor", "RegistryCore"]

log = logging.getLogger("dsh_actors.runtime")


def _here() -> NodeAffinitySchedulingStrategy:
    """Pinned to this actor's node: what the registry alone owns (its hub, its approval
    queue) lives and dies with it, never on a worker node that may leave the cluster."""
    return NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)


def _alive_nodes() -> list[str]:
    """The ids of the cluster's alive nodes, in a stable order (one GCS read)."""
    return sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))


class RegistryCore:
    """The registry's state and bookkeeping, without Ray's actor machinery."""

    def __init__(self, name: str, namespace: str, publish: Callable[[int], None], *,
                 transport: ToolDefinition | None = None) -> None:
        self.name = name
        self.namespace = namespace
        self.state = RegistryState(reserved=[transport] if transport is not None else [])
        self._publish = publish
        self.version = 0
        self._ids = itertools.count(1)
        self._undo: dict[int, tuple[str | None, Callable[[], None]]] = {}
        self._by_owner: dict[str, list[int]] = {}

    def bump(self) -> int:
        """Publish a new version: every cached plan older than it is refused by executions."""
        self.version += 1
        self._publish(self.version)
        return self.version

    def _track(self, owner: str | None, undo: Callable[[], None]) -> int:
        reg_id = next(self._ids)
        self._undo[reg_id] = (owner, undo)
        if owner is not None:
            self._by_owner.setdefault(owner, []).append(reg_id)
        self.bump()
        return reg_id

    def register(self, definition: Any, owner: str | None) -> int:
        frozen = snapshot_definition(definition)
        execution_options(frozen)  # misuse of Ray options fails loud, now
        return self._track(owner, self.state.add_tool(frozen))

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

    def global_names(self) -> list[str]:
        return list(self.state.globals)

    def base_plan(self) -> tuple[int, ExecutionPlan, Chains]:
        """What a scope composes its agent's plan from: the version, the global plan and
        the global listeners (its own listeners take their places among them)."""
        return self.version, self.state.base_plan(), self.state.chains

    def get(self, name: str) -> ToolDefinition | None:
        return self.state.plan(None).tools.get(name)

    def visible(self) -> list[ToolDefinition]:
        return list(self.state.plan(None).tools.values())

    def schemas(self) -> list[ToolSchema]:
        return [d.schema() for d in self.state.plan(None).tools.values()]


REGISTRY_OPTIONS = {"num_cpus": 0, "max_restarts": 0}
"""Options of a registry actor (its state is not durable: a dead one is made afresh)."""
EXECUTOR_OPTIONS = {"num_cpus": 0, "max_restarts": -1, "max_task_retries": 0}
"""Options of an executor actor (restarted by Ray; its calls are never retried)."""


@ray.remote
class RegistryActor:
    """Ray shell over :class:`RegistryCore` and the version's :class:`~.leases.Leases`;
    its methods are what clients call. Every change returns only after each client with a
    live lease heard of it. It also starts and replaces the actors it owns: executors,
    scope actors, the signal hub, Code Mode queues, the approval queue."""

    def __init__(self, name: str, namespace: str, detached: bool, mode: str = "native",
                 code_runtime: Any = None, code_dispatch: str = "in-task", queues: int = 2,
                 executors: int | None = None, executor_concurrency: int = 10_000,
                 scope_hosting: str = "dedicated", scope_hosts: int | None = None) -> None:
        if scope_hosting not in SCOPE_HOSTINGS:
            raise ValueError(f'scope_hosting must be one of {", ".join(SCOPE_HOSTINGS)}; got {scope_hosting!r}')
        self._name, self._namespace = name, namespace
        key = version_key(namespace, name)
        transport = None
        self._queues: list[tuple[Any, str | None]] = []  # (queue, the node it is pinned to)
        if mode != "native":
            if code_dispatch == "queue-actor":
                nodes = _alive_nodes()
                self._queues = [self._new_queue(i, nodes) for i in range(max(queues, len(nodes)))]
            transport = ray_run_code(mode, name, namespace, self._queues, code_runtime, code_dispatch)
        self._mode, self._code_runtime = mode, code_runtime
        self._core = RegistryCore(name, namespace, lambda v: write_version(key, v), transport=transport)
        self._core.version = read_version(key)  # a recreated registry never reuses a version
        self._core.bump()
        self._detached = detached
        self._scopes: dict[str, Any] = {}  # dedicated hosting: agent -> its host
        self._hosting, self._host_count = scope_hosting, scope_hosts
        self._hosts: list[Any] = []  # shared hosting: the hosts, agents hashed onto them
        self._journals: dict[str, list[tuple[int, str, Any]]] = {}  # per agent: its scope's changes
        self._plans: dict[int, Any] = {}
        self._watchers: set[asyncio.Task[Any]] = set()
        self._hub: Any = None
        self._approvals: Any = None
        self._executor_count, self._executor_concurrency = executors, executor_concurrency
        self._executors: list[Any] = []
        self._executor_node: dict[str, str | None] = {}
        self._host_node: dict[str, str | None] = {}
        self.executors()  # created with the registry: the first call finds them started
        self.scope_hosts()
        self._leases = Leases(lambda: self._core.version)

    # the subscription protocol

    async def subscribe(self, client: str, known: int) -> int:
        """A client's long poll on the version (see :mod:`.leases`)."""
        return await self._leases.poll(client, known)

    async def _settled(self, result: Any = None) -> Any:
        """After a change: return ``result`` once every live subscriber heard of it."""
        await self._leases.settled()
        return result

    # registrations

    async def register(self, definition: Any, owner: str | None) -> int:
        return await self._settled(self._core.register(definition, owner))

    async def guard(self, guard: Callable[..., Any], owner: str | None) -> int:
        return await self._settled(self._core.guard(guard, owner))

    async def on(self, event: str, listener: Callable[..., Any], prepend: bool, owner: str | None) -> int:
        return await self._settled(self._core.on(event, listener, prepend, owner))

    async def on_change(self, listener: Callable[[], Any], owner: str | None) -> int:
        return await self._settled(self._core.on_change(listener, owner))

    async def dispose(self, reg_id: int) -> None:
        try:
            self._core.dispose(reg_id)
        finally:
            await self._settled()

    async def dispose_owner(self, owner: str) -> int:
        return await self._settled(self._core.dispose_owner(owner))

    async def bump(self) -> int:
        """A scope actor changed its layer: publish a new version (after acknowledgements)."""
        return await self._settled(self._core.bump())

    async def watch_owner(self, owner: str, anchor: Any) -> None:
        """Dispose ``owner``'s registrations when ``anchor`` (fate-shared with it) dies."""
        async def watch() -> None:
            try:
                await anchor.wait.remote()
            except Exception:
                pass
            count = self._core.dispose_owner(owner)
            await self._settled()
            log.info("owner %s is gone: disposed %d registrations", owner, count)

        task = asyncio.get_running_loop().create_task(watch())
        self._watchers.add(task)
        task.add_done_callback(self._watchers.discard)

    # views and plans

    def version(self) -> int:
        return self._core.version

    def global_names(self) -> list[str]:
        return self._core.global_names()

    def base_plan(self) -> tuple[int, ExecutionPlan, Chains]:
        return self._core.base_plan()

    def sequence(self) -> int:
        """The next listener registration number (scoped listeners are ordered with global ones)."""
        return self._core.state.next_sequence()

    def plan(self) -> PlanTicket:
        """The ticket for calls with no agent (the global view)."""
        version, plan, _ = self._core.base_plan()
        ticket = self._plans.get(version)
        if ticket is None:
            self._plans = {version: PlanTicket.of(version, plan)}
            ticket = self._plans[version]
        return ticket

    def get(self, name: str) -> ToolDefinition | None:
        return self._core.get(name)

    def visible(self) -> list[ToolDefinition]:
        return self._core.visible()

    def known_names(self) -> list[str]:
        return self._core.global_names()

    def schemas(self) -> list[ToolSchema]:
        return self._core.schemas()

    async def approvals(self, policy: str | None) -> Any:
        """Mount the approval queue (created on first use, owned by this actor); with a
        ``policy``, set its default. Returns the queue's handle."""
        if self._approvals is not None:
            try:
                await asyncio.wait_for(self._approvals.policy.remote(None), 30)
            except ACTOR_GONE:
                self._approvals = None  # killed: mount a new queue (pending asks were denied)
        if self._approvals is None:
            self._approvals, _ = await live_actor_async(
                lambda: ApprovalQueueActor.options(**APPROVALS_OPTIONS,  # type: ignore[attr-defined]
                    scheduling_strategy=_here(),
                    name=approvals_actor_name(self._core.name), namespace=self._core.namespace,
                    get_if_exists=True,
                ).remote(self._core.namespace, check_policy(policy or "ask"), self._core.name),
                lambda h: h.policy.remote(None), what="the approval queue", unavailable=RegistryUnavailableError)
            self._core.state.approval = ActorApproval(self._approvals)
            self._core.state.touched()
            self._core.bump()
            await self._settled()
        elif policy is not None:
            await self._approvals.set_policy.remote(check_policy(policy))
        return self._approvals

    async def unmount_approvals(self) -> None:
        """Unmount the approval queue: ``ask`` degrades to deny again."""
        if self._approvals is not None:
            ray.kill(self._approvals)
            self._approvals = None
            self._core.state.approval = None
            self._core.state.touched()
            self._core.bump()
            await self._settled()

    def signal_hub(self, dead: str | None = None) -> HubRef:
        """The hub carrying callers' aborts to executors and body tasks (owned by this
        actor). ``dead`` is the id of a hub a client saw die for good: if it is the one on
        record, a successor starts (a hub whose process died is restarted by Ray)."""
        if self._hub is None or (dead is not None and self._hub._actor_id.hex() == dead):
            self._hub = SignalHub.options(**HUB_OPTIONS, scheduling_strategy=_here()).remote()  # type: ignore[attr-defined]
        return HubRef(self._name, self._namespace, self._hub)

    # scopes

    def journal_add(self, agent: str, reg_id: int, kind: str, payload: Any) -> None:
        """Record one validated change of ``agent``'s scope (replayed if the scope dies)."""
        self._journals.setdefault(agent, []).append((reg_id, kind, payload))

    def journal_drop(self, agent: str, reg_id: int) -> None:
        self._journals[agent] = [entry for entry in self._journals.get(agent, []) if entry[0] != reg_id]

    def _new_host(self, journals: dict[str, list[tuple[int, str, Any]]], strategy: Any = None,
                  name: str | None = None) -> Any:
        options: dict[str, Any] = {"namespace": self._core.namespace, **SCOPE_OPTIONS}
        if name is not None:
            options["name"] = name
        if strategy is not None:
            options.update(scheduling_strategy=strategy, max_concurrency=SHARED_HOST_CONCURRENCY)
        if self._detached:
            options["lifetime"] = "detached"
        return ScopeHost.options(**options).remote(  # type: ignore[attr-defined]
            self._core.name, self._core.namespace, journals)

    def _new_shared_host(self, index: int, count: int, nodes: list[str]) -> Any:
        """Shared host ``index`` of ``count``, pinned to ``nodes[index % len(nodes)]``, with
        the journals of the agents hashed to it (none for a new registry)."""
        node = nodes[index % len(nodes)] if nodes else None
        strategy = NodeAffinitySchedulingStrategy(node, soft=False) if node else "SPREAD"
        journals = {agent: list(entries) for agent, entries in self._journals.items()
                    if host_index(agent, count) == index}
        handle = self._new_host(journals, strategy)
        self._host_node[handle._actor_id.hex()] = node
        return handle

    def scope_hosts(self) -> list[Any]:
        """Shared hosting: the hosts, made with the registry (``scope_hosts`` of them,
        default one per alive node and at least two), spread over the nodes; clients hash
        an agent onto them (:func:`~.wire.host_index`). Dedicated hosting: ``[]``."""
        if self._hosting == "shared" and not self._hosts:
            nodes = _alive_nodes()
            count = self._host_count or max(2, len(nodes))
            self._hosts = [self._new_shared_host(i, count, nodes) for i in range(count)]
        return self._hosts

    def scope_host_nodes(self) -> list[str | None]:
        """Shared hosting: the node each host is pinned to, in host order (an episode
        runner on that node keeps an agent's scope calls on its node); ``[]`` otherwise."""
        return [self._host_node.get(h._actor_id.hex()) for h in self.scope_hosts()]

    async def ensure_scope(self, agent: str, dead: str | None = None) -> Any:
        """The host of ``agent``'s scope. ``dead`` is the id of a host a client saw die:
        if it is the one on record, a new one starts from its agents' journals. Dedicated
        hosting makes the agent's host on first use (it lives until the scope is closed
        or the registry ends)."""
        if self._hosting == "shared":
            index = host_index(agent, len(self._hosts))
            if dead is not None and self._hosts[index]._actor_id.hex() == dead:
                release(self._hosts[index])
                self._hosts[index] = self._new_shared_host(index, len(self._hosts), await asyncio.to_thread(_alive_nodes))
            return self._hosts[index]
        handle = self._scopes.get(agent)
        if handle is not None and dead is not None and handle._actor_id.hex() == dead:
            release(handle)
            handle = None
        if handle is None:
            handle = self._new_host({agent: list(self._journals.get(agent, []))},
                                    name=scope_actor_name(self._core.name, agent))
            self._scopes[agent] = handle
        return handle

    async def drop_scope(self, agent: str) -> None:
        """Close ``agent``'s scope: dispose everything it registered, then release its host
        (dedicated) or its place in one (shared), and everything kept for it."""
        changed = bool(self._journals.pop(agent, None))
        handle = self._scopes.pop(agent, None)
        host = handle if handle is not None else (
            self._hosts[host_index(agent, len(self._hosts))] if self._hosts else None)
        if host is not None:
            try:
                await host.close.remote(agent, forget=True)
            except RAY_ERROR:
                pass  # the host died: nothing of the scope is left there, and its journal is gone
        if handle is not None:
            release(handle)
        if changed:  # a scope that never changed anything changes no plan when it goes
            await self._settled(self._core.bump())

    async def scopes(self) -> list[str]:
        """The agents whose scopes are live."""
        hosted = await asyncio.gather(*(host.agents.remote() for host in self._hosts), return_exceptions=True)
        return sorted({*self._scopes, *(a for agents in hosted if isinstance(agents, list) for a in agents)})

    def scope_handles(self) -> list[Any]:
        """Every scope host (to end them with the registry)."""
        return [*self._scopes.values(), *self._hosts]

    # the executor pool

    def _new_executor(self, index: int, nodes: list[str]) -> Any:
        """Executor ``index``, pinned to ``nodes[index % len(nodes)]`` (alive node ids)."""
        node = nodes[index % len(nodes)] if nodes else None
        strategy = NodeAffinitySchedulingStrategy(node, soft=False) if node else "SPREAD"
        handle: Any = ExecutorActor.options(
            **EXECUTOR_OPTIONS, max_concurrency=self._executor_concurrency, scheduling_strategy=strategy,
        ).remote(self._name, self._namespace, calls=self._executor_concurrency)
        self._executor_node[handle._actor_id.hex()] = node
        return handle

    def _new_queue(self, index: int, nodes: list[str]) -> tuple[Any, str | None]:
        """Code Mode queue ``index``, pinned to ``nodes[index % len(nodes)]`` (so a run finds
        one on its own node), with that node."""
        node = nodes[index % len(nodes)] if nodes else None
        strategy = NodeAffinitySchedulingStrategy(node, soft=False) if node else "SPREAD"
        handle = CodeRunQueue.options(**QUEUE_OPTIONS, scheduling_strategy=strategy).remote(  # type: ignore[attr-defined]
            self._name, self._namespace)
        return handle, node

    def executors(self) -> list[Any]:
        """The pool of executor actors, made on first use: ``executors`` of them (default:
        one per alive node, at least two), spread over the nodes."""
        if not self._executors:
            nodes = _alive_nodes()
            count = self._executor_count or max(2, len(nodes))
            self._executors = [self._new_executor(i, nodes) for i in range(count)]
        return self._executors

    def executor_nodes(self) -> list[tuple[Any, str | None]]:
        """Each executor with the node it is pinned to (how callers route to their node)."""
        return [(handle, self._executor_node.get(handle._actor_id.hex())) for handle in self.executors()]

    async def replace_executor(self, actor_id: str) -> None:
        """A client saw this executor die for good (``ray.kill``): start its successor."""
        for index, handle in enumerate(self._executors):
            if handle._actor_id.hex() == actor_id:
                self._executor_node.pop(actor_id, None)
                self._executors[index] = self._new_executor(index, await asyncio.to_thread(_alive_nodes))

    async def code_queue(self, dead: str) -> tuple[Any, str | None] | None:
        """A client saw Code Mode queue ``dead`` die for good: start its successor (once)
        and return it, with its node."""
        for index, (handle, _) in enumerate(self._queues):
            if handle._actor_id.hex() == dead:
                self._queues[index] = self._new_queue(index, await asyncio.to_thread(_alive_nodes))
                return self._queues[index]
        return self._queues[0] if self._queues else None

    def ping(self) -> str:
        return "pong"

    def config(self) -> dict[str, Any]:
        """The mode and whether a code runtime is configured (for the SDK and clients)."""
        return {"mode": self._mode, "code_runtime": self._code_runtime is not None,
                "scope_hosting": self._hosting,
                "dialect": dialect(self._code_runtime) if self._code_runtime is not None else None}
