"""Progress a tool body reports while it runs, heard by whoever listens where it runs.

A body calls ``ctx.report_progress(done, total, message)``. Whoever runs calls and wants
to hear it — the MCP gateway, for a client that asked for progress — sets a sink with
:func:`progress_to` around the call; the body hears ``True`` when someone listens, ``False``
when nobody does (no sink: it is dropped, and the body carries on the same). A sink
reaches the bodies that run in the process that set it: coroutines of the call, and plain
bodies on a worker thread (each gets the sink, and only it, in a context of its own). A
call that runs in another process (an executor actor, a body's own Ray task) carries its
reports back when its caller listens: the runtime sends such a call as a streaming task
(see the executor and the caller's lanes), and hands each report to :func:`listening`'s
sink as it arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import math
from typing import Any, AsyncIterable, AsyncIterator, Awaitable, Callable, Iterator

__all__ = ["ProgressSink", "Report", "Reports", "listening", "progress_to", "relay", "report_progress",
           "sink_for_thread"]

ProgressSink = Callable[[float, "float | None", "str | None"], None]
"""``(progress, total, message)``; called from the body's thread, so it must be thread-safe."""

Report = tuple[float, "float | None", "str | None"]
"""One report as it travels: ``(progress, total, message)``."""

_SINK: contextvars.ContextVar[ProgressSink | None] = contextvars.ContextVar("dsh_actors_progress", default=None)


@contextlib.contextmanager
def progress_to(sink: ProgressSink) -> Iterator[None]:
    """Within this block (and the tasks it starts), bodies' progress goes to ``sink``."""
    token = _SINK.set(sink)
    try:
        yield
    finally:
        _SINK.reset(token)


def listening() -> ProgressSink | None:
    """The sink this context's bodies report to (``None``: nobody listens), for a runtime
    that carries the reports of a call it sends elsewhere back to it."""
    return _SINK.get()


def report_progress(progress: float, total: float | None = None, message: str | None = None) -> bool:
    """Give the listening sink ``progress`` (of ``total``, if known) and ``message``;
    whether anyone listens. Raises ``TypeError``/``ValueError`` for values that are not
    finite numbers (or a message that is not a str)."""
    for name, value in (("progress", progress), ("total", total)):
        if value is None and name == "total":
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, not {value!r}")
    if message is not None and not isinstance(message, str):
        raise TypeError(f"message must be a str or None, not {type(message).__name__}")
    sink = _SINK.get()
    if sink is None:
        return False
    sink(float(progress), None if total is None else float(total), message)
    return True


def sink_for_thread(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` for a worker thread, hearing the caller's sink (if any) and nothing else of
    the caller's context."""
    sink = _SINK.get()
    if sink is None:
        return fn

    def run() -> object:
        _SINK.set(sink)
        return fn()

    return lambda: contextvars.Context().run(run)


class Reports:
    """Reports made from any thread, read in order on the loop that made this object.

    ``sink`` is the :data:`ProgressSink` to hand out; :meth:`during` reads what it was told
    while some work runs; after :meth:`close` the sink drops what it is told (its listener
    is gone)."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[Report] = asyncio.Queue()
        self._open = True

    def sink(self, progress: float, total: float | None, message: str | None) -> None:
        if self._open:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (progress, total, message))

    def close(self) -> None:
        self._open = False

    async def during(self, work: "asyncio.Future[Any]", idle_s: float | None = None) -> AsyncIterator[Report | None]:
        """Each report as it comes while ``work`` runs, then those made before it ended
        (a report is queued before whatever ends the work can be seen here); ``None``
        after each ``idle_s`` without one, for a reader that keeps its listener awake."""
        while not work.done():
            report = asyncio.ensure_future(self._queue.get())
            try:
                await asyncio.wait((work, report), timeout=idle_s, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not report.done():
                    report.cancel()  # (a report it was about to take stays queued)
            if report.done() and not report.cancelled():
                yield report.result()
            elif not work.done():
                yield None
        while not self._queue.empty():
            yield self._queue.get_nowait()


async def relay(stream: AsyncIterable[Awaitable[Any]], sink: ProgressSink) -> Any:
    """The first item of ``stream`` (a stream of awaitables, as a streaming Ray task's) that
    is not a report — reports are tuples, handed to ``sink`` on the way — or ``None`` if the
    stream ends first. A sink that raises is ignored: a deaf listener never stops a call."""
    async for awaitable in stream:
        item = await awaitable
        if not isinstance(item, tuple):
            return item
        try:
            sink(*item)
        except Exception:  # noqa: BLE001
            pass
    return None
