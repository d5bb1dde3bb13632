"""Each gateway agent in an episode environment of its own, started at its first call that needs one.

A gateway serves agents that come and go with no episode to start their environments, so
:class:`GatewayEnvironments` (the resolver the reference tools, and plugin tools that act
in environments, are built with) starts an agent's environment when a call first needs it:
on the node of the replica that took that call, its workspace the agent's folder
(``<workspaces>/<agent>``, which must exist; nothing else of the host's files), with the walls and
bounds of ``limits`` (:class:`~dsh_actors.envs.EnvSpec`'s sizes). Every later call of the
agent uses that one, from any replica: on that node directly, from another node through
that node's environment host. Replicas of one node that both start it at once share one
(the host starts it under a lock); replicas of several nodes share one too: the node that
starts it is claimed first in the cluster's KV store, and a replica elsewhere waits for
that node's host to run it. It starts one itself only if that node is gone, or has not
started it within :data:`CLAIM_WAIT_S` of its claim, or if none runs and the claimant's
heartbeat (every :data:`CLAIM_BEAT_S` while it starts one) has been still for
:data:`CLAIM_SILENT_S`: the claimant died before it started it, or its environment died
with its node's host (see :mod:`~dsh_actors.runtime.env_claims`).

The environment belongs to the gateway's registry, not to the replica that started it: a
replica that dies takes none with it, and when the registry ends (``dsh-actors serve``
stopped) the host ends its environments within seconds, every process in them killed.
With ``idle_s``, one that no call used for that long ends too (its processes and its
``/tmp`` with it; the agent's folder stays), and the agent's next call starts a new one.
Each replica tells the host an environment is used when a call starts using it, every
quarter of ``idle_s`` while a command runs in it, and when the call is done with it (at
most once a quarter of ``idle_s`` in all): the host hears of a use at least every half of
``idle_s`` while any runs, so a command of any length is safe from an idle end.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Mapping

import ray

from ..envs.contract import EnvironmentGoneError, EnvSpec, Environment
from ..runtime.env_claims import EnvClaim
from ..runtime.envhost import AgentEnvironments, HostedEnvironment, _ask_host, env_id_of, start_environment
from ..runtime.local import this_node
from ..runtime.wire import DEFAULT_NAMESPACE, agent_session
from ..tools.workspace import AgentWorkspaces

__all__ = ["CLAIM_WAIT_S", "GatewayEnvironments"]

CLAIM_WAIT_S = 60.0
"""How long after its claim a replica waits for the node that claimed an agent's
environment to start it (a claim older than that whose environment does not run is taken over)."""
CLAIM_POLL_S = 0.2
CLAIM_BEAT_S = 1.0
"""How often a replica starting an agent's environment it claimed says so (its heartbeat)."""
CLAIM_SILENT_S = 10.0
"""How long a waiting replica hears no heartbeat of the claimant, and finds the environment
running nowhere, before it takes the claim over."""
_TAKEOVERS = 4
"""How many claimants in a row a replica waits for before it starts the environment itself."""


