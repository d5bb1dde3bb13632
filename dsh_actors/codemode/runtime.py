"""The code runtime seam, and its shipped backend: CPython in a fresh, locked-down subprocess.

The seam (:class:`CodeRuntime`): ``language`` (``"python"``), an ``isolation`` label, and
``run(program, bindings, signal) -> RunResult``. Every program outcome is a result —
``RunResult.error`` with ``kind`` ``exception`` | ``timeout`` | ``abort`` | ``worker-exit``
— and only misuse raises. No state survives between runs: each run is a new process.

:class:`SubprocessRuntime` starts ``python -I -S`` with an empty environment, in a
private temporary working directory, with resource limits (CPU seconds, address space,
file size, open files), in a new session, and in a new network namespace where the OS
allows (then the label says ``+netns``). Inside, an audit hook refuses files outside the
working directory (reads of the standard library excepted), sockets, processes, ctypes
and importing ``ray``; the child's import path holds only the standard library and
msgpack. The host treats the child as hostile: frames are checked by shape and size,
malformed ones are dropped, each call is answered at most once, unknown bindings are
refused, and every byte of output counts against the log budget.
"""

from __future__ import annotations

import asyncio
import ctypes
import math
import os
import resource
import shutil
import signal as signals
import struct
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable, Literal, Mapping, Protocol

import msgpack

from ..core.signal import AbortSignal

__all__ = ["CodeRuntime", "CodeRuntimeConfig", "RunError", "RunResult", "SubprocessRuntime"]

ErrorKind = Literal["exception", "timeout", "abort", "worker-exit"]
Binding = Callable[[Any], Awaitable[str]]
TRUNCATED = "[dsh-code-runtime] log capture truncated at {n} bytes"


@dataclass(frozen=True, slots=True)
class RunError:
    kind: ErrorKind
    message: str


@dataclass(frozen=True, slots=True)
class RunResult:
    """``value`` (the rendered returned value, absent for ``None``), ``logs`` in emission
    order, and ``error`` when the program did not complete."""

    logs: list[str] = field(default_factory=list)
    value: str | None = None
    error: RunError | None = None


class CodeRuntime(Protocol):
    language: str
    isolation: str

    async def run(self, program: str, bindings: Mapping[str, Binding],
                  signal: AbortSignal | None = None) -> RunResult: ...


@dataclass(frozen=True, slots=True)
class CodeRuntimeConfig:
    """Budgets; each must be a positive finite number."""

    compute_ms: float = 60_000
    """CPU time the program may use (time waiting on a binding does not count)."""
    max_wall_ms: float = 600_000
    """Wall-clock ceiling for the whole run."""
    max_log_bytes: int = 65_536
    """Printed output kept; the first entry over the budget becomes a truncation marker."""
    max_value_bytes: int = 32_768
    """The returned value's rendering is cut to this many bytes."""
    max_memory_mb: int = 512
    """Address-space limit of the child."""

    def __post_init__(self) -> None:
        for key in ("compute_ms", "max_wall_ms", "max_log_bytes", "max_value_bytes", "max_memory_mb"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"dsh-code-runtime: config.{key} must be a positive number, got {value!r}")


_CLONE_NEWNET = 0x40000000
_SAMPLE_S = 0.025


def _network_namespace_available() -> bool:
    probe = subprocess.run([sys.executable, "-c", "pass"], preexec_fn=_enter_netns, capture_output=True)
    return probe.returncode == 0


def _enter_netns() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWNET) failed")


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


