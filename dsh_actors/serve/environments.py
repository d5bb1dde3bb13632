"""Each gateway agent in an episode environment of its own, started at its first call that needs one.

A gateway serves agents that come and go with no episode to start their environments, so
:class:`GatewayEnvironments` (the resolver the reference tools, and plugin tools that act
in environments, are built with) starts an agent's environment when a call first needs it:
on the node of the replica that took that call, its workspace the agent's folder
(``<workspaces>/<agent>``, which must exist; nothing else of the host's files), with the walls and
bounds of ``limits`` (:class:`~dsh_actors.envs.EnvSpec`'s sizes). Every later call of the
agent uses that one, from any replica: on that node directly, from another node through
that node's environment host. Replicas of one node that both start it at once share one
(the host starts it under a lock).

The environment belongs to the gateway's registry, not to the replica that started it: a
replica that dies takes none with it, and when the registry ends (``dsh-actors serve``
stopped) the host ends its environments within seconds, every process in them killed.
"""

from __future__ import annotations

import asyncio
from typing import Any, Mapping

import ray

from ..envs.contract import EnvironmentGoneError, EnvSpec, Environment
from ..runtime.envhost import AgentEnvironments, HostedEnvironment, _ask_host, env_id_of, start_environment
from ..runtime.local import this_node
from ..runtime.wire import DEFAULT_NAMESPACE, agent_session
from ..tools.workspace import AgentWorkspaces

__all__ = ["GatewayEnvironments"]


class GatewayEnvironments(AgentEnvironments):
    """Agents' environments for the gateway of registry ``registry`` (see the module docs).
    ``limits``: :class:`~dsh_actors.envs.EnvSpec` fields for each (``memory_mb``,
    ``processes``, ``egress``, ...)."""

    def __init__(self, workspaces: AgentWorkspaces, registry: str, namespace: str = DEFAULT_NAMESPACE,
                 limits: Mapping[str, Any] | None = None) -> None:
        super().__init__(workspaces, sessions=registry, namespace=namespace)
        self.registry, self.limits = registry, dict(limits or {})
        EnvSpec(workspace="/", **self.limits)  # bad limits fail here, where they were given
        self._elsewhere: dict[str, tuple[HostedEnvironment, str]] = {}  # env id -> (client, its workspace)
        self._starting: dict[str, asyncio.Lock] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        return (GatewayEnvironments, (self.workspaces, self.registry, self.namespace, self.limits))

    async def environment(self, ctx: Any, stale: Any = None) -> tuple[Environment, str]:
        """The call's agent's environment: the one running (here or on another node), or
        one started here now."""
        agent = getattr(ctx, "agent", None)
        if not isinstance(agent, str) or not agent:
            return await super().environment(ctx, stale)  # says a call needs an agent
        env_id = env_id_of(agent_session(self.sessions, agent))
        hosted = self._elsewhere.get(env_id)
        if hosted is not None and hosted[0] is not stale:
            return hosted
        async with self._starting.setdefault(env_id, asyncio.Lock()):
            try:
                return await super().environment(ctx, stale)
            except EnvironmentGoneError:
                if stale is not None and (hosted is None or stale is not hosted[0]):
                    raise  # the one this call used is gone: the call says so (as an episode's does)
            self._elsewhere.pop(env_id, None)
            found = await self._running_elsewhere(env_id)
            if found is not None:
                node, workspace = found
                hosted = self._elsewhere[env_id] = (HostedEnvironment(node, env_id, self.namespace), workspace)
                return hosted
            await self._start(ctx, agent)
            return await super().environment(ctx)

    async def _running_elsewhere(self, env_id: str) -> tuple[str, str] | None:
        """Another node whose host runs ``env_id``, and its workspace there, if one does."""
        here = this_node()
        for node in await asyncio.to_thread(ray.nodes):
            if node.get("Alive") and node["NodeID"] != here:
                try:
                    found = await _ask_host(node["NodeID"], self.namespace, "address", env_id)
                except Exception:  # noqa: BLE001 - a node whose host cannot answer runs nothing we can use
                    continue
                if found is not None:
                    return node["NodeID"], found[1]
        return None

    async def _start(self, ctx: Any, agent: str) -> None:
        workspace = self.workspaces.at(ctx)  # its folder must exist: WorkspaceError (a coded result) if not
        # Its root holds the host's system and this folder alone: the other agents' folders
        # are not in it (nothing to hide; hiding their parent would hide this one too).
        spec = EnvSpec(workspace=str(workspace.root), **self.limits)
        await start_environment(agent_session(self.sessions, agent), spec, starter=await self._owner(), reuse=True)

    async def _owner(self) -> tuple[Any, str]:
        """The registry's actor and its process's incarnation: the environments end with it."""
        from ..runtime.caller.owner import owner
        from ..runtime.requester import _incarnation

        handle = await owner(self.registry, self.namespace).link.actor_async()
        return handle, await handle.__ray_call__.remote(_incarnation)
