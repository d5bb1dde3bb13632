"""The CPython backend: each program in a fresh sandbox behind the kernel's walls.

:class:`SubprocessRuntime` asks its fork server (:mod:`~dsh_actors.codemode.forkserver`)
for sandboxes: each is forked from a pre-imported interpreter and walled in afresh
(:mod:`~dsh_actors.codemode.isolation`), serves exactly one run, and is killed when the
run ends. ``spares`` sandboxes are kept forked ahead of the next runs, so a run starts on
one that has already booted.

The host treats the sandbox as hostile, and bounds its own side of the run
(:mod:`~dsh_actors.codemode.bounds`, the budgets in
:class:`~dsh_actors.codemode.contract.CodeRuntimeConfig`):

- every read and write is non-blocking from the event loop, in bounded pieces (a read
  callback decodes at most 64 KiB, a frame is at most a call's argument cap); a child
  that stops reading or breaks the framing ends its run with a ``worker-exit`` error;
- a call is admitted (arguments, calls and bytes in flight) before its arguments are
  parsed; its result is checked against the result cap; unknown bindings, a second call
  under an id still in flight and malformed frames are refused or dropped (ids are matched,
  never ordered: a forged id cannot shut out a real call); only a well-formed
  ``done`` settles the run;
- the host CPU spent on the run's frames counts against its compute budget, beside the
  program's own CPU (sampled from ``/proc``);
- the wall ceiling, an abort and the compute budget kill the sandbox's launcher, and with
  it the whole PID namespace, so nothing the program started survives the run;
- every byte of output, framed or stray, counts against the log budget.
"""

from __future__ import annotations

import asyncio
import collections
import math
import signal as signals
import threading
import time
from typing import Any, Iterable, Mapping

from ..core.signal import AbortSignal
from . import isolation
from .bounds import CallGate, HostMeter, Ledger, LogLines, arguments_for, cap_error, cap_value
from .channel import ChannelError, FrameReader, PipeWriter, encode_frame, read_available
from .contract import ERROR_KINDS, Binding, CodeRuntimeConfig, RunError, RunResult, check_run
from .forkserver import ForkServer, Sandbox, ServerError

__all__ = ["DIALECT", "SubprocessRuntime", "settled"]

DIALECT = ("CPython 3 with its standard library, in a sandbox: files only under the working directory "
           "and /tmp, no network, no processes, no installed packages")
"""What the SDK text tells the model it writes."""

_SAMPLE_S = 0.025
_SLACK = 64 * 1024
_SETUP_FAILED = 121
NOBODY = (65534, 65534)


def settled(message: Any, ledger: Ledger, cap: int) -> RunResult | None:
    """The result a ``done`` message settles the run with, or ``None`` if it is malformed.

    Only a well-formed ``done`` settles: ``value`` absent or a string, ``error`` absent
    or ``{kind, message}`` with a known kind and a string message. A forged ``done`` may
    carry both, and both are reported.
    """
    if not isinstance(message, dict):
        return None
    value, error = message.get("value"), message.get("error")
    if value is not None and not isinstance(value, str):
        return None
    if error is not None and not (isinstance(error, dict) and error.get("kind") in ERROR_KINDS
                                  and isinstance(error.get("message", ""), str)):
        return None
    run_error = RunError(error["kind"], cap_error(error.get("message", ""), cap)) if error is not None else None
    return RunResult(ledger.logs, cap_value(value, cap) if value is not None else None, run_error)


