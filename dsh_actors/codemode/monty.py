"""The Monty backend: programs in a Python subset interpreted by Monty (pydantic-monty).

Monty is an interpreter written in Rust for model-written code. A program there has no
file system, network, processes, environment or host modules at all — the only way out
is the ``tools`` bindings — and it runs in ``monty`` worker processes, so even an
interpreter crash stays out of the host. It is the fallback where the host lacks the CPython
sandbox's walls; :data:`DIALECT` (the SDK's language text) says exactly what it runs.

One pool of workers serves the whole process (:class:`_Workers`, on an event loop thread of
its own): at most ``max_workers`` workers however many runs and runtimes there are, each
with an address-space backstop over its heap budget, and closed cleanly before the
interpreter exits. Each run checks a worker out with its limits (execution time, heap),
feeds one snippet — a small prelude defining ``tools``, the program as the body of an async
function, and an epilogue that renders the returned value *inside Monty*, cut to the value
cap, so the host never receives or renders more — and returns the worker; a cancelled,
aborted or timed-out feed kills its worker.

The host side is bounded as on the CPython backend (:mod:`~dsh_actors.codemode.bounds`): a
binding serialises its arguments inside Monty and the host admits the call on its size
before parsing it; printed chunks are assembled under the log budget; the host CPU spent
on the run's prints and calls counts against its compute budget beside Monty's own clock.

An error about something CPython has (a module, attribute or builtin Monty lacks, a syntax
it does not support) carries the dialect note; such a program, when no sub-call has started
yet, runs again on the CPython sandbox if this host can run it (``retry_unsupported``).
"""

from __future__ import annotations

import asyncio
import atexit
import builtins
import concurrent.futures
import io
import os
import re
import resource
import sys
import threading
import time
import tokenize
from pathlib import Path
from typing import Any, Callable, Mapping

from ..core.signal import AbortSignal
from ._child import render_text
from .bounds import CallGate, HostMeter, Ledger, LogLines, arguments_for, cap_error, cap_value
from .contract import Binding, CodeRuntime, CodeRuntimeConfig, RunError, RunResult, check_run

__all__ = ["DIALECT", "MontyRuntime"]

DIALECT = (
    "Monty, a subset of Python 3 (not CPython). It runs: functions, closures, lambdas, decorators on functions, "
    "async/await with asyncio.gather and asyncio.sleep, comprehensions and generator expressions consumed by "
    "sum/min/max/sorted/list, f-strings, try/except/finally, with, match, the walrus operator, simple classes "
    "(no base classes) and @dataclass, and the modules asyncio, base64, binascii, bisect, collections, copy, csv, "
    "dataclasses, datetime, decimal, functools, hashlib, itertools, json, math, random, re, time, typing and "
    "unicodedata. It does NOT run: class inheritance (so no custom exception classes, Enum, NamedTuple or ABC), "
    "@property/@classmethod/@staticmethod, special methods such as __len__, yield and generators, next() on a "
    "generator expression, del, bound methods or unbound str methods as values (write key=lambda k: d[k], not "
    "key=d.get), async with, asyncio beyond gather and sleep (no Lock, Semaphore, Queue, create_task, wait_for, "
    "as_completed), and the modules io, statistics, string, operator, textwrap, heapq, difflib, uuid, urllib, "
    "html, shlex, pprint; no files, network or processes"
)
"""What the SDK text tells the model it writes (checked against Monty by the test suite)."""

