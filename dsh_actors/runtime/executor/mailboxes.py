"""The executor's side of call batches: each batched call's outcome, kept for its caller.

:class:`Mailboxes` runs each call of an ``execute_batch`` as a task and keeps its outcome
for the caller's next ``collect`` (:mod:`.lanes` is the caller's side); outcomes nobody
collected for :data:`KEEP_S` (their caller died) are dropped. ``incarnation`` names this
executor process: a caller that polls with another one learns its calls are not here
(they died with an earlier process). Plain asyncio: tests drive it without Ray.
"""

from __future__ import annotations

import asyncio
import functools
import time
from typing import Awaitable, Callable

from ...core.errors import error_result
from ...core.within import within
from ..errors import translate
from ..wire import PROCESS_INCARNATION, Outcome

__all__ = ["KEEP_S", "Mailboxes", "task_outcome"]

KEEP_S = 300.0
"""How long an executor keeps outcomes for a caller that stopped collecting (it died)."""

_GATHER_TURNS = 8


def task_outcome(done: "asyncio.Task[bytes]") -> bytes:
    """The wire outcome of a finished call task that has no actor task of its own to
    raise through: its outcome, *cancelled*, or the failure that stopped it."""
    if done.cancelled():
        return Outcome.CANCELLED
    exc = done.exception()
    if exc is not None:
        return Outcome.failed(error_result(translate(exc, what="the call")))
    return done.result()


class _Mailbox:
    __slots__ = ("ready", "running", "woken", "polled_at", "polling")

    def __init__(self, now: float) -> None:
        self.ready: list[tuple[int, bytes]] = []
        self.running: dict[int, asyncio.Task[bytes]] = {}
        self.woken = asyncio.Event()
        self.polled_at = now
        self.polling = 0


class Mailboxes:
    """Batched calls on an executor and their outcomes, per caller (see the module docs).

    ``incarnation`` is this executor process's id: a caller that polls with another one
    learns its calls are not here (they died with an earlier process).
    """

    def __init__(self, *, keep_s: float = KEEP_S, clock: Callable[[], float] = time.monotonic,
                 incarnation: str = PROCESS_INCARNATION) -> None:
        self.incarnation = incarnation
        self._boxes: dict[str, _Mailbox] = {}
        self._keep_s, self._clock = keep_s, clock
        self._swept = clock()

    def _box(self, client: str) -> _Mailbox:
        box = self._boxes.get(client)
        if box is None:
            box = self._boxes[client] = _Mailbox(self._clock())
        return box

    def start(self, client: str, calls: list[tuple[int, Awaitable[bytes]]]) -> str:
        """Start each ``(key, outcome coroutine)`` of ``client`` as a task; its outcome
        (or *cancelled*, or the failure that stopped it) waits in the mailbox."""
        self._sweep()
        box = self._box(client)
        for key, outcome in calls:
            task = asyncio.ensure_future(outcome)
            box.running[key] = task
            task.add_done_callback(functools.partial(self._finished, box, key))
        return self.incarnation

    def _finished(self, box: _Mailbox, key: int, done: "asyncio.Task[bytes]") -> None:
        box.running.pop(key, None)
        box.ready.append((key, task_outcome(done)))
        box.woken.set()

    async def collect(self, client: str, incarnation: str, wait_s: float) -> list[tuple[int, bytes]] | None:
        """``client``'s outcomes ready now — waiting up to ``wait_s`` for the first one;
        ``None`` when ``incarnation`` is not this executor's."""
        if incarnation != self.incarnation:
            return None
        box = self._box(client)
        box.polling += 1
        try:
            if not box.ready:
                box.woken.clear()
                try:
                    await within(box.woken.wait(), wait_s)
                except asyncio.TimeoutError:
                    pass
                for _ in range(_GATHER_TURNS):  # while results keep arriving, let them join this answer
                    count = len(box.ready)
                    await asyncio.sleep(0)
                    if len(box.ready) == count:
                        break
        finally:
            box.polling -= 1
            box.polled_at = self._clock()
        ready, box.ready = box.ready, []
        return ready

    def cancel(self, client: str, keys: list[int]) -> None:
        """Cancel ``client``'s calls ``keys`` (each answers *cancelled* unless it finished)."""
        box = self._boxes.get(client)
        for key in keys:
            task = box.running.get(key) if box is not None else None
            if task is not None:
                task.cancel()

    def _sweep(self) -> None:
        """Drop the outcomes of callers that stopped collecting :data:`KEEP_S` ago."""
        now = self._clock()
        if now - self._swept < min(self._keep_s, 10.0):
            return
        self._swept = now
        for client, box in list(self._boxes.items()):
            if not box.polling and now - box.polled_at > self._keep_s:
                box.ready.clear()
                if not box.running:
                    del self._boxes[client]

    def __len__(self) -> int:
        """How many callers have a mailbox here."""
        return len(self._boxes)
