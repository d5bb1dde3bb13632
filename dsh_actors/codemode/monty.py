"""The Monty backend: programs in a Python subset interpreted by Monty (pydantic-monty).

Monty is an interpreter written in Rust for model-written code. A program there has no
file system, network, processes, environment or host modules at all — the only way out
is the ``tools`` bindings — and it runs in a pool of ``monty`` worker processes, so even
an interpreter crash stays out of the host. A run costs about a millisecond.

Each run checks out a worker with the run's limits (execution time, heap), feeds one
snippet (a small prelude that defines ``tools``, then the program as the body of an
async function), and returns the worker to the pool; a cancelled, aborted or timed-out
feed kills its worker. Budgets: ``compute_ms`` is Monty's own execution clock (it stops
while a binding call is pending), ``max_wall_ms`` the run's wall clock, ``max_memory_mb``
the heap; logs and the value are capped like the CPython backend's.

Where the subset refuses a program (``yield``, a module it does not have, …) the run
fails with an ``exception`` naming what is unsupported and saying the language is Monty.
"""

from __future__ import annotations

import asyncio
import io
import json
import tokenize
import weakref
from typing import Any, Mapping

from ..core.signal import AbortSignal
from ._child import render_text
from .runtime import DIALECTS, Binding, CodeRuntimeConfig, check_run, Ledger, RunError, RunResult, cap_error, cap_value

__all__ = ["MontyRuntime"]

_PRELUDE = '''\
class tools:
    def __init__(self, names):
        for name in names:
            setattr(self, name, self[name])

    def __getitem__(self, name):
        async def binding(*args, **kwargs):
            return await __dsh_call__(name, args, kwargs)
        return binding


tools = tools(__dsh_names__)
'''
_HEAD = "async def __dsh_program__(tools):\n"
_OFFSET = _PRELUDE.count("\n") + 1  # program line 1 is this line of the fed snippet
_UNSUPPORTED = ("NotImplementedError", "ModuleNotFoundError", "SyntaxError")
_DIALECT_NOTE = "this sandbox runs Monty, a subset of Python"


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