_PRELUDE = '''\
__dsh_flight__ = [0, 0]
__dsh_no_json__ = ("function", "builtin_function_or_method", "method", "type")  # Monty has no callable()


class tools:
    def __init__(self, names):
        for name in names:
            setattr(self, name, self[name])

    def __getitem__(self, name):
        async def binding(*args, **kwargs):
            if args and kwargs or len(args) > 1:
                raise TypeError("tools." + name + "() takes keyword arguments or one arguments dict")
            value = args[0] if args else kwargs
            if type(value).__name__ in __dsh_no_json__:
                raise TypeError("tool arguments must be JSON-serializable (got a value JSON cannot represent)")
            try:
                text = json.dumps(value, allow_nan=False)
            except Exception as exc:
                raise TypeError("tool arguments must be JSON-serializable: " + str(exc))
            size = len(text)
            if size > __dsh_max_arg__:
                return await __dsh_call__(name, None, size, "ARGS_TOO_LARGE")
            if __dsh_flight__[0] >= __dsh_max_calls__:
                return await __dsh_call__(name, None, size, "TOO_MANY_CALLS")
            if __dsh_flight__[1] + size > __dsh_max_bytes__:
                return await __dsh_call__(name, None, size, "TOO_MANY_BYTES")
            __dsh_flight__[0] += 1
            __dsh_flight__[1] += size
            try:
                return await __dsh_call__(name, text, 0, None)
            finally:
                __dsh_flight__[0] -= 1
                __dsh_flight__[1] -= size
        return binding


tools = tools(__dsh_names__)
'''
_HEAD = "import json\nasync def __dsh_program__(tools):\n"
_EPILOGUE = '''\
async def __dsh_render__():
    value = await __dsh_program__(tools)
    if value is None:
        return None
    if isinstance(value, str):
        return value[:__dsh_cap__]
    try:
        text = repr(value)
    except Exception as exc:
        return "<" + type(value).__name__ + " that cannot be shown: " + type(exc).__name__ + ": " + str(exc) + ">"
    if len(text) <= __dsh_small__:
        return [value]
    return text[:__dsh_cap__]
await __dsh_render__()
'''
_OFFSET = _PRELUDE.count("\n") + _HEAD.count("\n")  # program line 1 is the line after these
_DIALECT_NOTE = "this sandbox runs Monty, a subset of Python"
_REFUSALS = ("ARGS_TOO_LARGE", "TOO_MANY_CALLS", "TOO_MANY_BYTES")
_SMALL = 16 * 1024  # a value whose repr is at most this long comes back as a value, pretty-printed by the host
_TYPES = {name: kind for name, kind in vars(builtins).items() if isinstance(kind, type)}


def indent_body(program: str) -> str:
    """The program indented into a function body, leaving the inside of multi-line
    strings as written (textual indentation would change their contents)."""
    lines = program.splitlines(keepends=True) or ["pass\n"]
    keep: set[int] = set()  # 0-based lines that continue a multi-line string
    try:
        for token in tokenize.generate_tokens(io.StringIO(program).readline):
            if token.type == tokenize.STRING and token.end[0] > token.start[0]:
                keep.update(range(token.start[0], token.end[0]))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass  # Monty reports the syntax error itself
    out = [line if index in keep else "    " + line for index, line in enumerate(lines)]
    if not out[-1].endswith("\n"):
        out[-1] += "\n"
    return "".join(out)


def cpython_has(message: str) -> str | None:
    """What a Monty error names that CPython has (``None``: nothing we can tell), for the note."""
    if message.startswith(("NotImplementedError", "SyntaxError")):
        return "this syntax"
    if (found := re.match(r"ModuleNotFoundError: No module named '([\w.]+)'", message)) is not None:
        top = found.group(1).split(".")[0]
        return f"the module {found.group(1)}" if top in sys.stdlib_module_names else None
    if (found := re.match(r"AttributeError: (?:'(\w+)' object|type object '(\w+)') has no attribute '(\w+)'",
                          message)) is not None:
        kind = _TYPES.get(found.group(1) or found.group(2))
        return f"{kind.__name__}.{found.group(3)}" if kind is not None and hasattr(kind, found.group(3)) else None
    if (found := re.match(r"AttributeError: module '([\w.]+)' has no attribute '(\w+)'", message)) is not None:
        module = sys.modules.get(found.group(1))
        if module is None and found.group(1).split(".")[0] in sys.stdlib_module_names:
            return f"{found.group(1)}.{found.group(2)}"  # a stdlib module this process has not imported
        return f"{found.group(1)}.{found.group(2)}" if module is not None and hasattr(module, found.group(2)) else None
    if (found := re.match(r"NameError: name '(\w+)' is not defined", message)) is not None:
        return f"the builtin {found.group(1)}" if hasattr(builtins, found.group(1)) else None
    return None


