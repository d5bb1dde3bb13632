"""Which executor a call goes to: one on the caller's node, whenever one is alive there.

The registry's executors are pinned one to each node (at least two in all). A call goes
to an executor on the node of the process that makes it — its workspace, caches and
GPUs are there — and to an executor elsewhere only while none on its node is healthy;
it comes back as soon as one is again. (A tool that declares Ray options still has its
body placed where those are, by Ray.)

Calls made in one turn of an event loop go to the same executor (up to
:data:`TURN_CALLS`) so they travel as one batch; the next turn's go to the next local
executor. An executor that failed a call is avoided for :data:`SICK_S` while Ray
restarts it (calls sent to a restarting actor fail at once, and executions never retry);
when every candidate is avoided, a call first waits (up to :data:`REVIVAL_WAIT_S`) for a
probe that runs nothing and that Ray may retry to reach the restarted process. One that
died for good is reported with the next refresh of the routes: the registry replaces it
before it answers, so the refreshed routes never hold the dead one. An executor this
process's Ray already holds dead is never picked: it is reported at once, so a call made
after a death this process could know of is never sent to the dead one (the first pick
of an executor in a process asks it once whether it lives, which is what makes Ray follow
its state here).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from ...core.within import within
from ..errors import ChannelLost, died_for_good, held_dead, unfollowed
from ..local import this_node
from .link import RegistryLink

__all__ = ["REVIVAL_WAIT_S", "SICK_S", "TURN_CALLS", "ExecutorRoutes"]

SICK_S = 5.0
"""How long a process avoids an executor that just failed a call (Ray is restarting it)."""
REVIVAL_WAIT_S = 10.0
"""How long a call waits for a restarting executor when every candidate is restarting."""
_DEAD_PICKS = 3
"""How many executors one pick may find dead for good in a row (each one reported and
replaced by the registry before the next is chosen) before it gives the call the last."""
TURN_CALLS = 16
"""How many calls made in one turn of an event loop go to the same executor (so they
travel as one batch) before the next executor's turn."""


class ExecutorRoutes:
    """This process's routes to one registry's executors (see the module docs)."""

    def __init__(self, link: RegistryLink) -> None:
        self._link = link
        self._local: list[Any] = []  # executors on this process's node
        self._others: list[Any] = []
        self._incarnation = -1  # of the registry the handles came from
        self._node: str | None = None
        self._sick: dict[Any, float] = {}  # actor id -> avoided until (monotonic)
        self._probes: dict[Any, Any] = {}  # actor id -> ref of its revival probe (any loop may await it)
        self._asking: dict[Any, Any] = {}  # actor id -> the task asking whether it died for good
        self._dead: set[str] = set()  # executors seen dead for good, reported with the next refresh
        self._next = 0
        self._turn_executor: Any = None  # the executor of this loop turn (None: no turn open)
        self._turn_calls = 0  # calls sent to it this turn

    async def _refresh(self) -> None:
        await self._link.actor_async()
        self._incarnation = self._link.incarnation
        if self._node is None:
            self._node = this_node()
        dead = sorted(self._dead)
        pairs = list(await self._link.call("executor_nodes", dead))
        self._dead.difference_update(dead)
        self._local = [handle for handle, node in pairs if node == self._node]
        self._others = [handle for handle, node in pairs if node != self._node]

    def candidates(self) -> list[Any]:
        """Every known executor, this node's first."""
        return [*self._local, *self._others]

    async def pick(self, avoid: Any = None) -> Any:
        """The executor for the next call (``avoid``: one the call could not reach)."""
        await self._link.actor_async()  # a registry seen gone fails the call: REGISTRY_UNAVAILABLE
        if not (self._local or self._others) or self._incarnation != self._link.incarnation:
            await self._refresh()
        if avoid is None and self._turn_executor is not None and self._turn_calls < TURN_CALLS \
                and not held_dead(self._turn_executor):
            self._turn_calls += 1
            return self._turn_executor
        for _ in range(_DEAD_PICKS):
            handle = self._choose(avoid)
            if unfollowed(handle):  # first use in this process: learn whether it lives
                await self._revived(handle)
            if not held_dead(handle):
                break
            self.failed(handle, died=True)  # seen dead before anything was sent to it
            await self._refresh()  # the registry replaces it first
        if self._avoided(handle):
            await self._revived(handle)
        if self._turn_executor is None:  # a new turn: it ends when this loop turn does
            asyncio.get_running_loop().call_soon(self._end_turn)
        self._turn_executor, self._turn_calls = handle, 1
        return handle

    def _avoided(self, handle: Any) -> bool:
        return self._sick.get(handle._actor_id, 0.0) > time.monotonic()

    def _choose(self, avoid: Any) -> Any:
        """A healthy executor of this node, in turn; else a healthy one elsewhere; else
        (all recently failed) this node's next one anyway."""
        for group in (self._local, self._others):
            healthy = [h for h in group if not self._avoided(h) and h is not avoid]
            if healthy:
                self._next = (self._next + 1) % len(healthy)
                return healthy[self._next]
        everyone = [h for h in self.candidates() if h is not avoid] or self.candidates()
        self._next = (self._next + 1) % len(everyone)
        return everyone[self._next]

    async def _revived(self, handle: Any) -> None:
        """Wait until ``handle``'s restarted process answers (or the wait runs out, or it
        died for good: the call sent next then gets its coded result as before)."""
        key = handle._actor_id
        probe = self._probes.get(key)
        if probe is None:  # one probe per executor; its future may be awaited from any loop
            probe = self._probes[key] = handle.alive.options(max_task_retries=-1).remote().future()
        try:
            # shield: a waiter that gives up must not cancel the probe the others await
            await within(asyncio.shield(asyncio.wrap_future(probe)), REVIVAL_WAIT_S)
        except Exception:
            return
        finally:
            if probe.done() and self._probes.get(key) is probe:
                del self._probes[key]
        self._sick.pop(key, None)

    def _end_turn(self) -> None:
        self._turn_executor, self._turn_calls = None, 0

    def unreachable(self, handle: Any, exc: BaseException) -> None:
        """A call to ``handle`` failed because its executor is gone, as ``exc`` says. Ray's
        error tells whether for good; a closed channel does not, so Ray is asked (once per
        executor), and one dead for good is then replaced as if a call had met its death."""
        if not isinstance(exc, ChannelLost):
            self.failed(handle, died=died_for_good(exc))
            return
        self.failed(handle, died=False)
        key = handle._actor_id
        if key not in self._asking:
            self._asking[key] = asyncio.ensure_future(self._ask_if_dead(handle))  # held: asyncio keeps tasks weakly

    async def _ask_if_dead(self, handle: Any) -> None:
        try:
            await handle.alive.remote()  # no retries: a restarting executor answers "restarting" at once
        except Exception as exc:  # noqa: BLE001 - only a death for good matters here
            if died_for_good(exc):
                self.failed(handle, died=True)
        finally:
            self._asking.pop(handle._actor_id, None)

    def failed(self, handle: Any, died: bool) -> None:
        """A call to ``handle`` failed with its executor unreachable (``died``: for good; the
        next call refreshes the routes, and the registry replaces it first)."""
        self._sick[handle._actor_id] = time.monotonic() + SICK_S
        self._end_turn()
        if died:
            self._dead.add(handle._actor_id.hex())
            self._local, self._others = [], []
