"""Where an agent's reference tools act: its episode environment, or (opted into) the host.

A :class:`Place` is what ``bash``, ``read_file``, ``write_file`` and ``edit_file`` need:
run a command, read and write a file — each inside one workspace. Two kinds:

- :class:`EnvPlace`: an episode environment (:mod:`dsh_actors.envs`): the command and the
  file operations happen inside its walls, so neither a command nor a link in the
  workspace can reach anything of the host's;
- :class:`HostPlace`: the host's own files and a plain ``bash -c`` in the workspace — what a
  developer running trusted code on their own machine may choose explicitly; never the
  default of anything that runs a model's commands.

A tool is given a *resolver* whose ``place(ctx)`` gives the call's place: one workspace for
every call (:class:`~.workspace.Workspace`), each agent's own (:class:`~.workspace.AgentWorkspaces`,
on the host), or each agent's environment (``AgentEnvironments``, on Ray).
"""

from __future__ import annotations

import asyncio
import os
import posixpath
import signal as signals
from pathlib import Path
from typing import Any, Awaitable, Callable, Protocol, TypeVar

from ..core.errors import ExecutionCancelledError
from ..envs.contract import CommandResult, EnvironmentGoneError, EnvPathError, Environment, limit_error
from .workspace import AgentWorkspaces, Workspace, WorkspaceError

__all__ = ["EnvPlace", "HostPlace", "Place", "PlaceResolver", "command_text", "place_of", "relative_path"]

T = TypeVar("T")


class Place(Protocol):
    """One workspace and what may be done in it (see the module docs)."""

    root: str
    """The workspace's path, as its tools name it."""

    async def read(self, path: str, limit: int) -> bytes | None:
        """The first ``limit`` bytes of ``path``, or ``None`` when no file is there."""

    async def write(self, path: str, data: bytes) -> None:
        """Create or overwrite ``path`` (its folders made)."""

    async def run(self, command: str, *, timeout_s: float, max_output: int, signal: Any = None) -> CommandResult:
        """``bash -c command`` in the workspace; past ``timeout_s``, or once ``signal``
        aborts, every process of it is killed."""


class PlaceResolver(Protocol):
    async def place(self, ctx: Any) -> Place: ...

    @property
    def label(self) -> str: ...


def relative_path(root: str, path: str) -> str:
    """``path`` (relative to ``root``, or absolute inside it) as a path relative to it, or
    :class:`WorkspaceError` for one that leaves it (by its text: the place checks again
    where the file really is)."""
    full = posixpath.normpath(path if posixpath.isabs(path) else posixpath.join(root, path))
    if full != root and not full.startswith(root.rstrip("/") + "/"):
        raise WorkspaceError(f'path "{path}" escapes the workspace ({root}); use a path inside it')
    return posixpath.relpath(full, root)


def command_text(result: CommandResult, command: str) -> dict[str, Any]:
    """A ``bash`` call's result from how its command ended: its output, and its exit
    status when not 0; a bound that stopped it is the call's coded failure."""
    if result.bound is not None:
        raise limit_error(result.bound, f"the command was stopped by its environment's {result.bound} bound "
                                        f"(exit {result.exit_code if result.exit_code is not None else 'by signal'})"
                                        + (f"; its output:\n{result.output.decode('utf-8', 'replace')}"
                                           if result.output else ""))
    output = result.output.decode("utf-8", errors="replace")
    status = result.exit_code if result.exit_code is not None else -(result.signal or 0)
    tail = "" if status == 0 else (f"\n(exit status {status})" if result.exit_code is not None
                                   else f"\n(killed by signal {result.signal})")
    return {"content": [{"type": "text", "text": output + tail}], "meta": {"exit_code": status}}


