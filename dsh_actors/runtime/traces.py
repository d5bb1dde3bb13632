"""Spans leave an actor before the actor is ended.

An actor whose process makes spans (an executor, a Code Mode queue, an episode runner)
holds the last seconds of them in its exporter's batch (:mod:`~dsh_actors.core.trace_export`),
and ``ray.kill`` — how a job ends its runners, and how a registry's executors and queues
end with it — runs no exit hook in that process: the batch dies with it. Measured before
this module: a whole ``dsh-actors eval`` run delivered no span to a collector. So whoever
ends such an actor first asks it to flush (:func:`flush_actors`): the actors' shared
:class:`FlushesSpans` method, under one short deadline, so a dead or slow actor costs the
end at most that.
"""

from __future__ import annotations

import asyncio
from typing import Any, Iterable

from ..core import trace_export
from ..core.within import within

__all__ = ["FlushesSpans", "flush_actors"]

_ANSWER_S = 1.0
"""How much longer than an actor's own flush deadline its caller waits (its answer travels)."""


class FlushesSpans:
    """An actor class whose process makes spans: Ray callers reach :meth:`flush_spans`."""

    async def flush_spans(self, timeout_s: float = trace_export.FLUSH_S) -> bool:
        """Export the spans this process holds, waiting ``timeout_s`` at most (off the event
        loop: the calls it serves meanwhile go on); whether every one went."""
        return await asyncio.to_thread(trace_export.flush, timeout_s)


async def flush_actors(handles: Iterable[Any], timeout_s: float = trace_export.FLUSH_S) -> None:
    """Have every actor of ``handles`` (each with ``flush_spans``) flush its spans, all at
    once; returns when each answered, or soon after ``timeout_s``. It never raises: an actor
    already dead took its spans with it, and one that does not answer in time is ended anyway."""
    asked = [handle.flush_spans.remote(timeout_s) for handle in handles]
    try:
        await within(asyncio.gather(*asked, return_exceptions=True), timeout_s + _ANSWER_S)
    except TimeoutError:
        pass