class _Ledger:
    """The host's own log budget: forged or stray output is bounded too."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.logs: list[str] = []
        self.full = False

    def add(self, text: str) -> None:
        if self.full:
            return
        size = len(text.encode("utf-8"))
        if self.used + size > self.limit:
            self.logs.append(TRUNCATED.format(n=self.limit))
            self.full = True
            return
        self.used += size
        self.logs.append(text)


class SubprocessRuntime:
    """Runs each program in a new CPython process (see the module docs)."""

    language = "python"

    def __init__(self, config: CodeRuntimeConfig | None = None, *, network_namespace: bool | None = None) -> None:
        self.config = config or CodeRuntimeConfig()
        self._netns = _network_namespace_available() if network_namespace is None else network_namespace
        self.isolation = "subprocess+rlimits+audit" + ("+netns" if self._netns else "")
        self._closed = False
        self._runs: set[asyncio.Task[Any]] = set()
        self._spare: tuple[subprocess.Popen[bytes], int, str] | None = None
        self._spare_lock = threading.Lock()
        import msgpack as _msgpack  # the child's one dependency, offered alone on its path

        self._paths_dir = tempfile.mkdtemp(prefix="dsh-sandbox-lib-")
        os.symlink(os.path.dirname(_msgpack.__file__), os.path.join(self._paths_dir, "msgpack"))
        self._msgpack_dir = os.path.realpath(os.path.dirname(_msgpack.__file__))
        self._child = str(Path(__file__).with_name("_child.py"))

    def close(self) -> None:
        """Dispose: later runs raise; in-flight runs end as aborted; the spare is ended."""
        self._closed = True
        for task in list(self._runs):
            task.cancel()
        with self._spare_lock:
            spare, self._spare = self._spare, None
        if spare is not None:
            _discard(spare)
        shutil.rmtree(self._paths_dir, ignore_errors=True)

    def _limits(self) -> None:
        cpu = max(1, math.ceil(self.config.compute_ms / 1000) + 1)  # backstop; the host samples finer
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        memory = int(self.config.max_memory_mb) * 2**20
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_FSIZE, (16 * 2**20, 16 * 2**20))
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if self._netns:
            _enter_netns()

    async def run(self, program: str, bindings: Mapping[str, Binding],
                  signal: AbortSignal | None = None) -> RunResult:
        """Run ``program`` (the body of an async function with ``tools`` in scope)."""
        if self._closed:
            raise RuntimeError("dsh-code-runtime: run() after disposal")
        if not isinstance(program, str):
            raise TypeError("program must be a str")
        if not isinstance(bindings, Mapping) or not all(isinstance(n, str) and callable(f) for n, f in bindings.items()):
            raise TypeError("bindings must map binding names (str) to async functions")
        if signal is not None and signal.aborted:
            return RunResult(error=RunError("abort", str(signal.reason)))
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

    def _spawn(self) -> tuple[subprocess.Popen[bytes], int, str]:
        """A fresh child waiting for its ``start`` frame (its read end and working dir)."""
        workdir = tempfile.mkdtemp(prefix="dsh-run-")
        read_end, write_end = os.pipe()
        try:
            child = subprocess.Popen(
                [sys.executable, "-I", "-S", "-B", self._child, str(write_end), self._paths_dir],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=(write_end,),
                cwd=workdir, env={}, preexec_fn=self._limits, start_new_session=True,
            )
        except BaseException:
            os.close(read_end)
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        finally:
            os.close(write_end)
        return child, read_end, workdir

    def _take(self) -> tuple[subprocess.Popen[bytes], int, str]:
        """A child for this run: the warm spare if there is one, and start the next spare.

        Each child still serves exactly one run; the spare only moves its start-up (≈50 ms
        of interpreter boot) off the run's critical path.
        """
        with self._spare_lock:
            spare, self._spare = self._spare, None
        if spare is None or spare[0].poll() is not None:
            if spare is not None:
                _discard(spare)
            spare = self._spawn()
        threading.Thread(target=self._prepare_spare, daemon=True).start()
        return spare

    def _prepare_spare(self) -> None:
        if self._closed:
            return
        try:
            fresh = self._spawn()
        except Exception:
            return
        with self._spare_lock:
            if self._spare is None and not self._closed:
                self._spare, fresh = fresh, None
        if fresh is not None:
            _discard(fresh)

    async def _run(self, program: str, bindings: dict[str, Binding], signal: AbortSignal | None) -> RunResult:
        loop = asyncio.get_running_loop()
        ledger = _Ledger(int(self.config.max_log_bytes))
        inbox: asyncio.Queue[Any] = asyncio.Queue()
        stdlib = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib")}
        read_roots = sorted(stdlib | {os.path.join(p, "lib-dynload") for p in stdlib} | {self._msgpack_dir, self._paths_dir})
        child, read_end, workdir = self._take()
        threads = [
            threading.Thread(target=self._frames, args=(read_end, loop, inbox), daemon=True),
            threading.Thread(target=self._stray, args=(child.stdout, loop, inbox), daemon=True),
            threading.Thread(target=self._stray, args=(child.stderr, loop, inbox), daemon=True),
        ]
        for thread in threads:
            thread.start()
        replies = _Replies(child, bindings)
        try:
            _write(child, {"t": "start", "program": program, "names": sorted(bindings),
                           "read_roots": read_roots, "max_value_bytes": int(self.config.max_value_bytes)})
            return await self._supervise(child, inbox, ledger, replies, signal)
        finally:
            replies.close()
            _kill(child)
            for thread in threads:
                thread.join(timeout=2)
            os.close(read_end)
            shutil.rmtree(workdir, ignore_errors=True)

    async def _supervise(self, child: subprocess.Popen[bytes], inbox: asyncio.Queue[Any], ledger: _Ledger,
                         replies: "_Replies", signal: AbortSignal | None) -> RunResult:
        started = time.monotonic()
        wall_s = self.config.max_wall_ms / 1000
        compute_s = self.config.compute_ms / 1000
        while True:
            if signal is not None and signal.aborted:
                return RunResult(ledger.logs, error=RunError("abort", str(signal.reason)))
            if time.monotonic() - started > wall_s:
                return RunResult(ledger.logs, error=RunError("timeout", f"wall-clock ceiling reached ({int(self.config.max_wall_ms)}ms)"))
            busy = _cpu_seconds(child.pid)
            if busy > compute_s:
                return RunResult(ledger.logs, error=RunError("timeout", f"compute budget exhausted ({int(busy * 1000)}ms busy)"))
            try:
                kind, message = await asyncio.wait_for(inbox.get(), _SAMPLE_S)
            except asyncio.TimeoutError:
                continue
            if kind == "stray":
                ledger.add(message)
            elif kind == "closed":
                code = child.wait()
                if code == -signals.SIGXCPU or code == -signals.SIGKILL and _cpu_seconds(child.pid) >= compute_s:
                    return RunResult(ledger.logs, error=RunError("timeout", f"compute budget exhausted ({int(compute_s * 1000)}ms busy)"))
                return RunResult(ledger.logs, error=RunError("worker-exit", f"worker exited with code {code} before completing"))
            elif kind == "frame" and isinstance(message, dict):
                tag = message.get("t")
                if tag == "log" and isinstance(message.get("text"), str):
                    ledger.add(message["text"])
                elif tag == "call":
                    replies.dispatch(message)
                elif tag == "done":
                    return _done(message, ledger, self.config)
            # anything else is malformed: dropped

    @staticmethod
    def _frames(fd: int, loop: asyncio.AbstractEventLoop, inbox: asyncio.Queue[Any]) -> None:
        with os.fdopen(os.dup(fd), "rb", buffering=0) as stream:
            while True:
                head = _read_exact(stream, 4)
                if head is None:
                    break
                size = struct.unpack(">I", head)[0]
                if size > 64 * 2**20:
                    break  # a hostile size: stop listening to this child
                body = _read_exact(stream, size)
                if body is None:
                    break
                try:
                    frame = msgpack.unpackb(body, raw=False)
                except Exception:
                    continue
                loop.call_soon_threadsafe(inbox.put_nowait, ("frame", frame))
        loop.call_soon_threadsafe(inbox.put_nowait, ("closed", None))

    @staticmethod
    def _stray(stream: Any, loop: asyncio.AbstractEventLoop, inbox: asyncio.Queue[Any]) -> None:
        for chunk in iter(lambda: stream.read1(4096) if hasattr(stream, "read1") else stream.read(4096), b""):
            loop.call_soon_threadsafe(inbox.put_nowait, ("stray", chunk.decode("utf-8", "replace")))


class _Replies:
    """Answers the child's binding calls: each id at most once, unknown names refused."""

    def __init__(self, child: subprocess.Popen[bytes], bindings: dict[str, Binding]) -> None:
        self._child = child
        self._bindings = bindings
        self._seen: set[Any] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False

    def dispatch(self, message: dict[str, Any]) -> None:
        call_id, name = message.get("id"), message.get("name")
        if not isinstance(call_id, int) or isinstance(call_id, bool) or call_id in self._seen:
            return  # forged or duplicate: dropped
        self._seen.add(call_id)
        binding = self._bindings.get(name) if isinstance(name, str) else None
        if binding is None:
            self._answer(call_id, False, f'unknown binding "tools.{name}"')
            return
        task = asyncio.get_running_loop().create_task(self._call(call_id, binding, message.get("args")))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _call(self, call_id: int, binding: Binding, args: Any) -> None:
        try:
            value = await binding(args)
        except Exception as exc:
            self._answer(call_id, False, str(exc))
            return
        self._answer(call_id, True, value if isinstance(value, str) else str(value))

    def _answer(self, call_id: int, ok: bool, value: str) -> None:
        if self._closed:
            return  # replies after settlement are dropped
        try:
            _write(self._child, {"t": "reply", "id": call_id, "ok": ok, ("value" if ok else "error"): value})
        except (BrokenPipeError, OSError, ValueError):
            pass

    def close(self) -> None:
        # In-flight binding calls are not cancelled: their owner (the Code Mode bridge)
        # aborts them through the run's signal and drains them; their replies are dropped.
        self._closed = True


