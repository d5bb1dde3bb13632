"""Episode environments behind the kernel's own walls: :class:`NativeBackend`.

Processes, and who kills what::

    backend's process ── NativeBackend (this module), on one event loop
    │   └─ keeper thread ── warm parent (_zygote.py: pre-imported; dies with this process,
    │                        │ by the parent-death signal of the thread that started it)
    │                        └─ warden, one per environment (_warden.py: the host's mount and
    │                           │ network namespaces; dies with the warm parent; makes the
    │                           │ cgroups, forwards egress, holds the uid's lock)
    │                           └─ init = PID 1 of the environment (_init.py, _server.py:
    │                              │ dies with the warden; when it exits, the kernel kills
    │                              │ every process in its PID namespace)
    │                              └─ spawner (_spawner.py: in the bounded cgroup)
    │                                 └─ bash -c …, and all it starts (the command's slot)
    any process of the node ── connect(address) ── unix socket ──→ that init

Descriptors: the backend holds, per environment, a pidfd of its warden and of its init and
one end of its status socket (``init`` then ``ready``, or ``failed: why``; its end of file
is the environment's); the init holds the listening socket (in the backend's 0700 folder),
its clients' connections, the workspace and its cgroup folders; the spawner, its socket
pair with the init; commands, a pipe for their output and nothing else.

Starting is completing a spare: the warm parent keeps two (warden, init) pairs forked and
prepared (namespaces, the read-only system, ``/dev``, ``/proc``); a start claims a uid,
binds the socket, and hands them to one, whose init finishes the root, drops its privileges
and listens. A command is one message to the init, which hands it to the spawner, sitting in
the command's cgroups: ``posix_spawn`` there, already walled (see :mod:`._server`). The
walls, and which of them the kernel enforces and which are measured, are described in
:mod:`._rootfs` (files), :mod:`._confine` (uid, capabilities, no_new_privs, Landlock,
seccomp), :mod:`._egress` (network), :mod:`._cgroups` and :mod:`._meter` (bounds).

Ending: :meth:`NativeEnvironment.end` (the owner) kills the init by its pidfd, waits until
it is gone (so is everything else in it), then removes the environment's cgroups and
socket. A client's ``end()`` (:func:`connect`) *asks* the init, which kills every other
process of its namespace, answers, and exits; the owner then releases the rest when it sees
the init's end. :meth:`NativeBackend.close` ends them all. If the backend's process is
killed, the chain of parent-death signals ends every environment it started, and the next
backend's start (or :func:`reap`) removes the sockets and cgroups left behind.

Where this host lacks a wall, :meth:`NativeBackend.start` raises
:class:`~.contract.EnvironmentUnavailableError` naming it, unless the operator excused it
with ``allow_missing`` (never silently).
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import secrets
import signal as signals
import sys
from typing import Any, Iterable, Sequence

from ..core.within import within
from . import _cgroups, _folder, _wire
from ._client import EnvClient, connect, format_address
from ._parent import Started, WarmParent, launch_config, run_probe
from .contract import (CommandResult, EnvironmentGoneError, EnvironmentStartError, EnvironmentUnavailableError,
                       EnvSpec)

__all__ = ["ESSENTIAL", "MECHANISMS", "NativeBackend", "NativeEnvironment", "SYSTEM_PATHS", "connect", "probe",
           "reap", "required"]

reap = _folder.reap

MECHANISMS = ("userns", "mountns", "pidns", "netns", "ipcns", "utsns", "cgroups", "landlock", "seccomp")
"""The walls an environment is built of; ``allow_missing`` may name those not in
:data:`ESSENTIAL`."""

ESSENTIAL = ("userns", "mountns", "pidns")
"""Walls no environment goes without: its root (a mount namespace), its reaper (a PID
namespace) and, for an ordinary user, the user namespace that makes both possible."""

SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
"""The host paths an environment sees, read-only: its programs (bash, python3, git…) and
their configuration. Nothing else of the host is in its root."""

SHM_MB = 8
"""The size of an environment's ``/dev/shm`` (POSIX semaphores and small shared memory;
its pages count as the environment's memory)."""