class _Workers:
    """The process's one pool of Monty workers, on an event loop thread of its own.

    One pool for every runtime and every event loop in the process, so ``max_workers`` holds
    however many runs there are. Its loop thread lives until the interpreter exits; an
    ``atexit`` hook closes the pool while every thread is still alive (a Monty thread that
    calls into Python during finalisation would abort the process).
    """

    _lock = threading.Lock()
    _instance: "_Workers | None" = None

    def __init__(self, max_workers: int) -> None:
        from pydantic_monty import AsyncMonty, _binary

        self.max_workers = max_workers
        self.binary = os.path.realpath(_binary.find_monty_binary())
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="dsh-monty", daemon=True)
        self._thread.start()
        self._address_space = 0
        self._limited: set[int] = set()

        async def open_pool() -> Any:
            pool = AsyncMonty(min_processes=1, max_processes=max_workers)
            await pool.__aenter__()
            return pool

        self.pool = asyncio.run_coroutine_threadsafe(open_pool(), self.loop).result(120)
        atexit.register(self.shutdown)

    @classmethod
    def get(cls, max_workers: int) -> "_Workers":
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls(max_workers)
            return cls._instance

    def submit(self, coroutine: Any) -> "concurrent.futures.Future[Any]":
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def bound_workers(self, heap_bytes: int) -> None:
        """An address-space backstop on every worker, over the largest heap budget asked
        for (Monty bounds the heap itself; this bounds whatever it does not count)."""
        self._address_space = max(self._address_space, heap_bytes + (512 << 20))
        for pid in _children_running(self.binary):
            if pid not in self._limited:
                try:
                    resource.prlimit(pid, resource.RLIMIT_AS, (self._address_space, self._address_space))
                    self._limited.add(pid)
                except (ProcessLookupError, PermissionError, OSError):
                    pass

    def shutdown(self) -> None:
        with _Workers._lock:
            if _Workers._instance is self:
                _Workers._instance = None
        try:
            asyncio.run_coroutine_threadsafe(self.pool.__aexit__(None, None, None), self.loop).result(10)
        except Exception:  # noqa: BLE001 - at exit: whatever state the pool is in, go on
            pass
        time.sleep(0.05)  # its threads deliver their last wake-ups while the interpreter still runs
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def _children_running(binary: str) -> list[int]:
    """This process's child processes running ``binary``."""
    found = []
    me = os.getpid()
    for children in Path(f"/proc/{me}/task").glob("*/children"):
        try:
            pids = children.read_text().split()
        except OSError:
            continue
        for pid in pids:
            try:
                if os.readlink(f"/proc/{pid}/exe") == binary:
                    found.append(int(pid))
            except OSError:
                continue
    return found


