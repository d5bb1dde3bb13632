"""Episode environments on Ray: one host per node starts and ends them; any process there uses them.

Each node has one environment host (:class:`EnvHostService`, a detached actor named
``dsh-envs:<node>``): it holds the node's environment backend (its warm, pre-isolated
parent) and every environment started on the node. An episode runner asks it to start its
episode's environment (:func:`start_environment`) and to end it; the calls of the episode,
on whichever executor of the node runs them, find it by the agent's session id
(:class:`AgentEnvironments`, the resolver the reference tools are built with) and talk to
it directly — a command costs no hop through the host.

An environment ends with its episode, and also when whoever started it is gone: the host
checks every few seconds that each environment's starter (a runner) still runs, and ends
those of dead ones — a runner killed mid-episode, a killed driver's runners — so nothing of
theirs is left on the node. One started with an idle limit (the MCP gateway's agents, who
have no episode to end) also ends once nobody touched it (:meth:`EnvHostService.touch`) for
that long. Starting an environment under an id that is in use (an episode
run again) ends the old one first: a rerun never shares its workspace with its dead attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import shutil
from typing import Any, AsyncIterator, Callable

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..envs.contract import (CommandResult, EnvironmentGoneError, EnvironmentStartError,
                             EnvironmentUnavailableError, EnvSpec, Environment)
from ..tools.workspace import AgentWorkspaces, Workspace
from .backoff import WHILE_RESTARTING
from .local import this_node
from .env_claims import release
from .errors import ACTOR_GONE, DEAD_ACTORS, died_for_good, held_dead, never_reached, remember_dead
from .process import current
from .requester import CHECK_S, requester, still_there
from .revive import kept_actor_async
from .wire import DEFAULT_NAMESPACE, agent_session, env_host_name

__all__ = ["AgentEnvironments", "ENV_HOST_OPTIONS", "EnvHost", "EnvHostService", "HostedEnvironment",
           "agent_environment", "connect_environment", "end_environment", "env_id_of", "make_workspace",
           "make_workspace_on", "remove_workspace_on", "start_environment"]

log = logging.getLogger("dsh_actors.runtime")

ENV_HOST_OPTIONS: dict[str, Any] = {"num_cpus": 0, "max_restarts": -1, "max_task_retries": 0,
                                    "lifetime": "detached", "max_concurrency": 10_000}
"""Detached (it serves every job on its node, whoever made it first), restarted by Ray (its
environments die with it: their calls then fail ``ENV_GONE``), no request retried."""


def env_id_of(session_id: str) -> str:
    """An environment's id on its node from its agent's session id: readable, a safe file
    name, and unique (two session ids never share one)."""
    readable = re.sub(r"[^A-Za-z0-9_.-]", "_", session_id)[:48]
    return f"{readable}-{hashlib.sha256(session_id.encode()).hexdigest()[:12]}"


def _make_backend() -> Any:
    from ..envs.native import NativeBackend

    return NativeBackend()  # its folder: one of its own under the user's (a node's host each)


class EnvHostService:
    """The environments of one node (see the module docs)."""

    def __init__(self, make_backend: Callable[[], Any] = _make_backend) -> None:
        self._make_backend = make_backend
        self._backend: Any = None
        self._envs: dict[str, tuple[Environment, tuple[Any, str] | None, str]] = {}  # id -> (env, starter, workspace)
        self._idle: dict[str, list[Any]] = {}  # id -> [idle limit (s), last touched (monotonic), release key]
        self._starting: dict[str, asyncio.Lock] = {}
        self._sweeper: asyncio.Task[None] | None = None
        self._made: set[str] = set()  # workspaces made for processes of other nodes

    def _backend_here(self) -> Any:
        if self._backend is None:
            self._backend = self._make_backend()  # its warm parent starts on first use
        return self._backend

    async def start(self, env_id: str, spec: EnvSpec, starter: tuple[Any, str] | None = None,
                    idle_s: float | None = None, release: bytes | None = None) -> Any:
        """Start environment ``env_id`` (one in use under that id is ended first); its
        address, for :func:`connect`. ``starter`` names the process whose environment it
        is: it ends when that process is gone. ``idle_s``: it also ends once nobody touched
        it for that long. ``release``: the key of its claim (:mod:`.env_claims`), released
        when it ends."""
        async with self._starting.setdefault(env_id, asyncio.Lock()):
            return await self._start(env_id, spec, starter, idle_s, release)

    async def start_unless_running(self, env_id: str, spec: EnvSpec, starter: tuple[Any, str] | None = None,
                                   idle_s: float | None = None, release: bytes | None = None) -> Any:
        """Environment ``env_id``'s address: the one running under that id, else one
        started now (:meth:`start`). Callers that start an environment on first use, from
        several processes at once, share one."""
        async with self._starting.setdefault(env_id, asyncio.Lock()):
            held = self._envs.get(env_id)
            if held is not None:
                self.touch(env_id)
                return held[0].address  # type: ignore[attr-defined]
            return await self._start(env_id, spec, starter, idle_s, release)

    async def _start(self, env_id: str, spec: EnvSpec, starter: tuple[Any, str] | None, idle_s: float | None,
                     release: bytes | None) -> Any:
        await self.end(env_id)
        env = await self._backend_here().start(env_id, spec)
        self._envs[env_id] = (env, starter, spec.workspace)
        if idle_s is not None or release is not None:
            self._idle[env_id] = [idle_s, asyncio.get_running_loop().time(), release]
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.ensure_future(self._sweep())
        return env.address  # type: ignore[attr-defined]

    def touch(self, env_id: str) -> bool:
        """Someone uses environment ``env_id`` now (its idle time starts again); whether it runs."""
        idle = self._idle.get(env_id)
        if idle is not None:
            idle[1] = asyncio.get_running_loop().time()
        return env_id in self._envs

    def address(self, env_id: str) -> tuple[Any, str] | None:
        """Environment ``env_id``'s address (for :func:`connect`) and workspace, or ``None``."""
        held = self._envs.get(env_id)
        return None if held is None else (held[0].address, held[2])  # type: ignore[attr-defined]

    async def end(self, env_id: str) -> bool:
        """End environment ``env_id`` (whether one was running)."""
        held = self._envs.pop(env_id, None)
        idle = self._idle.pop(env_id, None)
        if held is None:
            return False
        try:
            await held[0].end()
        except Exception as exc:  # noqa: BLE001 - it is gone either way; say why it did not end cleanly
            log.warning("environment %s did not end cleanly: %s", env_id, exc)
        if idle is not None and idle[2] is not None:
            try:
                await asyncio.to_thread(release, idle[2], this_node() or "")
            except Exception as exc:  # noqa: BLE001 - a claim left behind is taken over later; the sweep goes on
                log.warning("environment %s: its claim was not released: %s", env_id, exc)
        return True

    def running(self) -> list[str]:
        return sorted(self._envs)

    # --- for a process on another node (HostedEnvironment): the environment through its host

    def make_workspace(self, path: str, template: str | None) -> None:
        """:func:`make_workspace` on this node, for a process of another; :meth:`remove_workspace`
        removes it."""
        make_workspace(path, template)
        self._made.add(path)

    def remove_workspace(self, path: str) -> bool:
        """Remove a workspace :meth:`make_workspace` made (whether it did)."""
        if path not in self._made:
            return False
        self._made.discard(path)
        shutil.rmtree(path, ignore_errors=True)
        return True

    async def run(self, env_id: str, command: str, timeout_s: float, cwd: str | None, max_output: int) -> Any:
        return await self._held(env_id).run(command, timeout_s=timeout_s, cwd=cwd, max_output=max_output)

    async def read_file(self, env_id: str, path: str, limit: int | None) -> bytes:
        return await self._held(env_id).read_file(path, limit=limit)

    async def write_file(self, env_id: str, path: str, data: bytes) -> None:
        await self._held(env_id).write_file(path, data)

    def _held(self, env_id: str) -> Environment:
        held = self._envs.get(env_id)
        if held is None:
            raise EnvironmentGoneError(f"no environment {env_id} runs on node {this_node()} (it ended, or its "
                                       "host restarted)", unsent=True)
        return held[0]

    async def _sweep(self) -> None:
        """While environments run: end those whose starters died, and those idle too long."""
        while self._envs:
            await asyncio.sleep(CHECK_S)
            now = asyncio.get_running_loop().time()
            for env_id, (idle_s, touched, _) in list(self._idle.items()):
                if idle_s is not None and now - touched > idle_s:
                    log.info("environment %s: untouched for %.0f s; ended", env_id, now - touched)
                    await self.end(env_id)
            starters = {_starter_key(starter): starter[0] for _, starter, _ in self._envs.values() if starter}
            gone = {key for key, handle in starters.items() if not await still_there(handle, key[1])}
            for env_id, (_, starter, _) in list(self._envs.items()):
                if starter is not None and _starter_key(starter) in gone:
                    log.info("environment %s: its starter is gone; ended", env_id)
                    await self.end(env_id)

    def ping(self) -> str:
        return "pong"