class GatewayEnvironments(AgentEnvironments):
    """Agents' environments for the gateway of registry ``registry`` (see the module docs).
    ``limits``: :class:`~dsh_actors.envs.EnvSpec` fields for each (``memory_mb``,
    ``processes``, ``egress``, ...)."""

    def __init__(self, workspaces: AgentWorkspaces, registry: str, namespace: str = DEFAULT_NAMESPACE,
                 limits: Mapping[str, Any] | None = None, idle_s: float | None = None) -> None:
        super().__init__(workspaces, sessions=registry, namespace=namespace)
        self.registry, self.limits = registry, dict(limits or {})
        EnvSpec(workspace="/", **self.limits)  # bad limits fail here, where they were given
        if idle_s is not None and not (isinstance(idle_s, (int, float)) and idle_s > 0):
            raise ValueError(f"idle_s must be a positive number of seconds, not {idle_s!r}")
        self.idle_s = idle_s
        self._elsewhere: dict[str, tuple[HostedEnvironment, str]] = {}  # env id -> (client, its workspace)
        self._starting: dict[str, asyncio.Lock] = {}
        self._touched: dict[str, float] = {}  # env id -> when this process last told its host it is used
        self._telling: set[asyncio.Task[Any]] = set()

    def __reduce__(self) -> tuple[Any, ...]:
        return (GatewayEnvironments, (self.workspaces, self.registry, self.namespace, self.limits, self.idle_s))

    async def place(self, ctx: Any) -> Any:
        """The call's place (see :class:`~dsh_actors.runtime.envhost.AgentEnvironments`), which
        tells the environment's host it is used when the call is done with it too."""
        place = await super().place(ctx)
        if self.idle_s is None:
            return place
        return _Touching(place, lambda: self._touch(env_id_of(agent_session(self.sessions, ctx.agent))),
                         every_s=self.idle_s / 4)

    def _touch(self, env_id: str) -> None:
        """Tell the environment's host it is used (at most once a quarter of ``idle_s``)."""
        now = asyncio.get_running_loop().time()
        if self.idle_s is None or now - self._touched.get(env_id, -math.inf) < self.idle_s / 4:
            return
        self._touched[env_id] = now
        node = self._node_of(env_id)
        if node is not None:
            telling = asyncio.ensure_future(_ask_host(node, self.namespace, "touch", env_id))
            self._telling.add(telling)
            telling.add_done_callback(self._telling.discard)

    def _node_of(self, env_id: str) -> str | None:
        """The node whose host runs ``env_id`` as this process knows it: the one it uses
        on another node, else this one."""
        hosted = self._elsewhere.get(env_id)
        return hosted[0].node if hosted is not None else this_node()

    async def environment(self, ctx: Any, stale: Any = None) -> tuple[Environment, str]:
        """The call's agent's environment: the one running (here or on another node), or
        one started here now."""
        agent = getattr(ctx, "agent", None)
        if not isinstance(agent, str) or not agent:
            return await super().environment(ctx, stale)  # says a call needs an agent
        env_id = env_id_of(agent_session(self.sessions, agent))
        if stale is None:
            await self._unless_ended_idle(env_id)
        found = await self._environment(ctx, agent, env_id, stale)
        self._touch(env_id)
        return found

    async def _unless_ended_idle(self, env_id: str) -> None:
        """Forget the client of an environment this process has not used for ``idle_s``
        if its host ended it meanwhile, so the call starts a new one (the old client would
        fail it as gone)."""
        touched = self._touched.get(env_id)
        now = asyncio.get_running_loop().time()
        if self.idle_s is None or touched is None or now - touched <= self.idle_s:
            return
        node = self._node_of(env_id)
        self._touched[env_id] = now  # (so the call's own touch is not sent again)
        try:
            running = node is not None and await _ask_host(node, self.namespace, "touch", env_id)
        except Exception:  # noqa: BLE001 - its host is gone: so is the environment
            running = False
        if not running:
            self._elsewhere.pop(env_id, None)
            self._clients.pop(env_id, None)

    async def _environment(self, ctx: Any, agent: str, env_id: str, stale: Any) -> tuple[Environment, str]:
        hosted = self._elsewhere.get(env_id)
        if hosted is not None and stale is None and hosted[0].lost:
            stale = hosted[0]  # its host went away under an earlier call, which said so: start its successor
        if hosted is not None and hosted[0] is not stale:
            return hosted
        async with self._starting.setdefault(env_id, asyncio.Lock()):
            try:
                return await super().environment(ctx, stale)
            except EnvironmentGoneError:
                if stale is not None and (hosted is None or stale is not hosted[0]):
                    # The one this call used (on this node) is gone: its successor, if another
                    # replica started one on another node since, else the call says so (as an
                    # episode's does) and the agent's next call starts one.
                    found = await self._running_elsewhere(env_id)
                    if found is None:
                        raise
                    return self._use_elsewhere(env_id, found)
            self._elsewhere.pop(env_id, None)
            workspace = self.workspaces.at(ctx)  # its folder must exist: WorkspaceError (a coded result) if not
            starter = await self._owner()
            claim = self._claim(env_id, starter)
            # (one gone on another node: its claim goes with it, else nobody starts another)
            gone = hosted[0].node if hosted is not None and stale is hosted[0] else None
            node, since = await asyncio.to_thread(claim.take, gone)
            for _ in range(_TAKEOVERS):
                if node == this_node():
                    break
                found = await self._running_elsewhere(env_id, claim, node, since)
                if found is not None:
                    return self._use_elsewhere(env_id, found)
                node, since = await asyncio.to_thread(claim.take, node)  # it is gone, or never started it
            try:
                # Its root holds the host's system and this folder alone: the other agents'
                # folders are not in it (nothing to hide; hiding their parent would hide this one too).
                spec = EnvSpec(workspace=str(workspace.root), **self.limits)
                async with _beating(claim):
                    await start_environment(agent_session(self.sessions, agent), spec, starter=starter, reuse=True,
                                            idle_s=self.idle_s, release=claim.key)
                self._touched[env_id] = asyncio.get_running_loop().time()  # (started now: touched)
            except BaseException:
                await asyncio.to_thread(claim.drop)
                raise
            return await super().environment(ctx)

    async def _running_elsewhere(self, env_id: str, claim: EnvClaim | None = None, claimant: str | None = None,
                                 since: float = 0.0) -> tuple[str, str] | None:
        """Another node whose host runs ``env_id``, and its workspace there, if one does;
        waiting (given its ``claim``) for alive ``claimant``'s host to start it, up to :data:`CLAIM_WAIT_S` after
        its claim at ``since`` (wall clock) — less when the ``claim``'s heartbeat is still for
        :data:`CLAIM_SILENT_S` (nobody is starting it)."""
        here, beat, heard = this_node(), None, time.monotonic()
        while True:
            alive = [node["NodeID"] for node in await asyncio.to_thread(ray.nodes)
                     if node.get("Alive") and node["NodeID"] != here]
            for node in alive:
                try:
                    found = await _ask_host(node, self.namespace, "address", env_id)
                except Exception:  # noqa: BLE001 - a node whose host cannot answer runs nothing we can use
                    continue
                if found is not None:
                    return node, found[1]
            if claim is None or claimant is None or claimant not in alive or time.time() >= since + CLAIM_WAIT_S:
                return None
            latest = await asyncio.to_thread(claim.heartbeat)
            if latest != beat:
                beat, heard = latest, time.monotonic()
            elif time.monotonic() - heard >= CLAIM_SILENT_S:
                return None
            await asyncio.sleep(CLAIM_POLL_S)

    def _use_elsewhere(self, env_id: str, found: tuple[str, str]) -> tuple[Environment, str]:
        """Use ``env_id`` where ``found`` (its node, its workspace there) runs it, from now on."""
        node, where = found
        hosted = self._elsewhere[env_id] = (HostedEnvironment(node, env_id, self.namespace), where)
        return hosted

    def _claim(self, env_id: str, starter: tuple[Any, str]) -> EnvClaim:
        """Environment ``env_id``'s claim, for its registry's process ``starter`` (a new
        registry's environments are claimed anew)."""
        return EnvClaim(f"gateway-env/{self.namespace}/{self.registry}/{starter[1]}/{env_id}")

    async def _owner(self) -> tuple[Any, str]:
        """The registry's actor and its process's incarnation: the environments end with it."""
        from ..runtime.caller.owner import owner
        from ..runtime.requester import _incarnation

        handle = await owner(self.registry, self.namespace).link.actor_async()
        return handle, await handle.__ray_call__.remote(_incarnation)