class MontyRuntime:
    """Runs programs in Monty workers (see the module docs). ``fallback`` makes the CPython
    runtime that a program Monty cannot run, before any sub-call, runs on instead."""

    language = "python"
    dialect = DIALECT
    isolation = "monty-interpreter+worker-process"

    def __init__(self, config: CodeRuntimeConfig | None = None, *,
                 fallback: Callable[[], CodeRuntime | None] | None = None) -> None:
        import pydantic_monty  # noqa: F401 - fail at construction when it is not installed

        self.config = config or CodeRuntimeConfig(backend="monty")
        self._fallback = fallback
        self._fallback_runtime: CodeRuntime | None = None
        self._closed = False
        self._runs: set["concurrent.futures.Future[Any]"] = set()

    def close(self) -> None:
        """Dispose: later runs raise; in-flight runs end as aborted (the process's workers
        serve other runtimes and end at exit)."""
        self._closed = True
        for run in list(self._runs):
            run.cancel()
        if self._fallback_runtime is not None:
            self._fallback_runtime.close()

    async def run(self, program: str, bindings: Mapping[str, Binding],
                  signal: AbortSignal | None = None) -> RunResult:
        """Run ``program`` (the body of an async function with ``tools`` in scope)."""
        if (early := check_run(self._closed, program, bindings, signal)) is not None:
            return early
        run = _Run(self.config, asyncio.get_running_loop(), dict(bindings))
        result = await self._supervise(program, run, signal)
        if run.retry_on_cpython and self._fallback is not None and not self._closed:
            if self._fallback_runtime is None:
                self._fallback_runtime = self._fallback()
            if self._fallback_runtime is not None:
                return await self._fallback_runtime.run(program, bindings, signal)
        return result

    async def _supervise(self, program: str, run: "_Run", signal: AbortSignal | None) -> RunResult:
        config = self.config
        try:
            workers = _Workers.get(int(config.max_workers))
        except Exception as exc:  # noqa: BLE001 - no pool could start: the run's result, never a raise
            return RunResult(error=RunError("worker-exit", f"monty workers could not start: {exc}"))
        feed = workers.submit(run.feed(program, workers))
        self._runs.add(feed)
        outcome = asyncio.wrap_future(feed)
        started = time.monotonic()
        compute_s = config.compute_ms / 1000
        try:
            while True:
                if signal is not None and signal.aborted:
                    return run.failed(RunError("abort", str(signal.reason)))
                if self._closed:
                    return run.failed(RunError("abort", "runtime disposed"))
                left = started + config.max_wall_ms / 1000 - time.monotonic()
                if left <= 0:
                    return run.failed(RunError("timeout", f"wall-clock ceiling reached ({int(config.max_wall_ms)}ms)"))
                if run.meter.used_s > compute_s:  # Monty's clock stops this itself; the host's work is ours to stop
                    return run.failed(RunError("timeout", f"compute budget exhausted ({int(run.meter.used_s * 1000)}ms "
                                                          "busy on the host)"))
                done, _ = await asyncio.wait({outcome}, timeout=min(0.025, left))
                if done:
                    break
        except asyncio.CancelledError:
            feed.cancel()
            raise
        finally:
            self._runs.discard(feed)
            if not feed.done():
                feed.cancel()  # the worker running it is killed and replaced by the pool
        if outcome.cancelled():
            return run.failed(RunError("abort", "runtime disposed"))
        if outcome.exception() is not None:
            return run.failed(RunError("worker-exit", cap_error(f"monty: {outcome.exception()}",
                                                                int(config.max_value_bytes))))
        return outcome.result()  # type: ignore[no-any-return]


