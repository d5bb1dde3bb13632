"""The actors a registry owns, made and replaced: executors, scope hosts, Code Mode queues,
the signal hub.

:class:`Fleet` is plain: it decides how many of each, which node each is pinned to and what
a replacement starts from (a scope host gets its agents' journals); a :class:`Spawner`
does the starting. :class:`RaySpawner` starts Ray actors; tests give it a fake and watch
what would have started where.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Mapping, Protocol

from .registry_config import RegistryConfig
from .registry_core import Journal
from ..wire import host_index, scope_actor_name

__all__ = ["EXECUTOR_OPTIONS", "Fleet", "RaySpawner", "Spawner"]

EXECUTOR_OPTIONS = {"num_cpus": 0, "max_restarts": -1, "max_task_retries": 0}
"""Options of an executor actor (restarted by Ray; its calls are never retried)."""
_REWATCH_S = 1.0
"""How long a watch waits before watching a restarting actor's next process."""


class Spawner(Protocol):
    """Starts and ends actors, and says where they can go."""

    def spawn(self, kind: str, options: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        """Start an actor of ``kind`` (``executor``, ``scope_host``, ``queue``, ``hub``) with
        Ray ``options``, which may hold ``node``: pin it to that node id (``None``: spread)."""

    def nodes(self) -> list[str]:
        """The ids of the alive nodes, in a stable order."""

    def here(self) -> str:
        """The id of this process's node."""

    def actor_id(self, handle: Any) -> str: ...

    def release(self, handle: Any) -> None:
        """End ``handle``'s actor for good (one already gone is fine)."""

    async def outlived(self, handle: Any) -> None:
        """Return once ``handle``'s actor (an executor or a Code Mode queue) is dead for
        good; never while it lives, or restarts."""


class RaySpawner:
    """The :class:`Spawner` of a registry actor: Ray actors, hard-pinned to their nodes."""

    def spawn(self, kind: str, options: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from ..executor.codemode import QUEUE_OPTIONS, CodeRunQueue
        from ..executor.executor import ExecutorActor
        from .scope_actor import SCOPE_OPTIONS, ScopeHost
        from ..signals import HUB_OPTIONS, SignalHub

        actor, base = {"executor": (ExecutorActor, EXECUTOR_OPTIONS), "scope_host": (ScopeHost, SCOPE_OPTIONS),
                       "queue": (CodeRunQueue, QUEUE_OPTIONS), "hub": (SignalHub, HUB_OPTIONS)}[kind]
        options = {**base, **options}
        if "node" in options:  # pinned hard (a soft pin put every actor on the head here), or spread
            node = options.pop("node")
            options["scheduling_strategy"] = NodeAffinitySchedulingStrategy(node, soft=False) if node else "SPREAD"
        return actor.options(**options).remote(*args, **kwargs)

    def nodes(self) -> list[str]:
        import ray

        return sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive"))

    def here(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def actor_id(self, handle: Any) -> str:
        return str(handle._actor_id.hex())

    def release(self, handle: Any) -> None:
        from ..revive import release

        release(handle)

    async def outlived(self, handle: Any) -> None:
        from ..errors import died_for_good

        while True:
            try:
                await handle.outlive.remote()  # never answers while the actor lives
            except Exception as exc:  # noqa: BLE001 - only a death for good ends the watch
                if died_for_good(exc):
                    return
            await asyncio.sleep(_REWATCH_S)  # restarting (or a call that failed otherwise): watch again


def _on(nodes: list[str], index: int) -> str | None:
    """The node of member ``index`` of a pool spread round-robin over ``nodes``."""
    return nodes[index % len(nodes)] if nodes else None


class Fleet:
    """A registry's actors. ``journals`` reads the agents' journals when a scope host
    (re)starts. :meth:`start` makes the pools (with the registry: the first call finds them
    started), one per alive node and at least two unless the config says how many; each
    member is pinned to a node, round-robin, so callers find one on theirs."""

    def __init__(self, config: RegistryConfig, journals: Callable[[], Mapping[str, Journal]],
                 spawner: Spawner | None = None) -> None:
        self.config = config
        self._journals = journals
        self.spawner: Spawner = spawner or RaySpawner()
        self._node: dict[str, str | None] = {}  # actor id -> the node it is pinned to
        self.executors: list[Any] = []
        # Code Mode queues (queue-actor dispatch only). The list is the run_code transport's:
        # a replacement takes its member's place in it.
        self.queues: list[tuple[Any, str | None]] = []
        self.scope_hosts: list[Any] = []  # shared hosting: agents hashed onto these (made on first use)
        self.dedicated: dict[str, Any] = {}  # dedicated hosting: agent -> its own host
        self.hub: Any = None

    def start(self) -> None:
        """Start the pools: executors, queues. Shared scope hosts are made when first needed
        (:meth:`shared_hosts`): agents that change nothing in their scopes need none."""
        config, nodes = self.config, self.spawner.nodes()
        self.executors[:] = [self._executor(i, nodes) for i in range(config.executors or max(2, len(nodes)))]
        if config.mode != "native" and config.code_dispatch == "queue-actor":
            self.queues[:] = [self._queue(i, nodes) for i in range(max(config.queues, len(nodes)))]

    def shared_hosts(self, nodes: list[str]) -> list[Any]:
        """Shared hosting: the scope hosts, made on first use over ``nodes`` (the alive
        nodes: one host per node, at least two, unless the config says how many)."""
        if self.config.scope_hosting == "shared" and not self.scope_hosts:
            count = self.config.scope_hosts or max(2, len(nodes))
            self.scope_hosts[:] = [self._shared_host(i, count, nodes) for i in range(count)]
        return self.scope_hosts

    def _track(self, handle: Any, node: str | None) -> Any:
        self._node[self.spawner.actor_id(handle)] = node
        return handle

    def node_of(self, handle: Any) -> str | None:
        return self._node.get(self.spawner.actor_id(handle))

    # executors

    def _executor(self, index: int, nodes: list[str]) -> Any:
        node, concurrency = _on(nodes, index), self.config.executor_concurrency
        return self._track(self.spawner.spawn(
            "executor", {"node": node, "max_concurrency": concurrency},
            self.config.name, self.config.namespace, calls=concurrency), node)

    def executor_nodes(self) -> list[tuple[Any, str | None]]:
        """Each executor with the node it is pinned to (how callers route to their node)."""
        return [(handle, self.node_of(handle)) for handle in self.executors]

    def replace_executor(self, actor_id: str, nodes: list[str]) -> None:
        """Executor ``actor_id`` died for good: start its successor in its place."""
        for index, handle in enumerate(self.executors):
            if self.spawner.actor_id(handle) == actor_id:
                self._node.pop(actor_id, None)
                self.executors[index] = self._executor(index, nodes)

    # Code Mode queues

    def _queue(self, index: int, nodes: list[str]) -> tuple[Any, str | None]:
        node = _on(nodes, index)
        config = self.config
        return self.spawner.spawn("queue", {"node": node}, config.name, config.namespace, config.mode,
                                  config.code_runtime, config.sessions), node

    def replace_queue(self, dead: str, nodes: list[str]) -> tuple[Any, str | None] | None:
        """Queue ``dead`` died for good: start its successor (once) and return it with its
        node; a queue not (or no longer) in the pool gets the first one."""
        for index, (handle, _) in enumerate(self.queues):
            if self.spawner.actor_id(handle) == dead:
                self.queues[index] = self._queue(index, nodes)
                return self.queues[index]
        return self.queues[0] if self.queues else None

    # scope hosts

    def _host(self, journals: dict[str, Journal], node: str | None = None, name: str | None = None) -> Any:
        options: dict[str, Any] = {"namespace": self.config.namespace}
        if name is not None:
            options["name"] = name
        if self.config.scope_hosting == "shared":
            from .scope_actor import SHARED_HOST_CONCURRENCY

            options.update(node=node, max_concurrency=SHARED_HOST_CONCURRENCY)
        if self.config.detached:
            options["lifetime"] = "detached"
        return self.spawner.spawn("scope_host", options, self.config.name, self.config.namespace, journals)

    def _shared_host(self, index: int, count: int, nodes: list[str]) -> Any:
        """Shared host ``index`` of ``count`` with the journals of the agents hashed to it."""
        node = _on(nodes, index)
        journals = {agent: list(entries) for agent, entries in self._journals().items()
                    if host_index(agent, count) == index}
        return self._track(self._host(journals, node), node)

    def scope_host_nodes(self) -> list[str | None]:
        return [self.node_of(h) for h in self.scope_hosts]

    def scope_host(self, agent: str, dead: str | None = None, nodes: list[str] | None = None) -> Any:
        """The host of ``agent``'s scope. ``dead``: the id of a host a client saw die; if it
        is the one on record, its successor starts from its agents' journals (a shared one
        on ``nodes``, the alive nodes now). Dedicated hosting makes the agent's host on first use."""
        if self.config.scope_hosting == "shared":
            self.shared_hosts(nodes or [])
            index = host_index(agent, len(self.scope_hosts))
            if dead is not None and self.spawner.actor_id(self.scope_hosts[index]) == dead:
                self.spawner.release(self.scope_hosts[index])
                self._node.pop(dead, None)
                self.scope_hosts[index] = self._shared_host(index, len(self.scope_hosts), nodes or [])
            return self.scope_hosts[index]
        handle = self.dedicated.get(agent)
        if handle is not None and dead is not None and self.spawner.actor_id(handle) == dead:
            self.spawner.release(handle)
            handle = None
        if handle is None:
            journal = list(self._journals().get(agent, []))
            handle = self.dedicated[agent] = self._host({agent: journal}, name=scope_actor_name(self.config.name, agent))
        return handle

    def host_of(self, agent: str) -> Any:
        """The host holding ``agent``'s scope now, if any (without starting one)."""
        if agent in self.dedicated:
            return self.dedicated[agent]
        return self.scope_hosts[host_index(agent, len(self.scope_hosts))] if self.scope_hosts else None

    def release_scope(self, agent: str) -> None:
        """``agent``'s scope closed: a dedicated host ends with it (a shared one stays)."""
        handle = self.dedicated.pop(agent, None)
        if handle is not None:
            self.spawner.release(handle)

    def scope_handles(self) -> list[Any]:
        return [*self.dedicated.values(), *self.scope_hosts]

    # the signal hub

    def signal_hub(self, dead: str | None = None) -> Any:
        """The hub (on the registry's node, where it lives and dies with it); ``dead``: the
        id of a hub seen dead for good: if it is the one on record, a successor starts."""
        if self.hub is None or (dead is not None and self.spawner.actor_id(self.hub) == dead):
            self.hub = self.spawner.spawn("hub", {"node": self.spawner.here()})
        return self.hub
