"""Plan tickets and the version subscription, as one process caches them per registry.

A call names the plan it runs by a :class:`~.wire.PlanTicket` (the registry version and
the plan's object ref). :class:`PlanCache` keeps one ticket per scope and drops them all
when the registry's version moves; :class:`Subscription` tells it when, so a call made
while the subscription's lease is live skips the per-call version check.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
import uuid
from collections import OrderedDict
from typing import Callable

import ray

from ...core.pipeline import ExecutionPlan
from ...core.within import within
from ..errors import ACTOR_GONE, RAY_ERROR, remember_dead
from .link import RegistryLink
from ..response import background_loop
from ..wire import HEARTBEAT_S, LEASE_S, PlanTicket

__all__ = ["PlanCache", "Subscription"]

_KEPT_PLANS = 64


class Subscription:
    """This process's subscription to one registry's version (see ``RegistryActor``).

    A poller on the background loop keeps ``known`` current and renews the lease; while
    the lease is live, a ticket of version ``known`` is current and calls skip the
    per-call version read.
    """

    def __init__(self, link: RegistryLink, on_change: Callable[[int], None]) -> None:
        self._link = link
        self._on_change = on_change
        self._id = uuid.uuid4().hex
        self.known = 0
        self._scoped: tuple[int, frozenset[str]] = (-1, frozenset())  # (as of version, agents with a scope)
        self._valid_until = 0.0
        self._started = False
        self._lock = threading.Lock()
        self._answered: concurrent.futures.Future[None] = concurrent.futures.Future()  # its first answer came

    def current(self, version: int) -> bool:
        """``True`` when ``version`` is the registry's version as of a live lease."""
        if not self._started:
            self._start()
            return False
        return version == self.known and time.monotonic() < self._valid_until

    def vouched(self) -> int | None:
        """The version this process knows under a live lease (no change has returned
        since), else ``None``."""
        known = self.known
        return known if self.current(known) else None

    async def answered(self, timeout_s: float = 5.0) -> None:
        """Return once the registry first answered this subscription (started if need be),
        or after ``timeout_s``: what it knows before then is nothing."""
        if not self._started:
            self._start()
        if not self._answered.done():
            try:
                await within(asyncio.shield(asyncio.wrap_future(self._answered)), timeout_s)
            except asyncio.TimeoutError:
                pass

    def quiet(self, agent: str, version: int) -> bool:
        """Whether ``agent`` had no scope of its own at ``version`` (its plan is the base
        plan), as the registry said with that version; ``False`` when unknown."""
        as_of, scoped = self._scoped
        return as_of == version and agent not in scoped

    def _start(self) -> None:
        with self._lock:
            if self._started:
                return
            self._started = True
        asyncio.run_coroutine_threadsafe(self._poll(), background_loop())

    async def _poll(self) -> None:
        try:
            await self._poll_until_gone()
        finally:
            self._valid_until = 0.0
            self._started = False  # the next call starts a new poller if it can

    async def _poll_until_gone(self) -> None:
        handle = await self._link.actor_async()
        while ray.is_initialized():  # never re-initialise Ray from this thread after shutdown
            sent = time.monotonic()
            try:
                version, full, agents = await handle.subscribe.remote(self._id, self.known)
            except ACTOR_GONE as exc:
                remember_dead(exc)  # the next call finds the registry gone: REGISTRY_UNAVAILABLE
                return  # the registry is gone; calls fall back to checking the version
            except RAY_ERROR:
                self._valid_until = 0.0
                await asyncio.sleep(HEARTBEAT_S)
                continue
            if full or agents:
                scoped = set(agents) if full else set(self._scoped[1])
                if not full:
                    for agent, has_one in agents:
                        (scoped.add if has_one else scoped.discard)(agent)
                self._scoped = (version, frozenset(scoped))  # one assignment: read whole or not at all
            elif self._scoped[0] == self.known:
                self._scoped = (version, self._scoped[1])
            if version != self.known:
                self._valid_until = 0.0
                self._on_change(version)
                self.known = version
            # The registry renewed our lease on receiving this poll (after ``sent``).
            self._valid_until = sent + LEASE_S
            if not self._answered.done():
                self._answered.set_result(None)


class PlanCache:
    """One ticket per scope (``None``: calls with no agent), dropped on every change, and
    the plans this process fetched (for views and observers read here), a few kept."""

    def __init__(self, link: RegistryLink) -> None:
        self._link = link
        self._tickets: dict[str | None, PlanTicket] = {}
        self._fetched: "OrderedDict[str, ExecutionPlan]" = OrderedDict()
        self._incarnation = link.incarnation
        self.subscription = Subscription(link, lambda version: self._tickets.clear())

    async def plan_of(self, ticket: PlanTicket) -> ExecutionPlan | None:
        """The plan behind ``ticket`` in this process, or ``None`` if it is lost."""
        plan = self._fetched.get(ticket.plan_id)
        if plan is None:
            try:
                plan = await ticket.plan_box[0]
            except RAY_ERROR:
                return None
            self._fetched[ticket.plan_id] = plan
            if len(self._fetched) > _KEPT_PLANS:
                self._fetched.popitem(last=False)
        return plan

    async def current_plan(self, agent: str | None) -> ExecutionPlan | None:
        """``agent``'s plan as of now, for a view read in this process: its cached ticket
        while the version subscription vouches for it (else asked for again), and the plan
        itself fetched once per plan — not its definitions shipped on every read."""
        ticket = self.cached(agent)
        if ticket is None or not self.current(ticket):
            ticket = await self.ticket(agent, refresh=True)  # fetched now: as current as any
        return await self.plan_of(ticket)

    def current(self, ticket: PlanTicket) -> bool:
        """Whether a call may skip the version check for ``ticket``."""
        return self.subscription.current(ticket.version)

    def cached(self, agent: str | None) -> PlanTicket | None:
        """``agent``'s ticket if one is cached for the current registry (never fetches)."""
        if self._incarnation != self._link.incarnation:  # a new registry: nothing cached holds
            self._tickets.clear()
            self._incarnation = self._link.incarnation
        return self._tickets.get(agent)

    def clear(self) -> None:
        """Drop every ticket and fetched plan (the registry ended)."""
        self._tickets.clear()
        self._fetched.clear()

    def forget(self, agent: str) -> None:
        """Drop ``agent``'s ticket (its scope closed: a new one of that id starts empty)."""
        self._tickets.pop(agent, None)

    async def ticket(self, agent: str | None, *, refresh: bool = False) -> PlanTicket:
        cached = self.cached(agent)  # also drops what an older registry left
        ticket = None if refresh else cached
        if ticket is None:
            ticket = await (self._link.call("plan") if agent is None else self._scope_ticket(agent))
            self._tickets[agent] = ticket
        return ticket

    async def _scope_ticket(self, agent: str) -> PlanTicket:
        shared = await self._link.hosts_shared()
        if shared:
            await self.subscription.answered()  # a process's first scopes: what it says spares asking a host
        vouched = self.subscription.vouched()
        if shared and vouched is not None and self.subscription.quiet(agent, vouched):
            # No scope of its own as of a version under a live lease: its plan is the base
            # plan, which this process holds once per version (no host is asked per agent).
            base = await self.ticket(None)
            if base.version == vouched:
                return base.quiet()
        # Asking for a plan runs nothing: a host seen dead is asked again once replaced.
        return await self._link.call_scope(agent, "plan", vouched,  # type: ignore[no-any-return]
                                           resend=True)
