"""inspect_ai sandboxes that are dsh episode environments (``pip install 'dsh-actors[inspect]'``).

::

    Task(dataset=..., solver=..., scorer=..., sandbox="dsh")
    Task(..., sandbox=("dsh", DshSandboxConfig(template="repo/", memory_mb=1024, egress="loopback")))

Each sample gets an environment of its own (the native walls: its own namespaces and
unprivileged user, no network unless ``egress`` says so, bounds on memory, processes, CPU and
disk) on a fresh workspace (a copy of ``template``, if given), where the sample's tools —
``bash()``, ``python()``, the scorer's commands — run; the sample's end ends it (every
process inside, whatever it did to stay) and removes its workspace, after a failure too.
With Ray running in this process (``ray.init``), the environment is started by a node's
environment host, as an episode's is, and ends with this process if it dies: the samples are
spread over the cluster's nodes (``nodes="spread"``, the node with the fewest of this
process's environments first; ``"local"``: this process's node), each workspace made on its
node (``template`` must be a folder there too), and a sample on another node reaches its
environment through that node's host (an actor call per request). Without Ray, a backend of
this process starts them.

The contract of inspect's sandboxes holds: ``exec`` (``cmd`` by ``PATH``, ``input``, ``cwd``
relative to the workspace, ``env``, ``timeout`` → ``TimeoutError``, stdout and stderr
apart), ``write_file`` (folders made) and ``read_file`` (``FileNotFoundError``,
``IsADirectoryError``, ``PermissionError``), anywhere the environment may write or read;
``user`` other than the environment's own is refused (``SandboxUserUnsupportedError``: it
has one user); ``connection`` is not offered (nothing attaches to an environment from
outside).
"""

from __future__ import annotations

import asyncio
import secrets
import shlex
import shutil
import tempfile
import uuid
import weakref
from pathlib import Path
from typing import Any, Literal, Union, overload

from inspect_ai.util import ExecResult, SandboxEnvironment, SandboxEnvironmentConfigType, sandboxenv
from inspect_ai.util._sandbox.environment import SandboxUserUnsupportedError
from pydantic import BaseModel

from ..envs.contract import CommandResult, EnvSpec

__all__ = ["DshSandboxConfig", "DshSandboxEnvironment"]

MAX_OUTPUT = 1 << 26
"""Bytes a command's stdout and stderr may hold together (the environment's cap)."""

DEFAULT_TIMEOUT_S = 24 * 3600.0
"""A command's wall when inspect gives none (the environment's CPU bound still holds)."""


class DshSandboxConfig(BaseModel, frozen=True):
    """How a sample's environment is made (every field optional)."""

    template: str | None = None
    """A folder copied into each sample's workspace (on the sample's node)."""
    nodes: Literal["spread", "local"] = "spread"
    """On Ray: spread the samples over the cluster's nodes, or keep them on this process's."""
    root: str | None = None
    """Where the samples' workspaces are made (default: a folder under the temporary one)."""
    egress: str | tuple[str, ...] = "none"
    memory_mb: int = 2048
    processes: int = 256
    cpu_s: float = 3600.0
    disk_mb: int = 2048