class EnvPlace:
    """An episode environment's workspace: everything happens inside its walls.

    ``fresh(stale)``, when given, is asked once for the environment now under the same id
    when the one held is gone and the request never reached it (``ENV_GONE``, ``unsent``):
    its episode started again, and the old one was ended first. A request that may have run
    (its environment died under it) is never sent again: the call answers ``ENV_GONE``."""

    def __init__(self, env: Environment, root: str,
                 fresh: Callable[[Environment], Awaitable[Environment]] | None = None) -> None:
        self.env, self.root, self._fresh = env, root, fresh

    async def _in_env(self, act: Callable[[Environment], Awaitable[T]]) -> T:
        try:
            return await act(self.env)
        except EnvironmentGoneError as gone:
            if self._fresh is None or not gone.unsent:
                raise
            self.env, self._fresh = await self._fresh(self.env), None  # (raises if none took its place)
            return await act(self.env)

    async def read(self, path: str, limit: int) -> bytes | None:
        rel = relative_path(self.root, path)
        try:
            return await self._in_env(lambda env: env.read_file(rel, limit=limit))
        except EnvPathError:
            return None

    async def write(self, path: str, data: bytes) -> None:
        rel = relative_path(self.root, path)
        await self._in_env(lambda env: env.write_file(rel, data))

    async def run(self, command: str, *, timeout_s: float, max_output: int, signal: Any = None) -> CommandResult:
        async def run(env: Environment) -> CommandResult:
            running = asyncio.ensure_future(env.run(command, timeout_s=timeout_s, max_output=max_output))
            return await _until_aborted(running, signal)
        return await self._in_env(run)


class HostPlace:
    """The host's files in ``workspace``, and ``bash -c`` there: no walls at all."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.root = str(workspace.root)

    async def read(self, path: str, limit: int) -> bytes | None:
        full = self.workspace.resolve(path)

        def read() -> bytes | None:
            if not full.is_file():
                return None
            with open(full, "rb") as file:
                return file.read(limit)
        return await asyncio.to_thread(read)

    async def write(self, path: str, data: bytes) -> None:
        full = self.workspace.resolve(path)

        def write() -> None:
            full.parent.mkdir(parents=True, exist_ok=True)
            full.write_bytes(data)
        await asyncio.to_thread(write)

    async def run(self, command: str, *, timeout_s: float, max_output: int, signal: Any = None) -> CommandResult:
        process = await asyncio.create_subprocess_exec(
            "bash", "-c", command, cwd=self.root, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        waiter = asyncio.ensure_future(process.communicate())
        aborted = asyncio.ensure_future(signal.wait()) if signal is not None else None
        try:
            done, _ = await asyncio.wait([w for w in (waiter, aborted) if w is not None], timeout=timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            if aborted is not None:
                aborted.cancel()
            if not waiter.done():  # its time is up, it was aborted, or this call was cancelled
                try:
                    os.killpg(process.pid, signals.SIGKILL)
                except ProcessLookupError:
                    pass
        if waiter not in done:
            await waiter
            if aborted is not None and aborted in done:
                raise ExecutionCancelledError(f"command stopped: {signal.reason}")
            return CommandResult(exit_code=None, output=waiter.result()[0][:max_output], signal=signals.SIGKILL,
                                 bound="wall")
        output = waiter.result()[0]
        code = process.returncode
        return CommandResult(exit_code=code if code is not None and code >= 0 else None, output=output[:max_output],
                             truncated=len(output) > max_output, signal=-code if code is not None and code < 0 else None)


async def _until_aborted(work: "asyncio.Future[CommandResult]", signal: Any) -> CommandResult:
    """``work``'s result, or — should ``signal`` abort first — ``work`` cancelled (its
    processes killed) and the abort raised as the call's cancellation."""
    if signal is None:
        return await work
    aborted = asyncio.ensure_future(signal.wait())
    try:
        done, _ = await asyncio.wait({work, aborted}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        aborted.cancel()
    if work in done:
        return work.result()
    work.cancel()
    raise ExecutionCancelledError(f"command stopped: {signal.reason}")


class _Host:
    """The host-files resolver over one workspace, or each agent's."""

    def __init__(self, spaces: Workspace | AgentWorkspaces) -> None:
        self.spaces = spaces

    async def place(self, ctx: Any) -> Place:
        return HostPlace(self.spaces.at(ctx))

    @property
    def label(self) -> str:
        return self.spaces.label


def place_of(root: Any) -> PlaceResolver:
    """The resolver a tool is built with: an environments resolver as it is (anything with
    an async ``place(ctx)``), else the host's files under a workspace path, a
    :class:`Workspace` or :class:`AgentWorkspaces`."""
    if hasattr(root, "place"):
        return root  # type: ignore[no-any-return]
    if isinstance(root, (Workspace, AgentWorkspaces)):
        return _Host(root)
    if isinstance(root, (str, os.PathLike, Path)):
        return _Host(Workspace(root))
    raise TypeError(f"a tool's workspace is a path, a Workspace, AgentWorkspaces or an environments resolver; "
                    f"got {root!r}")