class SubprocessRuntime:
    """Runs each program in a new, OS-isolated CPython sandbox (see the module docs).

    ``allow_missing`` names isolation mechanisms this host may lack; by default every
    mechanism must work, and construction raises
    :class:`~dsh_actors.codemode.isolation.SandboxUnavailableError` naming what is missing.
    ``outside_ids`` is the unprivileged uid/gid the program runs as when the host is root
    (default: ids of the run's own, from :data:`~.isolation.OUTSIDE_RANGE`).
    ``spares`` sandboxes are kept forked ahead of the next runs (``warm_spare=False``: none).
    """

    language = "python"
    dialect = DIALECT

    def __init__(self, config: CodeRuntimeConfig | None = None, *, allow_missing: Iterable[str] = (),
                 outside_ids: tuple[int, int] | None = None, warm_spare: bool = True, spares: int = 2) -> None:
        self.config = config = config or CodeRuntimeConfig(backend="cpython")
        self.outside_ids = outside_ids
        self.mechanisms = isolation.required(isolation.probe(outside_ids or NOBODY), allow_missing)
        self._cgroups = isolation.cgroup_parents()
        walls = list(self.mechanisms) + (["memcg"] if self._cgroups is not None else [])
        self.isolation = "os:" + "+".join(walls) if self.mechanisms else "subprocess (no isolation)"
        memory = int(config.max_memory_mb) * 2**20
        limits = {"cpu_s": max(1, math.ceil(config.compute_ms / 1000) + 1),  # backstop; the host samples finer
                  "memory_bytes": memory, "file_bytes": 16 * 2**20}
        launch = isolation.launch_config(
            mechanisms=self.mechanisms, root=isolation.mount_point(), outside_ids=outside_ids, limits=limits,
            disk_mb=64, cgroups=self._cgroups.limits(memory, tasks=64) if self._cgroups is not None else ())
        self._server = ForkServer(isolation.interpreter(), isolation.library_dirs(), launch)
        self._spare_count = spares if warm_spare else 0
        self._spares: collections.deque[Sandbox] = collections.deque()
        self._booting = 0
        self._lock = threading.Lock()
        self._closed = False
        self._runs: set[asyncio.Task[Any]] = set()
        self._frame_cap = max(int(config.max_arg_bytes), 4 * int(config.max_value_bytes), _SLACK) + _SLACK
        self._reply_cap = 2 * int(config.max_result_bytes) + _SLACK

    def close(self) -> None:
        """Dispose: later runs raise; in-flight runs end as aborted; spares and the server end."""
        self._closed = True
        for task in list(self._runs):
            task.cancel()
        with self._lock:
            spares, self._spares = list(self._spares), collections.deque()
        for spare in spares:
            spare.discard()
        self._server.close()
        if self._cgroups is not None:
            cgroups = self._cgroups
            threading.Timer(1.0, cgroups.close).start()  # once the killed runs' processes are gone

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
        except ServerError as exc:
            return RunResult(error=RunError("worker-exit", f"no sandbox could be started: {exc}"))
        finally:
            if task is not None:
                self._runs.discard(task)

    # --- sandboxes ----------------------------------------------------------------------

    async def _take(self) -> Sandbox:
        """A sandbox for this run: a spare if one is ready, else a fresh one; then top up."""
        sandbox = None
        with self._lock:
            while self._spares and sandbox is None:
                candidate = self._spares.popleft()
                if candidate.alive():
                    sandbox = candidate
                else:
                    candidate.discard()
        if sandbox is None:
            sandbox = await self._fresh()
        self._top_up()
        return sandbox

    async def _fresh(self) -> Sandbox:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Sandbox] = loop.create_future()

        def done(outcome: Sandbox | BaseException) -> None:
            def deliver() -> None:
                if answer.done():  # nobody waits for it any more (cancelled): it never runs
                    if isinstance(outcome, Sandbox):
                        outcome.discard()
                elif isinstance(outcome, BaseException):
                    answer.set_exception(outcome)
                else:
                    answer.set_result(outcome)
            try:
                loop.call_soon_threadsafe(deliver)
            except RuntimeError:  # the loop closed first: nobody will run in it
                if isinstance(outcome, Sandbox):
                    outcome.discard()

        try:
            await loop.run_in_executor(None, self._server.request, done)  # may start the server: off the loop
            return await answer
        except asyncio.CancelledError:
            # Cancelled while asking or waiting: a sandbox that arrives later is discarded, and
            # one that already arrived is killed now.
            if answer.done() and not answer.cancelled() and answer.exception() is None:
                answer.result().discard()
            answer.cancel()
            raise

    def _top_up(self) -> None:
        with self._lock:
            wanted = self._spare_count - len(self._spares) - self._booting
            self._booting += max(0, wanted)
        for _ in range(max(0, wanted)):
            if self._server.running:
                self._ask_spare()
            else:  # the server must start first: not on the event loop
                threading.Thread(target=self._ask_spare, daemon=True).start()

    def _ask_spare(self) -> None:
        def done(outcome: Sandbox | BaseException) -> None:
            with self._lock:
                self._booting -= 1
                if isinstance(outcome, Sandbox) and not self._closed:
                    self._spares.append(outcome)
                    return
            if isinstance(outcome, Sandbox):
                outcome.discard()

        try:
            self._server.request(done)
        except ServerError:
            with self._lock:
                self._booting -= 1

    # --- one run ------------------------------------------------------------------------

    async def _run(self, program: str, bindings: dict[str, Binding], signal: AbortSignal | None) -> RunResult:
        loop = asyncio.get_running_loop()
        start = encode_frame({"t": "start", "program": program, "names": sorted(bindings),
                              "max_value_bytes": int(self.config.max_value_bytes),
                              "max_log_bytes": int(self.config.max_log_bytes),
                              "max_arg_bytes": int(self.config.max_arg_bytes)})
        sandbox = await self._take()
        # the replies' bound, plus the program itself (however long it is, it goes first)
        session = _Session(loop, sandbox, bindings, self.config, self._frame_cap, self._reply_cap + len(start))
        try:
            session.write(start)
            return await self._supervise(sandbox, session, signal)
        finally:
            session.close()
            await sandbox.end()  # the run returns once none of its processes is left

    async def _supervise(self, sandbox: Sandbox, session: "_Session", signal: AbortSignal | None) -> RunResult:
        config = self.config
        started = time.monotonic()
        wall_s, compute_s = config.max_wall_ms / 1000, config.compute_ms / 1000
        ledger = session.ledger
        while not session.outcome.done():
            if signal is not None and signal.aborted:
                return RunResult(ledger.logs, error=RunError("abort", str(signal.reason)))
            now = time.monotonic()
            if now - started > wall_s:
                return RunResult(ledger.logs, error=RunError(
                    "timeout", f"wall-clock ceiling reached ({int(config.max_wall_ms)}ms)"))
            busy = sandbox.cpu_seconds() + session.meter.used_s  # the program's CPU and the host's for it
            if busy > compute_s:
                return RunResult(ledger.logs, error=RunError(
                    "timeout", f"compute budget exhausted ({int(busy * 1000)}ms busy)"))
            try:
                async with asyncio.timeout(min(_SAMPLE_S, max(0.0, started + wall_s - now))):
                    await asyncio.shield(session.outcome)
            except TimeoutError:
                continue
        kind, payload = session.outcome.result()
        if kind == "done":
            return payload
        if kind == "broken":
            return RunResult(ledger.logs, error=RunError("worker-exit", f"sandbox stopped: {payload}"))
        return await self._ended(sandbox, ledger, compute_s, started + wall_s)

    async def _ended(self, sandbox: Sandbox, ledger: Ledger, compute_s: float, deadline: float) -> RunResult:
        """The child closed its channel without a ``done``: why (waiting briefly, never blocking)."""
        busy = sandbox.cpu_seconds()
        give_up = min(deadline, time.monotonic() + 2)
        while (code := sandbox.exit_code()) is None and time.monotonic() < give_up:
            await asyncio.sleep(0.005)
        if sandbox.oom_killed():
            return RunResult(ledger.logs, error=RunError(
                "worker-exit", f"memory budget exhausted ({int(self.config.max_memory_mb)} MB): the sandbox was killed"))
        if code == -signals.SIGXCPU or code == -signals.SIGKILL and busy >= compute_s:
            return RunResult(ledger.logs, error=RunError(
                "timeout", f"compute budget exhausted ({int(compute_s * 1000)}ms busy)"))
        if code == _SETUP_FAILED:
            return RunResult(ledger.logs, error=RunError("worker-exit", "the sandbox could not be set up (see the logs)"))
        return RunResult(ledger.logs, error=RunError("worker-exit", f"worker exited with code {code} before completing"))