@sandboxenv(name="dsh")
class DshSandboxEnvironment(SandboxEnvironment):
    """One sample's dsh environment (see the module docs)."""

    def __init__(self, place: _Place, workspace: str) -> None:
        super().__init__()
        self.place, self.workspace = place, workspace

    # --- the sample's life ------------------------------------------------------------------

    @classmethod
    def config_deserialize(cls, config: dict[str, Any]) -> BaseModel:
        return DshSandboxConfig(**config)

    @classmethod
    async def sample_init(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                          metadata: dict[str, str]) -> dict[str, SandboxEnvironment]:
        settings = _config(config)
        root = Path(settings.root or Path(tempfile.gettempdir()) / "dsh-inspect")
        workspace = str(root / f"{_safe(task_name)}-{uuid.uuid4().hex[:12]}")
        spec = EnvSpec(workspace=workspace, egress=settings.egress, memory_mb=settings.memory_mb,
                       processes=settings.processes, cpu_s=settings.cpu_s, disk_mb=settings.disk_mb)
        place = await _Place.start(f"inspect:{task_name}:{Path(workspace).name}", spec, settings)
        return {"default": cls(place, workspace)}

    @classmethod
    async def sample_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None,
                             environments: dict[str, SandboxEnvironment], interrupted: bool) -> None:
        for environment in environments.values():
            if isinstance(environment, DshSandboxEnvironment):
                await environment.place.end()

    @classmethod
    async def task_cleanup(cls, task_name: str, config: SandboxEnvironmentConfigType | None, cleanup: bool) -> None:
        await _Place.close_local()

    # --- inspect's contract ----------------------------------------------------------------

    async def exec(self, cmd: list[str], input: str | bytes | None = None, cwd: str | None = None,
                   env: dict[str, str] | None = None, user: str | None = None, timeout: int | None = None,
                   timeout_retry: bool = True, concurrency: bool = True) -> ExecResult[str]:
        stdout, stderr, code = await self._exec(cmd, input=input, cwd=cwd, env=env, user=user, timeout=timeout)
        return ExecResult(success=code == 0, returncode=code, stdout=stdout.decode("utf-8", "replace"),
                          stderr=stderr.decode("utf-8", "replace"))

    async def write_file(self, file: str, contents: str | bytes) -> None:
        data = contents.encode() if isinstance(contents, str) else contents
        path = shlex.quote(file)
        _, stderr, code = await self._exec(["/bin/sh", "-c", f'mkdir -p "$(dirname {path})" && cat > {path}'],
                                           input=data)
        if code != 0:
            _raise_for(file, stderr)

    @overload
    async def read_file(self, file: str, text: Literal[True] = True) -> str: ...

    @overload
    async def read_file(self, file: str, text: Literal[False]) -> bytes: ...

    async def read_file(self, file: str, text: bool = True) -> Union[str | bytes]:
        stdout, stderr, code = await self._exec(["cat", "--", file])
        if code != 0:
            _raise_for(file, stderr)
        return stdout.decode("utf-8") if text else stdout

    # --- one command ------------------------------------------------------------------------

    async def _exec(self, cmd: list[str], *, input: str | bytes | None = None, cwd: str | None = None,
                    env: dict[str, str] | None = None, user: str | None = None,
                    timeout: float | None = None) -> tuple[bytes, bytes, int]:
        """``cmd`` run inside the environment: its stdout, its stderr, its exit status. The
        environment gives one stream; stderr goes to a file of its private ``/tmp`` and follows
        stdout after a marker nobody outside this call knows."""
        if user is not None and user != "agent":
            raise SandboxUserUnsupportedError(f"a dsh environment has one user, agent; cannot run as {user!r}")
        if not cmd:
            raise ValueError("cmd is a list of at least one string")
        marker, token = secrets.token_hex(16), secrets.token_hex(8)
        err, stdin = f"/tmp/.dsh-stderr-{token}", "/dev/null"
        if input is not None:  # a file of the workspace, read as the command's stdin, then removed
            stdin = f"{self.workspace}/.dsh-stdin-{token}"
            await self.place.env.write_file(stdin, input.encode() if isinstance(input, str) else input)
        variables = " ".join(shlex.quote(f"{k}={v}") for k, v in (env or {}).items())
        command = f"/usr/bin/env {variables} {shlex.join(cmd)}" if variables else shlex.join(cmd)
        # the shell's own words about the command (``Killed``) go with its stderr too
        script = (f"exec 2> {err}; {command} < {stdin}; code=$?; printf '\\n%s\\n' {marker}; cat {err}; "
                  f"rm -f {err}{'' if input is None else ' ' + stdin}; exit $code")
        result = await self.place.run(script, timeout_s=float(timeout or DEFAULT_TIMEOUT_S), cwd=cwd)
        if result.bound == "wall":
            raise TimeoutError(f"command timed out after {timeout} s")
        return _split(result, marker)

    async def connection(self, *, user: str | None = None) -> Any:
        raise NotImplementedError("a dsh environment is not attached to from outside; run commands with exec")


def _split(result: CommandResult, marker: str) -> tuple[bytes, bytes, int]:
    """stdout, stderr (and which bound stopped the command, if one did), exit status."""
    code = result.exit_code if result.exit_code is not None else 128 + (result.signal or 9)
    stdout, found, stderr = result.output.rpartition(f"\n{marker}\n".encode())
    if not found:  # ended before the marker (a bound, a signal): all of it is stdout
        stdout, stderr = result.output, b""
    if result.bound is not None:
        stderr += f"stopped by the environment's {result.bound} bound\n".encode()
    return stdout, stderr, code