@contextlib.asynccontextmanager
async def _beating(claim: EnvClaim) -> AsyncIterator[None]:
    """Beat ``claim``'s heartbeat every :data:`CLAIM_BEAT_S` while the block runs."""
    async def beat() -> None:
        while True:
            try:
                await asyncio.to_thread(claim.beat)
            except Exception:  # noqa: BLE001 - a beat missed: a waiter may take over, and the host shares one
                pass
            await asyncio.sleep(CLAIM_BEAT_S)

    beating = asyncio.ensure_future(beat())
    try:
        yield
    finally:
        beating.cancel()


class _Touching:
    """A call's place that calls ``touch`` when each of its actions ends, and every
    ``every_s`` while a command runs (a heartbeat: the host must not take a long command's
    environment for an idle one)."""

    def __init__(self, place: Any, touch: Callable[[], None], every_s: float) -> None:
        self._place, self._touch, self._every_s = place, touch, every_s
        self.root = place.root

    async def _then_touch(self, action: Awaitable[Any]) -> Any:
        try:
            return await action
        finally:
            self._touch()

    async def read(self, path: str, limit: int) -> bytes | None:
        return await self._then_touch(self._place.read(path, limit))  # type: ignore[no-any-return]

    async def write(self, path: str, data: bytes) -> None:
        await self._then_touch(self._place.write(path, data))

    async def run(self, command: str, *, timeout_s: float, max_output: int, signal: Any = None) -> Any:
        return await self._then_touch(self._touching_while(
            self._place.run(command, timeout_s=timeout_s, max_output=max_output, signal=signal)))

    async def _touching_while(self, action: Awaitable[Any]) -> Any:
        running = asyncio.ensure_future(action)
        try:
            while not (await asyncio.wait({running}, timeout=self._every_s))[0]:
                self._touch()
            return running.result()
        finally:
            if not running.done():  # this call was cancelled: the command with it, before it returns
                running.cancel()
                await asyncio.wait({running})
                if not running.cancelled():
                    running.exception()  # (what it ended with is the cancelled call's no more)