class _Session:
    """One run's traffic, handled as it arrives in bounded pieces (see the module docs)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sandbox: Sandbox, bindings: dict[str, Binding],
                 config: CodeRuntimeConfig, frame_cap: int, reply_cap: int) -> None:
        self.loop, self.sandbox, self.bindings = loop, sandbox, bindings
        self.ledger = Ledger(int(config.max_log_bytes))
        self.meter = HostMeter()
        self.gate = CallGate(config)
        self.value_cap = int(config.max_value_bytes)
        self.outcome: asyncio.Future[tuple[str, Any]] = loop.create_future()
        self._printed = LogLines(self.ledger)
        self._stray = LogLines(self.ledger)
        self._decoder = FrameReader(frame_cap)
        self._writer = PipeWriter(loop, sandbox.to_child, reply_cap, self._broken)
        self._in_flight: set[int] = set()  # ids of calls admitted and not yet answered
        self._closed = False
        self._reading = {sandbox.frames, sandbox.stray}
        loop.add_reader(sandbox.frames, self._on_frames)
        loop.add_reader(sandbox.stray, self._on_stray)

    def _settle(self, kind: str, payload: Any = None) -> None:
        if not self.outcome.done():
            self.outcome.set_result((kind, payload))

    def _broken(self, error: ChannelError) -> None:
        self._stop_reading(self.sandbox.frames)
        self._settle("broken", str(error))

    def _stop_reading(self, fd: int) -> None:
        if fd in self._reading:
            self._reading.discard(fd)
            self.loop.remove_reader(fd)

    def _on_frames(self) -> None:
        with self.meter.charge():
            data = read_available(self.sandbox.frames)
            if data is None:
                self._stop_reading(self.sandbox.frames)
                self._printed.flush()
                self._settle("closed")
                return
            try:
                frames = self._decoder.feed(data)
            except ChannelError as error:
                self._broken(error)
                return
            for frame in frames:
                if self.outcome.done():
                    return
                self._handle(frame)

    def _handle(self, frame: Any) -> None:
        if not isinstance(frame, dict):
            return  # malformed: dropped
        tag = frame.get("t")
        if tag == "log" and isinstance(frame.get("text"), str):
            self._printed.write(frame["text"])
        elif tag == "call":
            self._dispatch(frame)
        elif tag == "done":
            self._printed.flush()
            self._stray.flush()
            result = settled(frame, self.ledger, self.value_cap)
            if result is not None:
                self._settle("done", result)

    def _on_stray(self) -> None:
        with self.meter.charge():
            data = read_available(self.sandbox.stray)
            if data is None:
                self._stop_reading(self.sandbox.stray)
            elif data:
                self._stray.write(data.decode("utf-8", "replace"))  # bounded by the ledger; the pipe keeps draining

    def send(self, message: dict[str, Any]) -> None:
        self._writer.write(encode_frame(message))

    def write(self, frame: bytes) -> None:
        self._writer.write(frame)

    def _dispatch(self, frame: dict[str, Any]) -> None:
        call_id, name = frame.get("id"), frame.get("name")
        if not isinstance(call_id, int) or isinstance(call_id, bool) or not isinstance(name, str) \
                or call_id in self._in_flight:
            return  # malformed, or a second call under an id not yet answered: dropped
        # Ids are only matched, never ordered: the program can write frames of its own, and
        # a forged id must not make the host refuse a later real one (the child draws its
        # ids at random, so a forger cannot take the id of a call not yet sent). A frame the
        # program forges does what a call it made would do, within the same gate.
        self._in_flight.add(call_id)
        text, size = frame.get("json"), frame.get("size")
        if not isinstance(text, str):  # the child's notice of a call too large to send
            size = size if isinstance(size, int) and not isinstance(size, bool) and size > 0 else 0
            self._answer(call_id, False, self.gate.text("ARGS_TOO_LARGE", name, size))
            return
        binding = self.bindings.get(name)
        if binding is None:
            self._answer(call_id, False, f'unknown binding "tools.{name}"')
            return
        size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
        refusal = self.gate.admit(name, size)
        if refusal is not None:
            self._answer(call_id, False, refusal)
            return
        task = self.loop.create_task(self._call(call_id, name, binding, text, size))
        _tasks.add(task)
        task.add_done_callback(_tasks.discard)

    async def _call(self, call_id: int, name: str, binding: Binding, text: str, size: int) -> None:
        ok = False
        try:
            args = arguments_for(binding, text, self.meter)
            value = await binding(args)
            ok = True
        except Exception as exc:
            value = str(exc)
        finally:
            self.gate.done(size)
        value = value if isinstance(value, str) else str(value)
        refusal = self.gate.result_refusal(name, value)  # an error text is bounded like a result
        if refusal is not None:
            self._answer(call_id, False, refusal)
        else:
            self._answer(call_id, ok, value)

    def _answer(self, call_id: int, ok: bool, value: str) -> None:
        self._in_flight.discard(call_id)
        if self._closed:
            return  # replies after settlement are dropped
        with self.meter.charge():
            self.send({"t": "reply", "id": call_id, "ok": ok, ("value" if ok else "error"): value})

    def close(self) -> None:
        # In-flight binding calls are not cancelled: their owner (the Code Mode bridge)
        # aborts them through the run's signal and drains them; their replies are dropped.
        self._closed = True
        self._writer.close()
        for fd in list(self._reading):
            self._stop_reading(fd)


_tasks: set[asyncio.Task[Any]] = set()