def _raise_for(file: str, stderr: bytes) -> None:
    text = stderr.decode("utf-8", "replace").strip()
    if "No such file" in text:
        raise FileNotFoundError(f"{file}: {text}")
    if "Is a directory" in text:
        raise IsADirectoryError(f"{file}: {text}")
    if "Permission denied" in text or "Read-only file system" in text:
        raise PermissionError(f"{file}: {text}")
    raise OSError(f"{file}: {text}")


def _config(config: SandboxEnvironmentConfigType | None) -> DshSandboxConfig:
    if config is None:
        return DshSandboxConfig()
    if isinstance(config, DshSandboxConfig):
        return config
    if isinstance(config, BaseModel):
        return DshSandboxConfig(**config.model_dump())
    raise ValueError(f"the dsh sandbox takes a DshSandboxConfig (or none); got {config!r}")


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:40] or "task"


class _Place:
    """Where a sample's environment runs: a node's environment host (Ray running here) or a
    backend of this process (one per event loop: each ``eval`` runs its own, and a backend
    lives on the loop that made it); its workspace is made there and removed at its end."""

    _local: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
    _placed: dict[str, int] = {}  # node -> this process's environments there (spreading)

    def __init__(self, env: Any, spec: EnvSpec, session: str | None = None, node: str | None = None) -> None:
        self.env, self.spec, self.session, self.node = env, spec, session, node

    @classmethod
    async def start(cls, session: str, spec: EnvSpec, settings: DshSandboxConfig) -> _Place:
        import ray

        if ray.is_initialized():
            return await cls._on_ray(session, spec, settings)
        from ..runtime.envhost import make_workspace

        make_workspace(spec.workspace, settings.template)
        try:
            loop = asyncio.get_running_loop()
            if loop not in cls._local:
                from ..envs.native import NativeBackend

                cls._local[loop] = NativeBackend()
            return cls(await cls._local[loop].start(f"inspect-{uuid.uuid4().hex[:16]}", spec), spec)
        except BaseException:
            shutil.rmtree(spec.workspace, ignore_errors=True)
            raise

    @classmethod
    async def _on_ray(cls, session: str, spec: EnvSpec, settings: DshSandboxConfig) -> _Place:
        from ..runtime.envhost import connect_environment, make_workspace_on, start_environment
        from ..runtime.local import this_node

        node = this_node() if settings.nodes == "local" else await cls._least_used()
        assert node is not None
        cls._placed[node] = cls._placed.get(node, 0) + 1
        place = cls(None, spec, session, node)
        try:
            await make_workspace_on(node, spec.workspace, settings.template)
            await start_environment(session, spec, node=node)
            place.env = await connect_environment(session, node=node)
        except BaseException:
            await place.end()
            raise
        return place

    @classmethod
    async def _least_used(cls) -> str | None:
        """The alive node (with CPUs) holding the fewest of this process's environments, this
        process's own first among equals."""
        import ray

        from ..runtime.local import this_node

        here = this_node()
        nodes = [n["NodeID"] for n in await asyncio.to_thread(ray.nodes)
                 if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]
        return min(nodes, key=lambda n: (cls._placed.get(n, 0), n != here), default=here)

    @classmethod
    async def close_local(cls) -> None:
        """End this loop's backend, if it made one and none of its environments runs (another
        task of the same eval may still use it)."""
        loop = asyncio.get_running_loop()
        backend = cls._local.get(loop)
        if backend is not None and not backend._environments:
            del cls._local[loop]
            await backend.close()

    async def run(self, command: str, *, timeout_s: float, cwd: str | None) -> CommandResult:
        return await self.env.run(command, timeout_s=timeout_s, cwd=cwd, max_output=MAX_OUTPUT)

    async def end(self) -> None:
        """The environment ended (every process in it) and its workspace removed."""
        if self.node is None:
            try:
                await self.env.end()
            finally:
                shutil.rmtree(self.spec.workspace, ignore_errors=True)
            return
        from ..runtime.envhost import end_environment, remove_workspace_on

        self._placed[self.node] -= 1
        try:
            await end_environment(self.session, node=self.node)  # type: ignore[arg-type]
        finally:
            await remove_workspace_on(self.node, self.spec.workspace)
