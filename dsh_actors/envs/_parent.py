"""The backend's side of its warm parent (``_zygote.py``): started once, asked per environment.

The warm parent is started from a thread of its own that lives exactly as long as it does
(it waits for it): a process's parent-death signal follows the *thread* that forked it,
so the warm parent dies with the backend's process and never with a short-lived thread.
Requests and answers cross one ``SOCK_SEQPACKET`` socket pair, read on the event loop; an
answer carries descriptors (the warden's pidfd, the environment's status socket).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import os
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any

import msgpack

from ..codemode import isolation
from . import _wire
from .contract import EnvironmentStartError

__all__ = ["Started", "WarmParent", "launch_config"]

ZYGOTE = str(Path(__file__).with_name("_zygote.py"))

ANSWER_BYTES = 1 << 16


@dataclasses.dataclass(frozen=True)
class Started:
    """A warden forked for an environment: its pid and pidfd, the backend's end of the
    environment's status socket, and (on a root host) the environment's uid."""

    pid: int
    pidfd: int
    status: socket.socket
    uid: int | None


def launch_config(**settings: Any) -> dict[str, Any]:
    """What the warm parent (and the wardens and inits it forks) is configured with."""
    libs = [str(Path(__file__).parent), *isolation.library_dirs()]
    return {"libs": libs, "sonames": isolation.sonames(), "host_root": os.geteuid() == 0,
            "owner_ids": [os.getuid(), os.getgid()], **settings}


def run_probe(config: dict[str, Any]) -> dict[str, str]:
    """The warm parent's entry in probe mode: which walls this host has."""
    try:
        command = [isolation.interpreter(), "-I", "-S", "-B", ZYGOTE, json.dumps({**config, "probe": True})]
        done = subprocess.run(command, env={}, capture_output=True, timeout=60, cwd="/")
        report = json.loads(done.stdout.decode() or "{}")
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        return {"probe": f"the probe failed: {type(exc).__name__}: {exc}"}
    if not report:
        return {"probe": f"the probe failed: {done.stderr.decode(errors='replace')[-500:]}"}
    return report if isinstance(report, dict) else {}


def _fail(future: asyncio.Future[Any], error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


class WarmParent:
    """One backend's warm parent (see the module docs). Used from one event loop."""

    def __init__(self, config: dict[str, Any]) -> None:
        self._config = config
        self._control: socket.socket | None = None
        self._ready: asyncio.Future[None] | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._waiting: dict[int, asyncio.Future[Started]] = {}
        self._numbers = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._socket: socket.socket | None = None  # the current warm parent's control socket
        self._closed = False

    async def start(self, env: dict[str, Any]) -> Started:
        """Fork a warden for ``env``; it goes on to start the environment."""
        control = await self._running()
        number = next(self._numbers)
        answer: asyncio.Future[Started] = asyncio.get_running_loop().create_future()
        self._waiting[number] = answer
        message = msgpack.packb({"op": "start", "n": number, "env": env}, use_bin_type=True)
        while True:
            try:
                control.send(message)
                break
            except BlockingIOError:
                await asyncio.sleep(0.001)  # its queue is full: it is forking as fast as it can
            except OSError as exc:
                self._waiting.pop(number, None)
                raise EnvironmentStartError(f"the environments' warm parent stopped answering ({exc})") from None
        return await answer

    async def _running(self) -> socket.socket:
        if self._closed:
            raise EnvironmentStartError("the backend was closed")
        if self._control is not None:
            return self._control
        if self._ready is None:
            self._loop = asyncio.get_running_loop()
            self._ready = self._loop.create_future()
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            self._socket = ours
            threading.Thread(target=self._keep, args=(ours, theirs), name="dsh-envs-parent", daemon=True).start()
        ready = self._ready
        await ready
        assert self._control is not None
        return self._control

    def _keep(self, ours: socket.socket, theirs: socket.socket) -> None:
        """The keeper thread: starts the warm parent, then waits for its end."""
        assert self._loop is not None and self._ready is not None
        loop, ready = self._loop, self._ready
        config = {**self._config, "control_fd": theirs.fileno(), "host_pid": os.getpid()}
        try:
            process = subprocess.Popen(
                [isolation.interpreter(), "-I", "-S", "-B", ZYGOTE, json.dumps(config)], pass_fds=(theirs.fileno(),),
                env={}, cwd="/", start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        except OSError as exc:
            loop.call_soon_threadsafe(_fail, ready, EnvironmentStartError(
                f"the environments' warm parent could not start: {exc}"))
            return
        finally:
            theirs.close()
        self._process = process
        loop.call_soon_threadsafe(self._connect, ours)
        process.wait()
        try:
            loop.call_soon_threadsafe(self._ended, ours)
        except RuntimeError:
            pass  # the loop is closed: the backend's process is ending, nothing waits on it

    def _connect(self, ours: socket.socket) -> None:
        ours.setblocking(False)
        asyncio.get_running_loop().add_reader(ours.fileno(), self._readable, ours)

    def _readable(self, ours: socket.socket) -> None:
        while True:
            try:
                data, fds = _wire.recv_fds(ours, ANSWER_BYTES, 4)
            except BlockingIOError:
                return
            except OSError:
                data, fds = b"", []
            if not data:
                for fd in fds:
                    os.close(fd)
                self._ended(ours)
                return
            self._handle(ours, msgpack.unpackb(data, raw=False), fds)

    def _handle(self, ours: socket.socket, message: dict[str, Any], fds: list[int]) -> None:
        op = message.get("op")
        if op == "ready":
            self._control = ours
            if self._ready is not None and not self._ready.done():
                self._ready.set_result(None)
            return
        answer = self._waiting.pop(message.get("n", -1), None)
        if op == "started" and len(fds) == 2:
            started = Started(message["pid"], fds[0], socket.socket(fileno=fds[1]), message.get("uid"))
            if answer is None or answer.done():
                os.close(started.pidfd)
                started.status.close()  # nobody waits for it: its environment ends with its status socket
            else:
                answer.set_result(started)
            return
        for fd in fds:
            os.close(fd)
        if answer is not None and not answer.done():
            answer.set_exception(EnvironmentStartError(f"the warm parent could not start it: {message.get('error')}"))

    def _ended(self, ours: socket.socket) -> None:
        """The warm parent is gone: what waits on it fails; the next start makes a new one."""
        if ours is not self._socket:
            return  # already handled (its end of file, then its exit)
        self._socket = self._control = None
        try:
            asyncio.get_running_loop().remove_reader(ours.fileno())
        except (OSError, ValueError):
            pass
        ready, self._ready = self._ready, None
        if ready is not None:
            _fail(ready, EnvironmentStartError("the environments' warm parent ended as it started"))
        waiting, self._waiting = self._waiting, {}
        for answer in waiting.values():
            _fail(answer, EnvironmentStartError("the environments' warm parent ended before it answered"))
        ours.close()

    def close(self) -> None:
        """Stop the warm parent (every warden it forked dies with it)."""
        self._closed = True
        if self._control is not None:
            try:
                self._control.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._process is not None:
            try:
                self._process.kill()
            except OSError:
                pass