DEFAULT_MAX_STARTING = 8
"""How many environments start at once; more wait their turn. Each start is about 1 ms of
the warm parent's time and a few ms of CPU in its own processes: past a few per core,
starting more at once only adds to everyone's wait."""

START_TIMEOUT_S = 30.0
"""How long a start may take once its turn came before it counts as failed."""

SPAWNER_IDLE_S = 30.0
"""How long an environment keeps a spare spawner with nothing to spawn. It keeps one spawner
per command in flight (each command is born in its spawner's tracking cgroup, so that none
moves between cgroups); the spares of a burst stay this long, so that an agent's next turn
finds them (a new one is a fork and two cgroup moves), then go (each holds about 2 MB of its
own, charged to the environment's memory bound)."""

END_TIMEOUT_S = 10.0
"""How long an end waits for the kernel to finish killing an environment's processes."""


@functools.lru_cache(maxsize=1)
def probe() -> dict[str, str]:
    """Each wall's state on this host: ``"ok"`` (or starting ``"ok"``) or why it is
    missing (tried once per process, in a throwaway warm parent). ``cgroups`` is reported
    by each backend itself, when it makes its parent cgroups."""
    return run_probe(launch_config())


def required(report: dict[str, str], allow_missing: Iterable[str]) -> frozenset[str]:
    """The walls to build, from ``report`` (:func:`probe`, plus ``cgroups``); raises
    :class:`~.contract.EnvironmentUnavailableError` naming each missing one the
    operator did not excuse, and how to."""
    allowed = set(allow_missing)
    missing = {name: report.get(name, report.get("probe", "not reported")) for name in MECHANISMS
               if not str(report.get(name, "")).startswith("ok")}
    essential = {n: why for n, why in missing.items() if n in ESSENTIAL and not (n == "userns" and os.geteuid() == 0)}
    if essential:
        detail = "; ".join(f"{n} ({why})" for n, why in sorted(essential.items()))
        raise EnvironmentUnavailableError(
            f"this host cannot make an episode environment: missing {detail}. No environment goes without these: "
            f"fix the host (unprivileged user namespaces, or run as root), or use another EnvironmentBackend")
    refused = {n: why for n, why in missing.items() if n not in allowed and n not in ESSENTIAL}
    if refused:
        detail = "; ".join(f"{n} ({why})" for n, why in sorted(refused.items()))
        raise EnvironmentUnavailableError(
            f"this host lacks walls an episode environment needs: {detail}. Fix the host, or accept weaker "
            f"isolation explicitly: NativeBackend(allow_missing={tuple(sorted(refused))!r})")
    return frozenset(MECHANISMS) - set(missing)


def _ray_dirs() -> list[str]:
    """Ray's session folders this process knows of (hidden in every environment)."""
    found = ["/tmp/ray"] + [v for v in (os.environ.get("RAY_TMPDIR"),) if v]
    ray = sys.modules.get("ray")
    if ray is not None:
        try:
            node = ray._private.worker._global_node  # noqa: SLF001 - where this process's Ray keeps its session
            if node is not None:
                found.append(node.get_temp_dir_path())
        except AttributeError:
            pass
    return found