def _done(message: dict[str, Any], ledger: _Ledger, config: CodeRuntimeConfig) -> RunResult:
    cap = int(config.max_value_bytes)
    error = message.get("error")
    value = message.get("value")
    value = _cap(value, cap) if isinstance(value, str) else None
    if isinstance(error, dict) and error.get("kind") in ("exception", "timeout", "abort", "worker-exit"):
        return RunResult(ledger.logs, value, RunError(error["kind"], _cap(str(error.get("message", "")), cap)))
    return RunResult(ledger.logs, value)


def _cap(text: str, cap: int) -> str:
    marker = "… [truncated]"
    data = text.encode("utf-8")
    if len(data) <= cap + len(marker.encode("utf-8")):
        return text
    return data[:cap].decode("utf-8", "ignore") + marker


def _write(child: subprocess.Popen[bytes], message: dict[str, Any]) -> None:
    payload = msgpack.packb(message, use_bin_type=True)
    assert child.stdin is not None
    child.stdin.write(struct.pack(">I", len(payload)) + payload)
    child.stdin.flush()


def _read_exact(stream: Any, size: int) -> bytes | None:
    data = b""
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _discard(spawned: tuple[subprocess.Popen[bytes], int, str]) -> None:
    child, read_end, workdir = spawned
    _kill(child)
    os.close(read_end)
    shutil.rmtree(workdir, ignore_errors=True)


def _kill(child: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(child.pid, signals.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        child.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    for stream in (child.stdin, child.stdout, child.stderr):
        try:
            if stream is not None:
                stream.close()
        except OSError:
            pass