def make_workspace(path: str, template: str | None) -> None:
    """A new workspace folder at ``path`` (its parents made), a copy of ``template`` (a
    folder of this node) if given, that an environment's user may enter."""
    if template is not None and not os.path.isdir(template):
        raise EnvironmentStartError(f"the template {template} is not a folder on node {this_node()}")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if template is not None:
        shutil.copytree(template, path, symlinks=True)
    else:
        os.mkdir(path)
    os.chmod(path, 0o755)


async def make_workspace_on(node: str, path: str, template: str | None = None) -> None:
    """:func:`make_workspace` on ``node``, by its environment host (which
    :func:`remove_workspace_on` asks to remove it)."""
    try:
        await _ask_host(node, DEFAULT_NAMESPACE, "make_workspace", path, template)
    except ray.exceptions.RayTaskError as exc:
        raise (_raised_there(exc) or EnvironmentStartError(f"no workspace {path} on node {node}: {exc}")) from None


async def remove_workspace_on(node: str, path: str) -> None:
    """Remove a workspace :func:`make_workspace_on` made on ``node``."""
    await _ask_host(node, DEFAULT_NAMESPACE, "remove_workspace", path)


def _raised_there(exc: Exception) -> Exception | None:
    """What an actor method raised, from the ``RayTaskError`` that carries it."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, Exception) else None


def _starter_key(starter: tuple[Any, str]) -> tuple[str, str]:
    """A starter as the sweep counts it: its actor and its process's incarnation."""
    return starter[0]._actor_id.hex(), starter[1]


