"""Where a plain (synchronous) tool body runs: inline, or wherever the host says.

A synchronous body called on an event loop would stop every other call sharing that
loop. A host that runs many calls on one loop (an executor actor) sets
:data:`BODY_RUNNER` to a function that runs a plain callable elsewhere (a bounded thread
pool) and returns an awaitable of its value; :func:`run_body` is how the pipeline and
the tool builders call a body. Without a runner, a plain body runs inline (one call per
loop, as in a test or a single-call task).
"""

from __future__ import annotations

import functools
import inspect
from contextvars import ContextVar
from typing import Any, Awaitable, Callable

from .boundary import carry
from .progress import sink_for_thread

__all__ = ["BODY_RUNNER", "run_body"]

BODY_RUNNER: ContextVar[Callable[[Callable[[], Any]], Awaitable[Any]] | None] = ContextVar(
    "dsh_actors_body_runner", default=None)


async def run_body(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``'s value: a coroutine function is awaited here; a plain
    function goes to the host's runner when one is set. An awaitable it returns is
    awaited here either way."""
    runner = BODY_RUNNER.get()
    if runner is None or inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None)):
        value = fn(*args, **kwargs)
    else:
        value = await runner(carry(sink_for_thread(functools.partial(fn, *args, **kwargs))))
    return await value if inspect.isawaitable(value) else value
