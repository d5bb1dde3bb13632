"""The CPython backend: each program in a fresh process behind the kernel's walls.

:class:`SubprocessRuntime` starts ``_launcher.py`` (an empty environment), which applies
the isolation mechanisms of :mod:`~dsh_actors.codemode.isolation` and then runs the
program with ``tools`` bindings. The host treats the child as hostile:

- every read and write is non-blocking from the event loop, with bounded buffers
  (:mod:`~dsh_actors.codemode.channel`); a child that stops reading or breaks the framing
  ends its run with a ``worker-exit`` error, and the host never waits on it;
- malformed messages are dropped; only a well-formed ``done`` settles the run; each call
  id is answered at most once; unknown bindings are refused;
- the wall ceiling, an abort and the compute budget kill the sandbox's PID namespace
  (its PID 1 first), so nothing the program started survives the run;
- every byte of output, framed or stray, counts against the log budget.

One warm spare sandbox is kept booting in the background, so a run starts on an
interpreter that is already up; each sandbox still serves exactly one run, and its
``/work`` is a tmpfs of its own that no other run can see.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import signal as signals
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..core.signal import AbortSignal
from . import isolation
from .channel import ChannelError, FrameReader, PipeWriter, encode_frame, read_available
from .runtime import DIALECTS, Binding, check_run, CodeRuntimeConfig, Ledger, RunError, RunResult, settled

__all__ = ["SubprocessRuntime"]

_SAMPLE_S = 0.025
_MAX_FRAME = 16 * 2**20
_MAX_PENDING = 8 * 2**20
_SETUP_FAILED = 121
NOBODY = (65534, 65534)


def _ticks() -> int:
    return os.sysconf("SC_CLK_TCK")


class _Sandbox:
    """One launched sandbox: its launcher process and the host's ends of its pipes."""

    def __init__(self, process: subprocess.Popen[bytes], to_child: int, frames: int, stray: int) -> None:
        self.process, self.to_child, self.frames, self.stray = process, to_child, frames, stray
        self._program: int | None = None
        self._reaper: int | None = None

    @staticmethod
    def _children(pid: int) -> list[int]:
        try:
            return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        except (OSError, ValueError):
            return []

    def reaper(self) -> int | None:
        if self._reaper is None:
            found = self._children(self.process.pid)
            self._reaper = found[0] if found else None
        return self._reaper

    def program(self) -> int | None:
        if self._program is None and (reaper := self.reaper()) is not None:
            found = self._children(reaper)
            self._program = found[0] if found else None
        return self._program

    def cpu_seconds(self) -> float:
        pid = self.program()
        if pid is None:
            return 0.0
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / _ticks()
        except (OSError, IndexError, ValueError):
            return 0.0

    def exit_code(self) -> int | None:
        code = self.process.poll()
        if code is not None and code > 128:
            return -(code - 128)  # the launcher reports a program killed by signal N as 128+N
        return code

    def kill(self) -> None:
        """Kill PID 1 of the sandbox's namespace (the kernel then kills everything in it),
        and the launcher; never waits long."""
        for pid in (self.reaper(), self.process.pid):
            if pid is not None:
                try:
                    os.kill(pid, signals.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for fd in (self.to_child, self.frames, self.stray):
            try:
                os.close(fd)
            except OSError:
                pass


class SubprocessRuntime:
    """Runs each program in a new, OS-isolated CPython process (see the module docs).

    ``allow_missing`` names isolation mechanisms this host may lack; by default every
    mechanism must work, and construction raises
    :class:`~dsh_actors.codemode.isolation.SandboxUnavailableError` naming what is missing.
    ``outside_ids`` is the unprivileged uid/gid the program runs as when the host is root.
    ``warm_spare`` keeps one sandbox booting ahead of the next run.
    """

    language = "python"
    dialect = DIALECTS["cpython"]

    def __init__(self, config: CodeRuntimeConfig | None = None, *, allow_missing: Iterable[str] = (),
                 outside_ids: tuple[int, int] = NOBODY, warm_spare: bool = True) -> None:
        self.config = config or CodeRuntimeConfig(backend="cpython")
        self.outside_ids = outside_ids
        self.warm_spare = warm_spare
        self.mechanisms = isolation.required(isolation.probe(outside_ids), allow_missing)
        self.isolation = "os:" + "+".join(self.mechanisms) if self.mechanisms else "subprocess (no isolation)"
        self._closed = False
        self._runs: set[asyncio.Task[Any]] = set()
        self._spare: _Sandbox | None = None
        self._spare_lock = threading.Lock()
        self._root = isolation.mount_point()

    def close(self) -> None:
        """Dispose: later runs raise; in-flight runs end as aborted; the spare is ended."""
        self._closed = True
        for task in list(self._runs):
            task.cancel()
        with self._spare_lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            spare.kill()

    async def run(self, program: str, bindings: Mapping[str, Binding],
                  signal: AbortSignal | None = None) -> RunResult:
        """Run ``program`` (the body of an async function with ``tools`` in scope)."""
        if (early := check_run(self._closed, program, bindings, signal)) is not None:
            return early
        task = asyncio.current_task()
        if task is not None:
            self._runs.add(task)
        try:
            return await self._run(program, dict(bindings), signal)
        except asyncio.CancelledError:
            if self._closed:
                return RunResult(error=RunError("abort", "runtime disposed"))
            raise
        finally:
            if task is not None:
                self._runs.discard(task)

    # --- launching --------------------------------------------------------------------

    def _spawn(self) -> _Sandbox:
        to_child_r, to_child_w = os.pipe()
        frames_r, frames_w = os.pipe()
        stray_r, stray_w = os.pipe()
        config = self.config
        limits = {"cpu_s": max(1, math.ceil(config.compute_ms / 1000) + 1),  # backstop; the host samples finer
                  "memory_bytes": int(config.max_memory_mb) * 2**20, "file_bytes": 16 * 2**20}
        launch = isolation.launch_config(mechanisms=self.mechanisms, root=self._root, frames_fd=frames_w,
                                         outside_ids=self.outside_ids, limits=limits, disk_mb=64)
        try:
            process = subprocess.Popen(
                [isolation.interpreter(), "-I", "-S", "-B", isolation.LAUNCHER, json.dumps(launch)],
                stdin=to_child_r, stdout=stray_w, stderr=stray_w, pass_fds=(frames_w,), env={}, cwd="/",
                start_new_session=True,
            )
        except BaseException:
            for fd in (to_child_w, frames_r, stray_r):
                os.close(fd)
            raise
        finally:
            for fd in (to_child_r, frames_w, stray_w):
                os.close(fd)
        for fd in (to_child_w, frames_r, stray_r):
            os.set_blocking(fd, False)
        return _Sandbox(process, to_child_w, frames_r, stray_r)

    def _take(self) -> _Sandbox:
        """A sandbox for this run: the warm spare if there is one, and start the next spare."""
        with self._spare_lock:
            spare, self._spare = self._spare, None
        if spare is None or spare.process.poll() is not None:
            if spare is not None:
                spare.kill()
            spare = self._spawn()
        if self.warm_spare:
            threading.Thread(target=self._prepare_spare, daemon=True).start()
        return spare

    def _prepare_spare(self) -> None:
        if self._closed:
            return
        try:
            fresh: _Sandbox | None = self._spawn()
        except Exception:
            return
        with self._spare_lock:
            if self._spare is None and not self._closed:
                self._spare, fresh = fresh, None
        if fresh is not None:
            fresh.kill()

    # --- one run ------------------------------------------------------------------------

    async def _run(self, program: str, bindings: dict[str, Binding], signal: AbortSignal | None) -> RunResult:
        loop = asyncio.get_running_loop()
        sandbox = self._take()
        session = _Session(loop, sandbox, bindings, Ledger(int(self.config.max_log_bytes)))
        try:
            session.send({"t": "start", "program": program, "names": sorted(bindings),
                          "max_value_bytes": int(self.config.max_value_bytes)})
            return await self._supervise(sandbox, session, signal)
        finally:
            session.close()
            await loop.run_in_executor(None, sandbox.kill)

    async def _supervise(self, sandbox: _Sandbox, session: "_Session", signal: AbortSignal | None) -> RunResult:
        config = self.config
        started = time.monotonic()
        wall_s, compute_s = config.max_wall_ms / 1000, config.compute_ms / 1000
        ledger = session.ledger
        next_sample = started
        while True:
            if signal is not None and signal.aborted:
                return RunResult(ledger.logs, error=RunError("abort", str(signal.reason)))
            now = time.monotonic()
            if now - started > wall_s:
                return RunResult(ledger.logs, error=RunError("timeout", f"wall-clock ceiling reached ({int(config.max_wall_ms)}ms)"))
            if now >= next_sample:  # the program's CPU, read from /proc every _SAMPLE_S (not per frame)
                busy = sandbox.cpu_seconds()
                if busy > compute_s:
                    return RunResult(ledger.logs, error=RunError("timeout", f"compute budget exhausted ({int(busy * 1000)}ms busy)"))
                next_sample = now + _SAMPLE_S
            try:
                kind, message = session.inbox.get_nowait()  # a busy program's frames: no wait, no timer
            except asyncio.QueueEmpty:
                try:
                    async with asyncio.timeout(next_sample - now):
                        kind, message = await session.inbox.get()
                except TimeoutError:
                    continue
            if kind == "frame" and isinstance(message, dict):
                tag = message.get("t")
                if tag == "log" and isinstance(message.get("text"), str):
                    ledger.add(message["text"])
                elif tag == "call":
                    session.dispatch(message)
                elif tag == "done" and (result := settled(message, ledger, int(config.max_value_bytes))) is not None:
                    return result
                # anything else is malformed: dropped
            elif kind == "broken":
                return RunResult(ledger.logs, error=RunError("worker-exit", f"sandbox stopped: {message}"))
            elif kind == "closed":
                return await self._ended(sandbox, ledger, compute_s, started + wall_s)

    async def _ended(self, sandbox: _Sandbox, ledger: Ledger, compute_s: float, deadline: float) -> RunResult:
        """The child closed its channel without a ``done``: why (waiting briefly, never blocking)."""
        busy = sandbox.cpu_seconds()
        while (code := sandbox.exit_code()) is None and time.monotonic() < min(deadline, time.monotonic() + 2):
            await asyncio.sleep(0.005)
        if code == -signals.SIGXCPU or code == -signals.SIGKILL and busy >= compute_s:
            return RunResult(ledger.logs, error=RunError("timeout", f"compute budget exhausted ({int(compute_s * 1000)}ms busy)"))
        if code == _SETUP_FAILED:
            return RunResult(ledger.logs, error=RunError("worker-exit", "the sandbox could not be set up (see the logs)"))
        return RunResult(ledger.logs, error=RunError("worker-exit", f"worker exited with code {code} before completing"))


class _Session:
    """One run's traffic: reader callbacks feed the inbox; replies go out through the writer."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sandbox: _Sandbox, bindings: dict[str, Binding],
                 ledger: Ledger) -> None:
        self.loop, self.sandbox, self.bindings, self.ledger = loop, sandbox, bindings, ledger
        self.inbox: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._decoder = FrameReader(_MAX_FRAME)
        self._writer = PipeWriter(loop, sandbox.to_child, _MAX_PENDING, self._broken)
        self._seen: set[int] = set()
        self._closed = False
        self._reading = {sandbox.frames, sandbox.stray}
        loop.add_reader(sandbox.frames, self._on_frames)
        loop.add_reader(sandbox.stray, self._on_stray)

    def _broken(self, error: ChannelError) -> None:
        self._stop_reading(self.sandbox.frames)
        self.inbox.put_nowait(("broken", str(error)))

    def _stop_reading(self, fd: int) -> None:
        if fd in self._reading:
            self._reading.discard(fd)
            self.loop.remove_reader(fd)

    def _on_frames(self) -> None:
        data = read_available(self.sandbox.frames)
        if data is None:
            self._stop_reading(self.sandbox.frames)
            self.inbox.put_nowait(("closed", None))
            return
        try:
            frames = self._decoder.feed(data)
        except ChannelError as error:
            self._broken(error)
            return
        for frame in frames:
            self.inbox.put_nowait(("frame", frame))

    def _on_stray(self) -> None:
        data = read_available(self.sandbox.stray)
        if data is None:
            self._stop_reading(self.sandbox.stray)
        elif data:
            self.ledger.add(data.decode("utf-8", "replace"))  # bounded by the ledger; the pipe keeps draining

    def send(self, message: dict[str, Any]) -> None:
        self._writer.write(encode_frame(message))

    def dispatch(self, message: dict[str, Any]) -> None:
        call_id, name = message.get("id"), message.get("name")
        if not isinstance(call_id, int) or isinstance(call_id, bool) or call_id in self._seen:
            return  # forged or duplicate: dropped
        if len(self._seen) >= 100_000:
            return  # a program forging ids forever gets no more answers
        self._seen.add(call_id)
        binding = self.bindings.get(name) if isinstance(name, str) else None
        if binding is None:
            self._answer(call_id, False, f'unknown binding "tools.{name}"')
            return
        task = self.loop.create_task(self._call(call_id, binding, message.get("args")))
        _tasks.add(task)
        task.add_done_callback(_tasks.discard)

    async def _call(self, call_id: int, binding: Binding, args: Any) -> None:
        try:
            value = await binding(args)
        except Exception as exc:
            self._answer(call_id, False, str(exc))
            return
        self._answer(call_id, True, value if isinstance(value, str) else str(value))

    def _answer(self, call_id: int, ok: bool, value: str) -> None:
        if not self._closed:  # replies after settlement are dropped
            self.send({"t": "reply", "id": call_id, "ok": ok, ("value" if ok else "error"): value})

    def close(self) -> None:
        # In-flight binding calls are not cancelled: their owner (the Code Mode bridge)
        # aborts them through the run's signal and drains them; their replies are dropped.
        self._closed = True
        self._writer.close()
        for fd in list(self._reading):
            self._stop_reading(fd)


_tasks: set[asyncio.Task[Any]] = set()
