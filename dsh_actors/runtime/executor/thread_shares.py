"""The threads plain (synchronous) tool bodies run on, shared out by agent.

An executor serves every agent on its node, and a plain body runs on a thread of its
pool. A body that ignores its deadline keeps its thread until it returns, whatever its
call became (timed out, cancelled, its caller gone): measured on one pool, 70 such bodies
of one agent held every thread, and every other agent's plain calls on the node waited
until their own deadlines. So each agent holds at most a share of the pool (more of its
bodies wait for one of its own threads), and a thread goes back to its agent's share only
when its body has really returned: one agent's stuck bodies cost that agent alone.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
from typing import Any, Callable

__all__ = ["SHARE_OF_POOL", "ThreadShares"]

SHARE_OF_POOL = 8
"""An agent may hold one in this many of a pool's threads (4 of 32): a batch episode's
calls run one at a time, so an agent that needs more is one whose bodies are stuck."""


class ThreadShares:
    """A thread pool of ``threads``, each agent holding at most ``share`` of them."""

    def __init__(self, threads: int, share: int | None = None, name: str = "dsh-body") -> None:
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)
        self.share = share if share is not None else max(1, threads // SHARE_OF_POOL)
        self._held: dict[str | None, int] = {}
        self._waiting: dict[str | None, collections.deque[asyncio.Future[None]]] = {}

    def runner(self, agent: str | None) -> Callable[[Callable[[], Any]], Any]:
        """What runs ``agent``'s plain bodies (:data:`~dsh_actors.core.body.BODY_RUNNER`)."""
        return lambda fn: self.run(agent, fn)

    def held(self, agent: str | None) -> int:
        """Threads ``agent``'s bodies hold now (returned or not, their calls may be over)."""
        return self._held.get(agent, 0)

    async def run(self, agent: str | None, fn: Callable[[], Any]) -> Any:
        """``fn()`` on a thread of ``agent``'s share, once one is free."""
        await self._take(agent)
        loop = asyncio.get_running_loop()
        try:
            future = self.pool.submit(fn)
        except BaseException:
            self._give(agent)
            raise
        future.add_done_callback(lambda _: _call_soon(loop, self._give, agent))  # when the body returned
        return await asyncio.wrap_future(future)

    async def _take(self, agent: str | None) -> None:
        if self._held.get(agent, 0) < self.share:
            self._held[agent] = self._held.get(agent, 0) + 1
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.setdefault(agent, collections.deque()).append(turn)
        try:
            await turn  # handed a thread of this agent's share (the count stays taken)
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                self._give(agent)  # handed over as the wait was cancelled: pass it on
            else:
                self._waiting[agent].remove(turn)
            raise

    def _give(self, agent: str | None) -> None:
        waiting = self._waiting.get(agent)
        while waiting:
            turn = waiting.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self._waiting.pop(agent, None)
        left = self._held.get(agent, 0) - 1
        if left > 0:
            self._held[agent] = left
        else:
            self._held.pop(agent, None)


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the loop is closed: nothing waits on this pool any more
        pass
