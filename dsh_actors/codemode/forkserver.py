"""The host's side of the fork server: sandboxes on request, their exits as they happen.

:class:`ForkServer` starts ``_forkserver.py`` (once, and again if it dies) and asks it for
sandboxes; each answer is a :class:`Sandbox`: the host's ends of the run's pipes and a
pidfd of its launcher (signals reach exactly that process, never a recycled pid). The
server reports each launcher's exit status, and whether the run's memory cgroup killed it.

The server process is started from this object's own reader thread, which lives as long
as the server: a process's parent-death signal follows the *thread* that started it, so
the server dies with the host process, and never with some short-lived worker thread.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import os
import signal as signals
import socket
import subprocess
import threading
from pathlib import Path
from typing import Any, Callable

import msgpack

__all__ = ["ForkServer", "Sandbox", "ServerError"]

SERVER = str(Path(__file__).with_name("_forkserver.py"))
PRELOAD = (
    "abc", "argparse", "array", "ast", "asyncio", "base64", "binascii", "bisect", "calendar", "cmath", "codecs",
    "collections", "collections.abc", "colorsys", "contextlib", "copy", "csv", "dataclasses", "datetime", "decimal",
    "difflib", "enum", "fnmatch", "fractions", "functools", "gettext", "graphlib", "gzip", "hashlib", "heapq",
    "hmac", "html", "html.parser", "inspect", "io", "ipaddress", "itertools", "json", "keyword", "locale", "math",
    "numbers", "operator", "pathlib", "pprint", "queue", "random", "re", "reprlib", "secrets", "shlex",
    "statistics", "string", "struct", "textwrap", "time", "timeit", "tokenize", "traceback", "types", "typing",
    "unicodedata", "urllib.parse", "uuid", "weakref", "zlib",
)
"""Standard-library modules the server imports once, so a program's import of them is free."""


class ServerError(Exception):
    """The fork server could not start, or stopped answering."""


class Sandbox:
    """One launched sandbox: its launcher's pid and pidfd, and the host's ends of its pipes."""

    def __init__(self, server: "ForkServer", pid: int, fds: list[int]) -> None:
        self.server, self.pid = server, pid
        self.to_child, self.frames, self.stray, self._pidfd = fds
        self._program: int | None = None
        self._reaper: int | None = None
        self._held: list[int] = []  # pidfds of the reaper and program, once seen
        self._closed = False

    @staticmethod
    def _children(pid: int) -> list[int]:
        try:
            return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except (OSError, ValueError):
            return []

    def program(self) -> int | None:
        """The program process's host pid, once it exists (launcher → reaper → program).
        Each is held by a pidfd from when it is seen, so its pid can never be another's."""
        if self._program is None and not self._closed:
            if self._reaper is None:
                self._reaper = self._hold(self.pid)
            if self._reaper is not None:
                self._program = self._hold(self._reaper)
        return self._program

    def _hold(self, parent: int) -> int | None:
        found = self._children(parent)
        if not found:
            return None
        try:
            self._held.append(os.pidfd_open(found[0]))
        except OSError:
            return None  # already gone
        return found[0]

    def cpu_seconds(self) -> float:
        pid = self.program()
        if pid is None:
            return 0.0
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / _TICKS
        except (OSError, IndexError, ValueError):
            return 0.0

    def exit_code(self) -> int | None:
        """The program's exit status once the launcher ended (``-N``: killed by signal N)."""
        known = self.server.exit_of(self.pid)
        if known is None:
            return None
        code = known[0]
        return -(code - 128) if code > 128 else code  # the launcher reports signal N as 128+N

    def oom_killed(self) -> bool:
        known = self.server.exit_of(self.pid)
        return bool(known and known[1])

    def alive(self) -> bool:
        return not self._closed and self.server.exit_of(self.pid) is None

    def kill(self) -> int:
        """Kill the program, the reaper and the launcher (whichever are known; the rest
        follow the launcher: parent-death signals and the PID namespace), and close the
        host's pipe ends; never waits. Returns a pidfd (the caller closes it) that becomes
        readable once the untrusted process is gone: the program's, or, before it was
        ever seen, the launcher's."""
        if self._closed:
            return -1
        self.program()  # see whichever of them exist now
        self._closed = True
        for pidfd in (*self._held, self._pidfd):
            try:
                signals.pidfd_send_signal(pidfd, signals.SIGKILL)
            except (ProcessLookupError, OSError):
                pass
        watched = self._held[-1] if self._program is not None else self._pidfd
        for fd in (self.to_child, self.frames, self.stray, *self._held, self._pidfd):
            if fd != watched:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self.server.forget(self.pid)
        return watched

    async def end(self, timeout_s: float = 2.0) -> None:
        """:meth:`kill`, then wait until no process running the program is left — not even
        its exit status waiting for the reaper, so nothing of a run outlives it (a pidfd
        becomes readable when its process has exited; its reaping follows within moments).
        The trusted reaper and launcher (not the program's uid) follow within milliseconds."""
        import asyncio

        program = self._program
        watched = self.kill()
        if watched < 0:
            return
        loop = asyncio.get_running_loop()
        gone: asyncio.Future[None] = loop.create_future()
        deadline = loop.time() + timeout_s

        def exited() -> None:
            if not gone.done():
                gone.set_result(None)

        loop.add_reader(watched, exited)
        try:
            await asyncio.wait([gone], timeout=timeout_s)
        finally:
            loop.remove_reader(watched)
            os.close(watched)
        if program is not None:
            born = _started(program)  # the exited program, until its reaper reaps it
            while born is not None and _started(program) == born and loop.time() < deadline:
                await asyncio.sleep(0.0005)

    def discard(self) -> None:
        """:meth:`kill` without waiting (spares at close, sandboxes nobody will run)."""
        watched = self.kill()
        if watched >= 0:
            os.close(watched)


