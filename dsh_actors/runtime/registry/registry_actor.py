"""The registry actor: one named actor per registry, owning the global layer and the version.

A thin shell over three plain parts: :class:`~.registry_config.RegistryConfig` (what it was
made with, validated once by the client), :class:`~.registry_core.RegistryCore` (the global
tools, guards and listeners, the version, each agent's journal) and
:class:`~.fleet.Fleet` (the executors, scope hosts, Code Mode queues and signal hub it
starts and replaces). The shell adds what is about being an actor: the version's
:class:`~.leases.Leases` (a change returns once every live client heard of it), the
approval queue it mounts, and watching owners' anchors. Scope hosts own everything scoped
and report each change in one call (:meth:`RegistryService.scope_changed`): the registry is
the version's only writer.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Callable, Sequence

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ...core.pipeline import ExecutionPlan
from ...core.registry import Chains
from ...core.types import ToolDefinition, ToolSchema
from ...core.within import within
from .approval import APPROVALS_OPTIONS, ActorApproval, ApprovalQueueActor, check_policy, check_timeout
from ..executor.codemode import ray_run_code
from ..errors import ACTOR_GONE, RAY_ERROR, RegistryUnavailableError
from .fleet import EXECUTOR_OPTIONS, Fleet, Spawner
from .leases import Leases
from .registry_config import RegistryConfig
from .registry_core import RegistryCore
from ..revive import live_actor_async
from ..signals import HubRef
from ..traces import flush_actors
from ..version import VersionStore
from ..wire import PlanTicket, approvals_actor_name

__all__ = ["EXECUTOR_OPTIONS", "REGISTRY_OPTIONS", "RegistryActor", "RegistryService"]

log = logging.getLogger("dsh_actors.runtime")

_ABORT_S = 10.0
"""How long an abort of agents waits for the executors and queues to answer."""

REGISTRY_OPTIONS = {"num_cpus": 0, "max_restarts": 0}
"""Options of a registry actor (its state is not durable: a dead one is made afresh)."""


class RegistryService:
    """What clients call on a registry (:data:`RegistryActor` runs it on Ray). Every change
    returns only after each client with a live lease heard of it."""

    def __init__(self, config: RegistryConfig, *, spawner: Spawner | None = None,
                 versions: VersionStore | None = None) -> None:
        """``spawner`` starts the fleet's actors and ``versions`` keeps the version (Ray's,
        by default; a test gives in-process ones)."""
        self._config = config
        versions = versions or VersionStore(config.namespace, config.name)
        self._fleet = Fleet(config, lambda: self._core.journals, spawner)
        transport = None if config.mode == "native" else ray_run_code(
            config.mode, config.name, config.namespace, self._fleet.queues, config.code_runtime, config.code_dispatch,
            config.sessions)
        self._core = RegistryCore(config.name, config.namespace, versions.write,
                                  transport=transport, version=versions.read())  # never a version used before
        self._core.bump()
        self._fleet.start()
        self._approvals: Any = None  # the approval queue's actor, once made
        self._approval_policy: str | None = None  # mounted with this default (None: not mounted)
        self._approval_timeout: tuple[float | None, dict[str, float]] = (None, {})  # its asks' deadlines
        self._approvals_made = asyncio.Lock()
        self._watchers: set[asyncio.Task[Any]] = set()
        self._watching: dict[str, asyncio.Task[None]] = {}  # pool members watched, by actor id
        self._guests: dict[str, Any] = {}  # actors that run calls of their own (add_guest), by actor id
        self._leases = Leases(lambda: self._core.version)

    # the subscription protocol

    async def subscribe(self, client: str, known: int) -> tuple[int, bool, list[Any]]:
        """A client's long poll on the version (see :mod:`.leases`): the version, and which
        agents have a scope of their own as of it (:meth:`RegistryCore.scoped_since`:
        whether the list is all of them, then the list)."""
        self._watch_pools()
        version = await self._leases.poll(client, known)
        return (version, *self._core.scoped_since(known))

    async def _settled(self, result: Any = None) -> Any:
        """After a change: return ``result`` once every live subscriber heard of it."""
        await self._leases.settled()
        return result

    # registrations

    async def register(self, definition: ToolDefinition, owner: str | None) -> int:
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

    # what scope hosts report: one call per change

    async def scope_changed(self, agent: str, reg_id: int, kind: str, payload: Any) -> int:
        """``agent``'s scope made a validated change: journal it (replayed if the host dies)
        and publish a new version."""
        return await self._settled(self._core.scope_changed(agent, reg_id, kind, payload))

    async def scope_disposed(self, agent: str, reg_id: int) -> int:
        return await self._settled(self._core.scope_disposed(agent, reg_id))

    # views and plans

    def version(self) -> int:
        return self._core.version

    def global_names(self) -> list[str]:
        return self._core.global_names()

    def known_names(self) -> list[str]:
        return self._core.global_names()

    def base_plan(self) -> tuple[int, ExecutionPlan, Chains]:
        return self._core.base_plan()

    def sequence(self) -> int:
        """The next listener registration number (scoped listeners are ordered with global ones)."""
        return self._core.state.next_sequence()

    def plan(self) -> PlanTicket:
        """The ticket for calls with no agent (the global view)."""
        return self._core.plan_ticket()

    def get(self, name: str) -> ToolDefinition | None:
        return self._core.get(name)

    def visible(self) -> list[ToolDefinition]:
        return self._core.visible()

    def schemas(self) -> list[ToolSchema]:
        return self._core.schemas()

    # the approval queue

    async def approvals(self, policy: str | None, timeout: tuple[float | None, dict[str, float]] | None = None) -> Any:
        """Mount the approval queue; with a ``policy``, set its default; with ``timeout``
        (a deadline, and per-agent ones), its asks' deadlines. The queue's actor
        (owned by this one) is made on first use: the first ask, or a client of the queue
        (:meth:`approval_queue`); a job whose agents never ask pays for no actor. Returns
        the queue's handle, ``None`` while it is not made."""
        if timeout is not None:
            self._approval_timeout = (check_timeout(timeout[0]), dict(timeout[1]))
            if self._approvals is not None:
                await self._approvals.set_timeout.remote(*self._approval_timeout)
        if self._approvals is not None:
            try:
                await within(self._approvals.policy.remote(None), 30)
            except ACTOR_GONE:  # killed: mount a new queue (pending asks were denied)
                self._approvals, self._approval_policy = None, None
        if self._approval_policy is None:
            self._approval_policy = check_policy(policy or "ask")
            self._set_approval(ActorApproval(registry=ray.get_runtime_context().current_actor))
            await self._settled()
        elif policy is not None:
            self._approval_policy = check_policy(policy)
            if self._approvals is not None:
                await self._approvals.set_policy.remote(policy)
        return self._approvals

    async def approval_queue(self) -> Any:
        """The mounted approval queue's actor, made now if nothing needed it before
        (``None``: no queue is mounted)."""
        async with self._approvals_made:
            if self._approvals is None and self._approval_policy is not None:
                here = NodeAffinitySchedulingStrategy(self._fleet.spawner.here(), soft=False)  # lives and dies with us
                self._approvals, _ = await live_actor_async(
                    lambda: ApprovalQueueActor.options(**APPROVALS_OPTIONS,  # type: ignore[attr-defined]
                        scheduling_strategy=here, name=approvals_actor_name(self._config.name),
                        namespace=self._config.namespace, get_if_exists=True,
                    ).remote(self._config.namespace, self._approval_policy, self._config.name, *self._approval_timeout,
                             self._config.sessions),
                    lambda h: h.policy.remote(None), what="the approval queue", unavailable=RegistryUnavailableError)
            return self._approvals

    async def unmount_approvals(self) -> None:
        """Unmount the approval queue: ``ask`` degrades to deny again."""
        if self._approval_policy is not None:
            if self._approvals is not None:
                ray.kill(self._approvals)
            self._approvals, self._approval_policy, self._approval_timeout = None, None, (None, {})
            self._set_approval(None)
            await self._settled()

    def _set_approval(self, seam: Any) -> None:
        self._core.state.approval = seam
        self._core.state.touched()
        self._core.bump()

    # the fleet

    def signal_hub(self, dead: str | None = None) -> HubRef:
        """The hub carrying callers' aborts to executors and body tasks. ``dead`` is the id
        of a hub a client saw die for good (a hub whose process died is restarted by Ray)."""
        return HubRef(self._config.name, self._config.namespace, self._fleet.signal_hub(dead))

    async def _nodes(self) -> list[str]:
        return await asyncio.to_thread(self._fleet.spawner.nodes)  # a GCS read: off the loop

    async def _shared_hosts(self) -> list[Any]:
        if self._config.scope_hosting == "shared" and not self._fleet.scope_hosts:
            self._fleet.shared_hosts(await self._nodes())
        return self._fleet.scope_hosts

    async def scope_hosts(self) -> list[Any]:
        """Shared hosting: the hosts, made on first ask (clients hash an agent onto them,
        :func:`~.wire.host_index`); dedicated hosting: ``[]``."""
        return await self._shared_hosts()

    async def scope_host_nodes(self, make: bool = False) -> list[str | None]:
        """Shared hosting: the node each host is pinned to, in host order (an episode
        runner on that node keeps an agent's scope calls on its node); ``[]`` otherwise,
        or while none is made (``make``: make them now)."""
        if make:
            await self._shared_hosts()
        return self._fleet.scope_host_nodes()

    async def ensure_scope(self, agent: str, dead: str | None = None) -> Any:
        """The host of ``agent``'s scope. ``dead`` is the id of a host a client saw die: if
        it is the one on record, a new one starts from its agents' journals."""
        await self._shared_hosts()
        return self._fleet.scope_host(agent, dead, await self._nodes() if dead is not None else None)

    async def drop_scope(self, agent: str) -> None:
        """Close ``agent``'s scope: dispose everything it registered, then release its host
        (dedicated) or its place in one (shared), and everything kept for it."""
        changed = self._core.drop_journal(agent)
        host = self._fleet.host_of(agent)
        if host is not None:
            try:
                await host.close.remote(agent, forget=True)
            except RAY_ERROR:
                pass  # the host died: nothing of the scope is left there, and its journal is gone
        self._fleet.release_scope(agent)
        if changed:  # a scope that never changed anything changes no plan when it goes
            await self._settled(self._core.bump())

    async def scopes(self) -> list[str]:
        """The agents whose scopes are live."""
        hosted = await asyncio.gather(*(host.agents.remote() for host in self._fleet.scope_hosts),
                                      return_exceptions=True)
        return sorted({*self._fleet.dedicated, *(a for agents in hosted if isinstance(agents, list) for a in agents)})

    def scope_handles(self) -> list[Any]:
        """Every scope host (to end them with the registry)."""
        return self._fleet.scope_handles()

    def executors(self) -> list[Any]:
        """The pool of executor actors (made with the registry)."""
        return self._fleet.executors

    async def executor_nodes(self, dead: Sequence[str] = ()) -> list[tuple[Any, str | None]]:
        """Each executor with the node it is pinned to (how callers route to their node).
        ``dead``: the ids of executors the caller saw die for good (``ray.kill``), replaced
        first (one already replaced starts nothing), so no answer holds one of them."""
        if dead:  # only after a death: the alive nodes are a GCS read
            nodes = await self._nodes()
            for actor_id in dead:
                self._fleet.replace_executor(actor_id, nodes)
        self._watch_pools()
        return self._fleet.executor_nodes()

    def _watch_pools(self) -> None:
        """Watch each executor and Code Mode queue not watched yet: one that dies for good
        (``ray.kill``, its node lost) is replaced as soon as Ray says so, idle or not,
        without waiting for a client to meet its death."""
        members = [("executor", h) for h in self._fleet.executors] + [("queue", h) for h, _ in self._fleet.queues]
        for kind, handle in members:
            actor_id = self._fleet.spawner.actor_id(handle)
            if actor_id not in self._watching:
                self._watching[actor_id] = asyncio.get_running_loop().create_task(
                    self._replace_when_dead(kind, handle, actor_id))

    async def _replace_when_dead(self, kind: str, handle: Any, actor_id: str) -> None:
        await self._fleet.spawner.outlived(handle)
        nodes = await self._nodes()
        if kind == "executor":
            self._fleet.replace_executor(actor_id, nodes)  # (one a client reported is replaced already)
        else:
            self._fleet.replace_queue(actor_id, nodes)
        log.warning("%s %s died for good: replaced", kind, actor_id)
        del self._watching[actor_id]
        self._watch_pools()  # its successor

    async def add_guest(self, actor: Any) -> None:
        """``actor`` runs calls of this registry's in its own process (an executor core
        serving its own loop: a gateway replica, see ``ExecutorCore.serve_as_guest``):
        :meth:`abort_agents` reaches its calls too, for as long as it lives."""
        self._guests[actor._actor_id.hex()] = actor

    async def abort_agents(self, agents: list[str], why: str) -> int:
        """Cancel every running call, Code Mode run and pending ask of ``agents`` on every
        executor, queue and guest (an episode's dead attempt, before its rerun starts); how
        many were cancelled. A member that does not answer in time is dead or dying: its
        calls end with it."""
        from ..executor.executor import abort_guest_calls

        members = [*self._fleet.executors, *(queue for queue, _ in self._fleet.queues)]
        asked = [member.abort_agents.remote(agents, why) for member in members]
        guests = list(self._guests.items())
        asked += [guest.__ray_call__.remote(abort_guest_calls, self._config.namespace, self._config.name, agents, why)
                  for _, guest in guests]
        if self._approvals is not None:
            asked.append(self._approvals.cancel_agents.remote(agents))
        try:
            counts = await within(asyncio.gather(*asked, return_exceptions=True), _ABORT_S)
        except TimeoutError:
            return 0
        for (actor_id, _), count in zip(guests, counts[len(members):]):
            if isinstance(count, ray.exceptions.RayActorError):
                self._guests.pop(actor_id, None)  # gone, and its calls with it
        return sum(c for c in counts if isinstance(c, int))

    async def flush_spans(self, timeout_s: float) -> None:
        """Have the executors and Code Mode queues flush their spans (before the registry
        is ended: they end with it); returns after ``timeout_s`` at most, and a little."""
        await flush_actors([*self._fleet.executors, *(queue for queue, _ in self._fleet.queues)], timeout_s)

    def code_queues(self) -> list[tuple[Any, str | None]]:
        """The Code Mode queue actors (queue-actor dispatch), each with its node."""
        return list(self._fleet.queues)

    async def code_queue(self, dead: str) -> tuple[Any, str | None] | None:
        """A client saw Code Mode queue ``dead`` die for good: start its successor (once)
        and return it, with its node."""
        return self._fleet.replace_queue(dead, await self._nodes())

    def ping(self) -> str:
        return "pong"

    async def config(self) -> dict[str, Any]:
        """The mode and whether a code runtime is configured (for the SDK and clients). On a
        thread: the first time, naming the dialect probes this host's walls in a subprocess."""
        return await asyncio.to_thread(self._config.described)


RegistryActor = ray.remote(RegistryService)
"""The registry actor class; the client applies :data:`REGISTRY_OPTIONS` with ``.options()``."""