class NativeBackend:
    """Starts episode environments on this node behind the kernel's walls (see the module).

    ``allow_missing``: walls (from :data:`MECHANISMS`, not :data:`ESSENTIAL`) the operator
    accepts doing without where the host lacks them. ``readonly``: the host paths an
    environment sees. ``folder``: the base folder for sockets (default
    ``/tmp/dsh-envs-<uid>``). ``max_starting``: environments starting at once (the rest
    queue). ``spawner_idle_s``: how long an environment keeps the spare spawners of a burst of
commands (:data:`SPAWNER_IDLE_S`). Used from one event loop (the first it is used from)."""

    def __init__(self, *, allow_missing: Iterable[str] = (), readonly: Sequence[str] = SYSTEM_PATHS,
                 folder: str | None = None, max_starting: int = DEFAULT_MAX_STARTING,
                 start_timeout_s: float = START_TIMEOUT_S, spawner_idle_s: float = SPAWNER_IDLE_S) -> None:
        self.allow_missing = tuple(allow_missing)
        unknown = set(self.allow_missing) - set(MECHANISMS)
        if unknown:
            raise ValueError(f"unknown walls {sorted(unknown)}; known: {list(MECHANISMS)}")
        if set(self.allow_missing) & set(ESSENTIAL):
            raise ValueError(f"no environment goes without {sorted(set(self.allow_missing) & set(ESSENTIAL))}; "
                             f"allow_missing may name {[m for m in MECHANISMS if m not in ESSENTIAL]}")
        if isinstance(max_starting, bool) or not isinstance(max_starting, int) or max_starting < 1:
            raise ValueError(f"max_starting is a whole number, at least 1; got {max_starting!r}")
        self.readonly = tuple(os.path.normpath(p) for p in readonly)
        if not 0 <= spawner_idle_s <= 86400:
            raise ValueError(f"spawner_idle_s is seconds, from 0 to 86400 (a day); got {spawner_idle_s!r}")
        self.max_starting, self.start_timeout_s, self.spawner_idle_s = max_starting, start_timeout_s, spawner_idle_s
        self._base = folder
        self._folder: _folder.Folder | None = None
        self._parent: WarmParent | None = None
        self._plan: list[dict[str, Any]] = []
        self._mechanisms: frozenset[str] | None = None
        self._starting: asyncio.Semaphore | None = None
        self._environments: dict[str, NativeEnvironment | None] = {}
        self._numbers = itertools.count()
        self._closed = False

    @property
    def isolation(self) -> str:
        """The walls its environments get (once it started one)."""
        applied = sorted(self._mechanisms or ())
        return "native: " + "+".join(applied) + (" (uid of its own each)" if os.geteuid() == 0 else "")

    @property
    def environments(self) -> dict[str, NativeEnvironment]:
        """The live environments it started, by id."""
        return {k: v for k, v in self._environments.items() if v is not None}

    def _prepare(self) -> frozenset[str]:
        """The first start: its folder (reaping dead backends'), its cgroups, the walls."""
        if self._mechanisms is not None:
            return self._mechanisms
        base = _folder.base_folder(self._base)
        reap(base)
        self._folder = folder = _folder.Folder(base)
        report = dict(probe())
        plan, problems = _cgroups.make_parents(os.path.basename(folder.path))
        folder.record_cgroups([p["path"] for p in plan])
        report["cgroups"] = "ok" if not problems else "; ".join(f"{r}: {why}" for r, why in sorted(problems.items()))
        try:
            mechanisms = required(report, self.allow_missing)
        except EnvironmentUnavailableError:
            folder.remove()
            self._folder = None
            raise
        if "cgroups" not in mechanisms:
            for parent in plan:
                _cgroups.remove_tree(parent["path"])
            plan = []
        self._plan, self._mechanisms = plan, mechanisms
        self._parent = WarmParent(launch_config(
            mechanisms=sorted(mechanisms), readonly=list(self.readonly), stage=folder.stage, cgroups=plan,
            shm_mb=SHM_MB, uid_locks=folder.uid_locks, spawner_idle_s=float(self.spawner_idle_s)))
        return mechanisms

    def _workspace(self, path: str) -> str:
        real = os.path.realpath(path)
        if real != os.path.normpath(path):
            raise EnvironmentStartError(f"a workspace is given by its real path: {path} is {real}")
        if not os.path.isdir(real):
            raise EnvironmentStartError(f"the workspace {real} is not a folder")
        assert self._folder is not None
        off_limits = (*self.readonly, "/proc", "/sys", "/dev")
        if real == "/" or any(real == p or real.startswith(p + "/") for p in off_limits) \
                or (self._folder.base + "/").startswith(real + "/"):
            raise EnvironmentStartError(f"{real} cannot be a workspace: it is (or holds) a system or harness path")
        return real

    async def start(self, env_id: str, spec: EnvSpec) -> NativeEnvironment:
        """A new environment ``env_id`` made from ``spec``, ready for commands. Raises
        :class:`~.contract.EnvironmentUnavailableError` where this host lacks a wall the
        operator did not excuse, :class:`~.contract.EnvironmentStartError` when it could
        not start."""
        if not isinstance(env_id, str) or not env_id:
            raise ValueError(f"an environment id is a non-empty str; got {env_id!r}")
        if not isinstance(spec, EnvSpec):
            raise TypeError(f"spec is an EnvSpec; got {type(spec).__name__}")
        if self._closed:
            raise EnvironmentStartError("the backend was closed")
        if env_id in self._environments:
            raise ValueError(f"an environment {env_id!r} is already running on this backend")
        mechanisms = self._prepare()
        workspace = self._workspace(spec.workspace)
        if self._starting is None:
            self._starting = asyncio.Semaphore(self.max_starting)
        self._environments[env_id] = None
        try:
            async with self._starting:
                environment = await within(self._start(env_id, spec, workspace, mechanisms),
                                                self.start_timeout_s)
        except asyncio.TimeoutError:
            self._environments.pop(env_id, None)
            raise EnvironmentStartError(f"environment {env_id!r} did not start in {self.start_timeout_s} s") from None
        except BaseException:
            self._environments.pop(env_id, None)
            raise
        self._environments[env_id] = environment
        return environment

    async def _start(self, env_id: str, spec: EnvSpec, workspace: str,
                     mechanisms: frozenset[str]) -> NativeEnvironment:
        assert self._folder is not None and self._parent is not None
        name = f"e{next(self._numbers)}"
        secret = secrets.token_hex(16)
        path = self._folder.socket(name)
        hidden = [self._folder.base, *_ray_dirs(), *spec.hidden]
        started = await self._parent.start({
            "name": name, "socket": path, "secret": secret, "env_id": env_id, "workspace": workspace,
            "egress": spec.egress if isinstance(spec.egress, str) else list(spec.egress),
            "memory_bytes": spec.memory_mb << 20, "processes": spec.processes, "cpu_s": float(spec.cpu_s),
            "disk_bytes": spec.disk_mb << 20, "tmp_mb": spec.tmp_mb, "hidden": hidden,
            "env": [list(pair) for pair in spec.env]})
        environment = NativeEnvironment(self, env_id, spec, format_address(path, env_id, secret), name, path, started)
        try:
            await environment._until_ready()
        except BaseException:
            await environment._release()
            raise
        return environment

    def _forget(self, environment: NativeEnvironment) -> None:
        if self._environments.get(environment.id) is environment:
            del self._environments[environment.id]

    async def close(self) -> None:
        """End every environment it started (concurrently), then its warm parent and folder."""
        self._closed = True
        await asyncio.gather(*(env.end() for env in list(self.environments.values())), return_exceptions=True)
        if self._parent is not None:
            self._parent.close()
        if self._folder is not None:
            self._folder.remove()


