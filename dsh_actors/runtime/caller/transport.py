"""How a call's envelope reaches the executor that runs it: one seam, two sides.

Either side's ``send`` returns a handle to ``await`` for the executor's outcome bytes (or
the error that stopped the call on the way) and to :meth:`cancel` from any thread:

- :class:`RemoteTransport`: an executor's channel when it runs on this node, else an actor
  task — alone, or batched with the other calls this event loop has in flight there
  (:mod:`.lanes`).
- :class:`LocalTransport`: the executor this very event loop belongs to (a Code Mode
  sub-call sent by its run, in the run's executor): the same envelope, plan and outcome,
  with no Ray hop, and the caller's signal passed as it is. An executor registers its
  side with its registry's owner in the process when it starts serving.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from typing import Any, Awaitable, Callable, Protocol

from ...core.signal import AbortSignal
from ..wire import Outcome
from .lanes import Lanes, SentCall

__all__ = ["LocalCall", "LocalTransport", "RemoteTransport", "Sent"]


class Sent(Protocol):
    """A call on its way: await it for the outcome's bytes; cancel it from any thread."""

    def __await__(self) -> Any: ...

    def cancel(self) -> None: ...


class RemoteTransport:
    """Lanes to executors, per event loop (a process may run calls from several: a
    driver's own loop and the background one)."""

    def __init__(self) -> None:
        self._lanes: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Lanes]" = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def send(self, executor: Any, envelope: bytes, plan_box: Any, hub: Any) -> SentCall:
        loop = asyncio.get_running_loop()
        lanes = self._lanes.get(loop)
        if lanes is None:
            with self._lock:
                self._forget_closed_loops()
                lanes = self._lanes.setdefault(loop, Lanes(loop))
        return lanes.send(executor, envelope, plan_box, hub)

    def streams_to(self, executor: Any) -> bool:
        """Whether this loop's calls to ``executor`` go on its open channel now."""
        lanes = self._lanes.get(asyncio.get_running_loop())
        return lanes is not None and lanes.streams_to(executor)

    def _forget_closed_loops(self) -> None:
        """A driver that calls ``asyncio.run`` again and again leaves closed loops behind:
        their lanes' channels are closed here, so sockets never pile up."""
        for loop in [loop for loop in self._lanes.keys() if loop.is_closed()]:
            self._lanes.pop(loop).discard()


class LocalCall:
    """A call run on this process's executor: a task of its loop. Cancelled there (an
    abort of its agent's calls) while its caller waits, it answers *cancelled*, as an
    actor task would."""

    __slots__ = ("task",)

    def __init__(self, task: "asyncio.Task[bytes]") -> None:
        self.task = task

    def __await__(self) -> Any:
        return self._outcome().__await__()

    async def _outcome(self) -> bytes:
        try:
            return await self.task
        except asyncio.CancelledError:
            waiting = asyncio.current_task()
            if self.task.cancelled() and (waiting is None or not waiting.cancelling()):
                return Outcome.CANCELLED
            raise  # its caller was cancelled (which cancels the call too)

    def cancel(self) -> None:
        self.task.get_loop().call_soon_threadsafe(self.task.cancel)


class LocalTransport:
    """The executor of this process that serves on ``loop`` (see the module docs)."""

    def __init__(self, run: Callable[[bytes, Any, AbortSignal | None], Awaitable[bytes]],
                 loop: asyncio.AbstractEventLoop) -> None:
        self._run, self.loop = run, loop

    def serves_running_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False

    def send(self, envelope: bytes, plan_box: Any, signal: AbortSignal | None) -> LocalCall:
        return LocalCall(asyncio.ensure_future(self._run(envelope, plan_box, signal)))