def _started(pid: int) -> str | None:
    """When process ``pid`` started (``None``: no such process): a pid reused by another
    process reads another start."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


_TICKS = os.sysconf("SC_CLK_TCK")


class ForkServer:
    """A fork server of this process for one launch configuration (see the module docs)."""

    def __init__(self, interpreter: str, libs: list[str], launch: dict[str, Any]) -> None:
        self._interpreter, self._libs, self._launch = interpreter, libs, launch
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._waiting: dict[int, Callable[[Sandbox | BaseException], None]] = {}
        self._exits: dict[int, tuple[int, bool]] = {}
        self._live: set[int] = set()
        self._socket: socket.socket | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._closed = False

    # --- asking for sandboxes ------------------------------------------------------------

    def request(self, done: Callable[[Sandbox | BaseException], None]) -> None:
        """Ask for a sandbox; ``done`` is called (from the reader thread) with it, or with the
        error that prevented it."""
        with self._lock:
            if self._closed:
                raise ServerError("the fork server was closed")
            control = self._running()
            request_id = next(self._ids)
            self._waiting[request_id] = done
            try:
                control.sendall(msgpack.packb({"op": "spawn", "id": request_id}))
            except OSError as exc:
                self._waiting.pop(request_id, None)
                raise ServerError(f"the fork server stopped answering ({exc})") from None

    def spawn(self, timeout_s: float = 30.0) -> Sandbox:
        """A sandbox, blocking until it is forked (milliseconds; the boot goes on in it)."""
        answer: concurrent.futures.Future[Sandbox] = concurrent.futures.Future()

        def done(outcome: Sandbox | BaseException) -> None:
            if isinstance(outcome, BaseException):
                answer.set_exception(outcome)
            else:
                answer.set_result(outcome)

        self.request(done)
        return answer.result(timeout_s)

    @property
    def running(self) -> bool:
        """Whether a server is up (a request then only sends a message: it never blocks)."""
        return self._socket is not None

    def exit_of(self, pid: int) -> tuple[int, bool] | None:
        return self._exits.get(pid)

    def forget(self, pid: int) -> None:
        """A sandbox was disposed of: its exit, when it comes, need not be kept."""
        with self._lock:
            self._live.discard(pid)
            self._exits.pop(pid, None)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            control, process = self._socket, self._process
            self._socket = None
        if control is not None:
            try:
                control.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if process is not None:
            try:
                process.kill()
            except OSError:
                pass

    # --- the server process --------------------------------------------------------------

    def _running(self) -> socket.socket:
        """The control socket of a live server, starting one if there is none (holding the lock)."""
        if self._socket is not None:
            return self._socket
        started: concurrent.futures.Future[socket.socket] = concurrent.futures.Future()
        threading.Thread(target=self._serve, args=(started,), name="dsh-forkserver", daemon=True).start()
        self._socket = started.result(60)
        return self._socket

    def _serve(self, started: "concurrent.futures.Future[socket.socket]") -> None:
        """The reader thread: starts the server (so its parent-death signal follows this
        thread), then hands out its answers until it ends."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        config = {"libs": self._libs, "launch": self._launch, "preload": list(PRELOAD), "control_fd": theirs.fileno(),
                  "host_pid": os.getpid()}
        try:
            process = subprocess.Popen(
                [self._interpreter, "-I", "-S", "-B", SERVER, json.dumps(config)], pass_fds=(theirs.fileno(),),
                env={}, cwd="/", start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        except OSError as exc:
            started.set_exception(ServerError(f"the fork server could not start: {exc}"))
            return
        finally:
            theirs.close()
        self._process = process
        try:
            first = self._receive(ours)
        except OSError as exc:
            first = None
            started.set_exception(ServerError(f"the fork server could not start: {exc}"))
        if first is None or first[0].get("op") != "ready":
            if not started.done():
                started.set_exception(ServerError(f"the fork server did not start (exit status {process.poll()})"))
            process.kill()
            return
        started.set_result(ours)
        try:
            while (received := self._receive(ours)) is not None:
                self._handle(*received)
        except OSError:
            pass
        finally:
            self._ended(ours, process)

    @staticmethod
    def _receive(control: socket.socket) -> tuple[dict[str, Any], list[int]] | None:
        data, fds, _, _ = socket.recv_fds(control, 65536, 8)
        if not data:
            for fd in fds:
                os.close(fd)
            return None
        return msgpack.unpackb(data), fds

    def _handle(self, message: dict[str, Any], fds: list[int]) -> None:
        op = message.get("op")
        if op == "exited":
            with self._lock:
                if message["pid"] in self._live:
                    self._exits[message["pid"]] = (int(message["code"]), bool(message.get("oom")))
            return
        with self._lock:
            done = self._waiting.pop(int(message.get("id", -1)), None)
        if op == "spawned" and len(fds) == 4:
            with self._lock:
                self._live.add(message["pid"])
            sandbox = Sandbox(self, message["pid"], fds)
            for fd in (sandbox.to_child, sandbox.frames, sandbox.stray):
                os.set_blocking(fd, False)
            if done is None:
                sandbox.discard()
            else:
                done(sandbox)
            return
        for fd in fds:
            os.close(fd)
        if done is not None:
            done(ServerError(f"the fork server could not start a sandbox: {message.get('error', message)}"))

    def _ended(self, control: socket.socket, process: subprocess.Popen[bytes]) -> None:
        """The server is gone: fail what waits on it; the next request starts a new one."""
        try:
            process.kill()
        except OSError:
            pass
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        with self._lock:
            if self._socket is control:
                self._socket = None
            waiting, self._waiting = self._waiting, {}
            for pid in self._live:  # its launchers died with it
                self._exits.setdefault(pid, (-int(signals.SIGKILL), False))
        control.close()
        for done in waiting.values():
            done(ServerError("the fork server ended before it answered"))