class _Run:
    """One run's host side: its bindings, budgets and log, touched on the workers' loop."""

    def __init__(self, config: CodeRuntimeConfig, caller: asyncio.AbstractEventLoop,
                 bindings: dict[str, Binding]) -> None:
        self.config, self.caller, self.bindings = config, caller, bindings
        self.ledger = Ledger(int(config.max_log_bytes))
        self.lines = LogLines(self.ledger)
        self.meter = HostMeter()
        self.gate = CallGate(config)
        self.calls_started = 0
        self.retry_on_cpython = False

    def failed(self, error: RunError) -> RunResult:
        return RunResult(list(self.ledger.logs), error=error)

    def printed(self, _stream: str, text: str) -> None:
        with self.meter.charge():
            self.lines.write(text if isinstance(text, str) else str(text))

    async def call(self, name: Any, text: Any, size: Any, why: Any = None) -> str:
        """A binding's call, arriving from the worker: admitted on its size before its
        arguments are parsed, then run by the caller's own loop."""
        with self.meter.charge():
            binding = self.bindings.get(name) if isinstance(name, str) else None
            if binding is None:
                raise AttributeError(f'unknown binding "tools.{name}"')
            if not isinstance(text, str):  # the prelude's notice of a call it may not send, or a forged one
                size = size if isinstance(size, int) and not isinstance(size, bool) else 0
                raise RuntimeError(self.gate.text(why if why in _REFUSALS else "ARGS_TOO_LARGE", name, size))
            size = len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))
            refusal = self.gate.admit(name, size)
            if refusal is not None:
                raise RuntimeError(refusal)
        self.calls_started += 1
        try:
            args = arguments_for(binding, text, self.meter)
            answer: Any = await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_awaited(binding(args)),
                                                                                  self.caller))
        except Exception as exc:
            refusal = self.gate.result_refusal(name, str(exc))  # an error text is bounded like a result
            if refusal is not None:
                raise RuntimeError(refusal) from None
            raise
        finally:
            self.gate.done(size)
        answer = answer if isinstance(answer, str) else str(answer)
        refusal = self.gate.result_refusal(name, answer)
        if refusal is not None:
            raise RuntimeError(refusal)
        return answer

    async def feed(self, program: str, workers: _Workers) -> RunResult:
        """On the workers' loop: one checkout, one snippet, the result (never raises but
        for cancellation)."""
        from pydantic_monty import MontyError, MontyRuntimeError, MontySyntaxError

        config = self.config
        snippet = _PRELUDE + _HEAD + indent_body(program) + _EPILOGUE
        limits = {"max_feed_duration_secs": config.compute_ms / 1000, "max_memory": int(config.max_memory_mb) * 2**20,
                  "max_suspensions": 100_000}
        inputs = {"__dsh_names__": sorted(self.bindings), "__dsh_cap__": int(config.max_value_bytes) + 64,  # cut by the host
                  "__dsh_small__": min(int(config.max_value_bytes), _SMALL), "__dsh_max_arg__": int(config.max_arg_bytes),
                  "__dsh_max_calls__": int(config.max_calls_in_flight), "__dsh_max_bytes__": int(config.max_bytes_in_flight)}
        try:
            async with workers.pool.checkout(limits=limits) as session:
                workers.bound_workers(int(config.max_memory_mb) * 2**20)
                value = await session.feed_run(snippet, inputs=inputs, external_lookup={"__dsh_call__": self.call},
                                               print_callback=self.printed)
        except (MontyRuntimeError, MontySyntaxError) as exc:
            self.lines.flush()
            return RunResult(list(self.ledger.logs), error=self._failure(exc))
        except MontyError as exc:  # the worker died (memory, crash): the pool replaces it
            self.lines.flush()
            return self.failed(RunError("worker-exit", cap_error(f"monty worker: {exc}", int(config.max_value_bytes))))
        except Exception as exc:  # noqa: BLE001 - anything else Monty raises is still a result
            self.lines.flush()
            return self.failed(RunError("worker-exit", cap_error(f"monty: {type(exc).__name__}: {exc}",
                                                                 int(config.max_value_bytes))))
        self.lines.flush()
        if isinstance(value, list) and len(value) == 1:  # a small value (its repr is short): rendered as CPython's is
            with self.meter.charge():
                value = render_text(value[0])
        elif value is not None and not isinstance(value, str):  # only the epilogue's shapes come back
            value = f"<a {type(value).__name__} value>"
        return RunResult(list(self.ledger.logs), None if value is None else cap_value(value, int(config.max_value_bytes)))

    def _failure(self, exc: Any) -> RunError:
        kind_and_message = cap_error(exc.display("type-msg"), 4 * int(self.config.max_value_bytes))
        if kind_and_message.startswith("TimeoutError: feed time limit"):
            return RunError("timeout", f"compute budget exhausted ({int(self.config.compute_ms)}ms busy)")
        frames = []
        for frame in getattr(exc, "traceback", lambda: [])():
            line = frame.line - _OFFSET
            if line >= 1 and frame.function_name not in ("<module>", "__dsh_render__"):
                frames.append(f"  line {line}, in program")
                if frame.source_line:
                    frames.append(f"    {frame.source_line.strip()}")
        text = "\n".join((["Traceback (most recent call last):"] + frames if frames else []) + [kind_and_message])
        known = cpython_has(kind_and_message)
        if known is not None:
            text += (f"\n({_DIALECT_NOTE}: {known} exists in CPython but not here; rewrite the program "
                     "without it)")
            self.retry_on_cpython = self.calls_started == 0 and self.config.retry_unsupported
        return RunError("exception", cap_error(text, 4 * int(self.config.max_value_bytes)))
