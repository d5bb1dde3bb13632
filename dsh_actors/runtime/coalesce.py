"""One rule for sending many small requests as few actor calls: what is added while a batch
is unanswered goes together in the next one.

An actor call costs about as much CPU whatever it carries, so under load requests should
share calls; with no load, none should wait. :class:`Coalescer` does both: the first item
goes on the loop's next turn (what the same turn added goes with it); items added while
that batch is being sent gather, and go as one batch the moment it is answered, so
batches grow with the load and shrink with it. The caller's call lanes
(:mod:`.lanes`) and the session log's appends (:mod:`.session`) both send through one.

Plain asyncio: no Ray.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable, Generic, TypeVar

__all__ = ["Coalescer"]

T = TypeVar("T")


class Coalescer(Generic[T]):
    """Items of one event loop to one destination. ``send(batch)`` is awaited once per
    batch, one batch at a time, in the order the items were added; if it raises,
    ``fail(batch, error)`` settles that batch and the next one goes on."""

    def __init__(self, send: Callable[[list[T]], Awaitable[None]],
                 fail: Callable[[list[T], Exception], None]) -> None:
        self._send, self._fail = send, fail
        self.queued: list[T] = []
        self.busy = False  # a batch is being sent, or the first is about to be

    def add(self, item: T) -> None:
        """Queue ``item``; it goes in the next batch."""
        self.queued.append(item)
        if not self.busy:
            self.busy = True
            asyncio.ensure_future(self._drain())

    def put_back(self, items: list[T]) -> None:
        """Queue ``items`` (from the batch being sent) first, in their order: they go next."""
        self.queued[:0] = items

    def remove(self, item: T) -> bool:
        """Take ``item`` out if it has not gone yet; whether it was still queued."""
        try:
            self.queued.remove(item)
        except ValueError:
            return False
        return True

    async def _drain(self) -> None:
        try:
            while self.queued:
                batch, self.queued = self.queued, []
                try:
                    await self._send(batch)
                except Exception as exc:  # noqa: BLE001 - its items hear it; the rest still go
                    self._fail(batch, exc)
        finally:
            self.busy = False