EnvHost = ray.remote(EnvHostService)
"""The environment host actor (options: :data:`ENV_HOST_OPTIONS`)."""


async def _host(node: str, namespace: str = DEFAULT_NAMESPACE) -> Any:
    """This process's handle on ``node``'s environment host, made (or found) on first use."""
    return await kept_actor_async(
        current().env_hosts, (namespace, node),
        lambda: EnvHost.options(**ENV_HOST_OPTIONS, name=env_host_name(node), namespace=namespace,  # type: ignore[attr-defined]
                                get_if_exists=True,
                                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote(),
        what=f"the environment host of node {node[:12]}")


async def _ask_host(node: str, namespace: str, method: str, *args: Any, once: bool = False) -> Any:
    """``method`` of ``node``'s environment host. A host Ray is restarting is waited for
    (its environments died with it); one found dead for good is made again, and asked once more.
    A host this process already holds dead is made again before anything is sent to it.
    ``once``: a host that dies under the request is not asked again (a request of one of its
    environments, which may have run there before it died)."""
    made_again = False
    for pause in WHILE_RESTARTING.pauses():
        host = await _host(node, namespace)
        if not made_again and held_dead(host):  # (a call to it would fail unsent; its successor is asked)
            DEAD_ACTORS.add(host._actor_id.hex())
            made_again = True
            continue
        try:
            return await getattr(host, method).remote(*args)
        except ACTOR_GONE as exc:
            remember_dead(exc)  # (so _host makes another)
            if once:
                raise
            if died_for_good(exc) and not made_again:
                made_again = True
                continue
            if pause is None or died_for_good(exc):
                raise
            await asyncio.sleep(pause)
    raise AssertionError("unreachable")


async def start_environment(session_id: str, spec: EnvSpec, node: str | None = None, *,
                            starter: tuple[Any, str] | None = None, reuse: bool = False,
                            idle_s: float | None = None, release: bytes | None = None) -> str:
    """Start the environment of the agent whose session id is ``session_id``, on ``node``
    (default: this process's), owned by ``starter`` (default: this process; it ends when
    its owner is gone); its id. ``reuse``: one already running under that id is kept (and
    its id returned), where by default it is ended first (an episode run again).
    ``idle_s`` and ``release``: see :meth:`EnvHostService.start`."""
    node = node or this_node()
    if node is None:
        raise EnvironmentStartError("an episode environment is started on a Ray node; this process is not on one")
    env_id = env_id_of(session_id)
    try:
        await _ask_host(node, DEFAULT_NAMESPACE, "start_unless_running" if reuse else "start", env_id, spec,
                        starter or requester(), idle_s, release)
    except ray.exceptions.RayTaskError as exc:
        cause = _raised_there(exc)
        if isinstance(cause, EnvironmentUnavailableError):
            raise EnvironmentUnavailableError(
                f"{cause.message} — or, for commands you trust, run the tools without walls (the batch job's "
                "--environments host)") from None
        raise (cause or EnvironmentStartError(f"environment {env_id} could not start: {exc}")) from None
    except ACTOR_GONE as exc:
        raise EnvironmentStartError(f"the environment host of node {node} died while starting {env_id}: {exc}") from None
    return env_id


async def end_environment(session_id: str, node: str | None = None) -> None:
    """End the environment of ``session_id`` on ``node`` (default: this process's; none
    running is fine)."""
    node = node or this_node()
    if node is not None:
        try:
            await _ask_host(node, DEFAULT_NAMESPACE, "end", env_id_of(session_id))
        except ACTOR_GONE:
            pass  # the host died: its environments with it


async def connect_environment(session_id: str, node: str | None = None) -> Environment:
    """A client of the environment of ``session_id`` on ``node`` (default: this process's;
    started by :func:`start_environment`): on this process's node, one that talks to it
    directly; on another, a :class:`HostedEnvironment` (each request through that node's host)."""
    here = this_node()
    node = node or here
    found = None if node is None else await _ask_host(node, DEFAULT_NAMESPACE, "address", env_id_of(session_id))
    if found is None:
        raise EnvironmentGoneError(f"no environment of session {session_id!r} runs on node {node}")
    if node is not None and node != here:
        return HostedEnvironment(node, env_id_of(session_id))
    from ..envs.native import connect

    return connect(found[0])


class HostedEnvironment:
    """An environment of another node, as a process here uses it: each request an actor call
    to that node's host, which runs it there (a command costs that call, about a millisecond,
    beside its own time). Cancelling a request cancels it there."""

    def __init__(self, node: str, env_id: str, namespace: str = DEFAULT_NAMESPACE) -> None:
        self.node, self.id, self.namespace = node, env_id, namespace
        self.lost = False  # its host went away under a request (which failed ENV_GONE)

    async def run(self, command: str, *, timeout_s: float, cwd: str | None = None,
                  max_output: int = 65536) -> CommandResult:
        return await self._ask("run", command, timeout_s, cwd, max_output)  # type: ignore[no-any-return]

    async def read_file(self, path: str, *, limit: int | None = None) -> bytes:
        return await self._ask("read_file", path, limit)  # type: ignore[no-any-return]

    async def write_file(self, path: str, data: bytes) -> None:
        await self._ask("write_file", path, data)

    async def end(self) -> None:
        await self._ask("end")

    async def _ask(self, method: str, *args: Any) -> Any:
        """The host's answer about this environment; its error as raised there (a coded
        environment error)."""
        try:
            return await _ask_host(self.node, self.namespace, method, self.id, *args, once=True)
        except ray.exceptions.RayTaskError as exc:
            raise (_raised_there(exc) or
                   EnvironmentGoneError(f"environment {self.id} on node {self.node}: {exc}")) from None
        except ray.exceptions.ActorUnschedulableError as exc:  # its node is gone: the request went nowhere
            self.lost = True
            raise EnvironmentGoneError(f"the node of environment {self.id} is gone ({exc})", unsent=True) from None
        except ACTOR_GONE as exc:  # (unless Ray proves it never sent it, it may have run there)
            self.lost = True
            raise EnvironmentGoneError(f"the environment host of node {self.node} is gone, and environment "
                                       f"{self.id} with it: {exc}", unsent=never_reached(exc)) from None


@contextlib.asynccontextmanager
async def agent_environment(registry: Any, agent_id: str, spec: EnvSpec) -> AsyncIterator[str]:
    """A Python driver's episode environment: ``agent_id``'s environment in ``registry`` (a
    :class:`~dsh_actors.runtime.ToolRegistry`), started on this process's node for the
    ``async with`` block and ended after it, every process in it killed (also when this
    process dies). The calls the agent makes meanwhile through tools built with
    :class:`AgentEnvironments` act inside it; the block's value is the environment's id.
    Raises :class:`~dsh_actors.envs.EnvironmentUnavailableError` (``ENV_UNAVAILABLE``) on a
    node that cannot make one, saying what is missing."""
    session_id = registry.session_id(agent_id)
    env_id = await start_environment(session_id, spec)
    try:
        yield env_id
    finally:
        await end_environment(session_id)


class AgentEnvironments:
    """What a job's tools are built with: a call's *place* (:meth:`place`) is its agent's
    environment on the node where the call runs — the reference tools act there — and,
    for a plugin tool that works on the host's side, :meth:`at` is its agent's workspace
    (the same folder, at the same path, as the environment's). ``sessions``: the
    registry's, as agents' session ids are made. Picklable; each process keeps one client
    per environment, asking the node's host only when it has none (or it went stale)."""

    def __init__(self, workspaces: AgentWorkspaces, sessions: str | None = None,
                 namespace: str = DEFAULT_NAMESPACE) -> None:
        self.workspaces, self.sessions, self.namespace = workspaces, sessions, namespace
        self._clients: dict[str, tuple[Any, Environment, str]] = {}  # env id -> (address, client, workspace)

    def __reduce__(self) -> tuple[Any, ...]:
        return (AgentEnvironments, (self.workspaces, self.sessions, self.namespace))

    def at(self, ctx: Any) -> Workspace:
        """The call's agent's workspace on the host (a plugin tool's files, as before)."""
        return self.workspaces.at(ctx)

    @property
    def label(self) -> str:
        return self.workspaces.label

    async def environment(self, ctx: Any, stale: Any = None) -> tuple[Environment, str]:
        """The call's environment and its workspace's path (asked of the node's host the
        first time, and again when the client held for it (``stale``) found it gone)."""
        agent = getattr(ctx, "agent", None)
        if not isinstance(agent, str) or not agent:
            raise EnvironmentGoneError("a call with no agent has no environment; call as an agent")
        env_id = env_id_of(agent_session(self.sessions, agent))
        held = self._clients.get(env_id)
        if held is not None and held[1] is not stale:
            return held[1], held[2]
        node = this_node()
        try:
            found = None if node is None else await _ask_host(node, self.namespace, "address", env_id)
        except ACTOR_GONE as exc:
            raise EnvironmentGoneError(f"the environment host of this node is gone ({exc}); so is agent "
                                       f"{agent!r}'s environment") from None
        if found is None:
            self._clients.pop(env_id, None)
            raise EnvironmentGoneError(f"agent {agent!r} has no environment on this node (its episode ended, or "
                                       "its environment was never started here)")
        address, workspace = found
        if held is None or held[0] != address:
            from ..envs.native import connect

            held = self._clients[env_id] = (address, connect(address), workspace)
        elif stale is not None:
            raise EnvironmentGoneError(f"agent {agent!r}'s environment is gone")
        return held[1], held[2]

    async def run(self, ctx: Any, command: str, *, timeout_s: float = 60.0, max_output: int = 65536) -> Any:
        """Run ``command`` in the call's agent's environment (what a plugin tool does to act
        there): its :class:`~dsh_actors.envs.CommandResult`."""
        env, _ = await self.environment(ctx)
        return await env.run(command, timeout_s=timeout_s, max_output=max_output)

    async def place(self, ctx: Any) -> Any:
        """The call's place: its agent's environment, asked for again (once) when the one
        this process knew is gone and another took its id (the episode runs again)."""
        from ..tools.places import EnvPlace

        env, workspace = await self.environment(ctx)

        async def fresh(stale: Environment) -> Environment:
            return (await self.environment(ctx, stale=stale))[0]
        return EnvPlace(env, workspace, fresh)