class NativeEnvironment:
    """One environment, as the backend that started it holds it: the
    :class:`~.contract.Environment` calls (through its own client, as any process's) and
    the owner's :meth:`end`. ``address`` is what other processes :func:`connect` to.
    Pickles as a client of its address (the owner's powers stay with the owner)."""

    def __init__(self, backend: NativeBackend, env_id: str, spec: EnvSpec, address: str, name: str,
                 socket_path: str, started: Started) -> None:
        self.id, self.spec, self.address = env_id, spec, address
        self.uid = started.uid
        self._backend, self._name, self._socket_path, self._started = backend, name, socket_path, started
        self._client = EnvClient(address)
        self._init_pidfd: int | None = None
        self._gone = False
        self._ending: asyncio.Future[None] | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        return (connect, (self.address,))

    def __repr__(self) -> str:
        return f"NativeEnvironment({self.id!r}, {'gone' if self._gone else 'live'})"

    @property
    def alive(self) -> bool:
        return not self._gone

    # --- starting, and noticing an end nobody asked for --------------------------------------

    async def _until_ready(self) -> None:
        """Read the status socket until the init says ``ready`` (or why not)."""
        status, loop = self._started.status, asyncio.get_running_loop()
        status.setblocking(False)
        while True:
            readable: asyncio.Future[None] = loop.create_future()
            loop.add_reader(status.fileno(), _resolve, readable)
            try:
                await readable
            finally:
                loop.remove_reader(status.fileno())
            try:
                data, fds = _wire.recv_fds(status, 4096, 1)
            except BlockingIOError:
                continue
            except OSError:
                data, fds = b"", []
            if data == b"init" and fds:
                self._init_pidfd = fds[0]
            elif data == b"ready":
                loop.add_reader(status.fileno(), self._status_event)
                return
            else:
                for fd in fds:
                    os.close(fd)
                reason = data.decode(errors="replace").removeprefix("failed: ") or "its warden ended first"
                raise EnvironmentStartError(f"environment {self.id!r} could not start: {reason}")

    def _status_event(self) -> None:
        """The status socket after ``ready``: its end means the environment's init is gone
        (a client ended it, or it died); the owner releases what is left."""
        try:
            data = self._started.status.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(self._started.status.fileno())
            asyncio.get_running_loop().create_task(self.end())

    # --- the Environment calls ---------------------------------------------------------------

    def _live(self) -> EnvClient:
        if self._gone or self._ending is not None:
            raise EnvironmentGoneError(f"environment {self.id!r} was ended", unsent=True)
        return self._client

    async def run(self, command: str, *, timeout_s: float, cwd: str | None = None,
                  max_output: int = 65536) -> CommandResult:
        """See :meth:`~.contract.Environment.run`."""
        return await self._live().run(command, timeout_s=timeout_s, cwd=cwd, max_output=max_output)

    async def read_file(self, path: str, *, limit: int | None = None) -> bytes:
        """See :meth:`~.contract.Environment.read_file`."""
        return await self._live().read_file(path, limit=limit)

    async def write_file(self, path: str, data: bytes) -> None:
        """See :meth:`~.contract.Environment.write_file`."""
        await self._live().write_file(path, data)

    async def end(self) -> None:
        """Kill every process in it (its init, and with it its PID namespace), wait until
        they are gone, remove its cgroups and socket. Idempotent; concurrent calls share it."""
        if self._ending is None:
            self._ending = asyncio.get_running_loop().create_future()
            try:
                await self._release()
            finally:
                self._ending.set_result(None)
        await asyncio.shield(self._ending)

    async def _release(self) -> None:
        started, loop = self._started, asyncio.get_running_loop()
        self._gone = True
        try:
            loop.remove_reader(started.status.fileno())
        except (OSError, ValueError):
            pass
        await self._client.close()
        for pidfd in (self._init_pidfd, started.pidfd):
            if pidfd is not None:
                try:
                    signals.pidfd_send_signal(pidfd, signals.SIGKILL)
                except OSError:
                    pass
        if self._init_pidfd is not None:
            await _exited(self._init_pidfd, END_TIMEOUT_S)
        for fd in (self._init_pidfd, started.pidfd):
            if fd is not None:
                os.close(fd)
        self._init_pidfd = None
        started.status.close()
        await _remove_cgroups(_cgroups.env_dirs(self._backend._plan, self._name))
        try:
            os.unlink(self._socket_path)
        except FileNotFoundError:
            pass
        self._backend._forget(self)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


async def _exited(pidfd: int, timeout_s: float) -> None:
    """Until the process of ``pidfd`` has exited (for an init: every process it reaped too)."""
    loop = asyncio.get_running_loop()
    gone: asyncio.Future[None] = loop.create_future()
    loop.add_reader(pidfd, _resolve, gone)
    try:
        await within(gone, timeout_s)
    except asyncio.TimeoutError:
        pass
    finally:
        loop.remove_reader(pidfd)


async def _remove_cgroups(directories: list[str]) -> None:
    """Remove an ended environment's cgroups (a few tries: the last exits may still be
    finishing in the kernel)."""
    for attempt in range(50):
        left = [d for d in directories if not _cgroups.remove_tree(d)]
        if not left:
            return
        for directory in left:
            _cgroups.kill_all(directory)
        directories = left
        await asyncio.sleep(0.002 * (attempt + 1))