class _Lines:
    """Monty's print chunks as log lines, one per line, in order."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.pending = ""

    def __call__(self, _stream: str, text: str) -> None:
        self.pending += text
        *lines, self.pending = self.pending.split("\n")
        for line in lines:
            self.ledger.add(line)

    def flush(self) -> None:
        if self.pending:
            line, self.pending = self.pending, ""
            self.ledger.add(line)


class MontyRuntime:
    """Runs programs in Monty workers (see the module docs)."""

    language = "python"
    dialect = DIALECTS["monty"]
    isolation = "monty-interpreter+worker-process"

    def __init__(self, config: CodeRuntimeConfig | None = None, *, max_workers: int = 8) -> None:
        import pydantic_monty  # noqa: F401 - fail at construction when it is not installed

        self.config = config or CodeRuntimeConfig()
        self.max_workers = max_workers
        self._pools: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any]" = weakref.WeakKeyDictionary()
        self._closed = False
        self._runs: set[asyncio.Task[Any]] = set()

    async def _pool(self) -> Any:
        """One worker pool per event loop (a pool's I/O belongs to the loop that made it)."""
        from pydantic_monty import AsyncMonty

        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            pool = AsyncMonty(min_processes=1, max_processes=self.max_workers)
            await pool.__aenter__()
            self._pools[loop] = pool
        return pool

    def close(self) -> None:
        """Dispose: later runs raise; in-flight runs end as aborted; the workers are ended."""
        self._closed = True
        for task in list(self._runs):
            task.cancel()
        for loop, pool in list(self._pools.items()):
            async def shut(pool: Any = pool) -> None:
                await pool.__aexit__(None, None, None)

            try:
                if loop.is_running():
                    asyncio.run_coroutine_threadsafe(shut(), loop)
                # a pool whose loop has stopped ends its workers when it is collected
            except RuntimeError:
                pass
        self._pools.clear()

    async def run(self, program: str, bindings: Mapping[str, Binding],
                  signal: AbortSignal | None = None) -> RunResult:
        """Run ``program`` (the body of an async function with ``tools`` in scope)."""
        if (early := check_run(self._closed, program, bindings, signal)) is not None:
            return early
        ledger = Ledger(int(self.config.max_log_bytes))
        task = asyncio.ensure_future(self._feed(program, dict(bindings), ledger))
        self._runs.add(task)
        stop: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def stopped(reason: Any) -> None:
            if not stop.done():
                stop.set_result(reason)

        unfollow = signal.add_listener(stopped) if signal else None
        try:
            done, _ = await asyncio.wait({task, stop}, timeout=self.config.max_wall_ms / 1000,
                                         return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            if self._closed:
                return RunResult(ledger.logs, error=RunError("abort", "runtime disposed"))
            raise
        finally:
            self._runs.discard(task)
            if unfollow is not None:
                unfollow()
        if task in done and not task.cancelled():
            return task.result()
        task.cancel()  # the worker running it is killed and replaced by the pool
        if stop in done:
            return RunResult(ledger.logs, error=RunError("abort", str(stop.result())))
        if self._closed:
            return RunResult(ledger.logs, error=RunError("abort", "runtime disposed"))
        return RunResult(ledger.logs, error=RunError("timeout", f"wall-clock ceiling reached ({int(self.config.max_wall_ms)}ms)"))

    async def _feed(self, program: str, bindings: dict[str, Binding], ledger: Ledger) -> RunResult:
        from pydantic_monty import MontyError, MontyRuntimeError, MontySyntaxError

        config = self.config
        lines = _Lines(ledger)

        async def call(name: Any, args: Any, kwargs: Any) -> str:
            binding = bindings.get(name) if isinstance(name, str) else None
            if binding is None:
                raise AttributeError(f'unknown binding "tools.{name}"')
            if args and kwargs or len(args) > 1:
                raise TypeError(f"tools.{name}() takes keyword arguments or one arguments dict")
            value = args[0] if args else dict(kwargs)
            try:
                text = json.dumps(value, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"tool arguments must be JSON-serializable: {exc}") from None
            answer = await binding(json.loads(text))
            return answer if isinstance(answer, str) else str(answer)

        snippet = _PRELUDE + _HEAD + indent_body(program) + "await __dsh_program__(tools)\n"
        limits = {"max_feed_duration_secs": config.compute_ms / 1000, "max_memory": int(config.max_memory_mb) * 2**20,
                  "max_suspensions": 100_000}
        pool = await self._pool()
        try:
            async with pool.checkout(limits=limits) as session:
                value = await session.feed_run(snippet, inputs={"__dsh_names__": sorted(bindings)},
                                               external_lookup={"__dsh_call__": call}, print_callback=lines)
        except (MontyRuntimeError, MontySyntaxError) as exc:
            lines.flush()
            return RunResult(ledger.logs, error=self._failure(exc))
        except MontyError as exc:  # the worker died (memory, crash): the pool replaces it
            lines.flush()
            return RunResult(ledger.logs, error=RunError("worker-exit", cap_error(f"monty worker: {exc}", config.max_value_bytes)))
        lines.flush()
        rendered = None if value is None else cap_value(render_text(value), int(config.max_value_bytes))
        return RunResult(ledger.logs, rendered)

    def _failure(self, exc: Any) -> RunError:
        kind_and_message = exc.display("type-msg")
        if kind_and_message.startswith("TimeoutError: feed time limit"):
            return RunError("timeout", f"compute budget exhausted ({int(self.config.compute_ms)}ms busy)")
        frames = []
        for frame in getattr(exc, "traceback", lambda: [])():
            line = frame.line - _OFFSET
            if line >= 1 and frame.function_name != "<module>":
                frames.append(f"  line {line}, in program")
                if frame.source_line:
                    frames.append(f"    {frame.source_line.strip()}")
        text = "\n".join((["Traceback (most recent call last):"] + frames if frames else []) + [kind_and_message])
        if kind_and_message.startswith(_UNSUPPORTED):
            text += f"\n({_DIALECT_NOTE}; rewrite the program without what it does not support)"
        return RunError("exception", cap_error(text, int(self.config.max_value_bytes) * 4))
