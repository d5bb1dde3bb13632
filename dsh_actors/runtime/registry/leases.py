"""Leases on the registry version: how a change waits until every client has heard of it.

Clients *subscribe* with long polls (:meth:`Leases.poll`): a poll returns at once when
the version moved past what the client knows, else after a change or a heartbeat, and
each poll renews that client's lease. After a change, :meth:`Leases.settled` returns only
once every subscriber with a live lease has polled again knowing the new version (an
acknowledgement) or its lease ran out. So a client with a live lease may skip the
per-call version check: its knowledge is never older than the last change that returned.

Plain asyncio, no Ray: the registry actor holds one and tests drive it directly.
"""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from ...core.within import within
from ..wire import HEARTBEAT_S, LEASE_S

__all__ = ["Leases"]


class _Subscriber:
    __slots__ = ("acked", "lease_until")

    def __init__(self) -> None:
        self.acked = 0
        self.lease_until = 0.0


class Leases:
    """The subscribers of one version (read through ``version``) and their leases."""

    def __init__(self, version: Callable[[], int], *, lease_s: float = LEASE_S,
                 heartbeat_s: float = HEARTBEAT_S) -> None:
        self._version = version
        self._lease_s, self._heartbeat_s = lease_s, heartbeat_s
        self._subscribers: dict[str, _Subscriber] = {}
        self._moved = asyncio.Event()  # set (and replaced) when the version moves
        self._acked = asyncio.Event()  # set (and replaced) when any subscriber acknowledges

    def __len__(self) -> int:
        return len(self._subscribers)

    async def poll(self, client: str, known: int) -> int:
        """``client`` knows ``known``: answer the current version once it is newer (or
        after a heartbeat). Renews the client's lease."""
        sub = self._subscribers.get(client)
        if sub is None:
            sub = self._subscribers[client] = _Subscriber()
        sub.lease_until = time.monotonic() + self._lease_s
        if known > sub.acked:
            sub.acked = known
            self._acked.set()
            self._acked = asyncio.Event()
        if self._version() > known:
            return self._version()
        moved = self._moved
        try:
            await within(moved.wait(), self._heartbeat_s)
        except asyncio.TimeoutError:
            pass
        return self._version()

    async def settled(self) -> None:
        """After a change: wake every poll, then wait until each subscriber with a live
        lease acknowledged the new version (or its lease ran out)."""
        version = self._version()
        self._moved.set()
        self._moved = asyncio.Event()
        while True:
            now = time.monotonic()
            for client in [c for c, s in self._subscribers.items() if s.lease_until <= now]:
                del self._subscribers[client]  # lease ran out: it stopped trusting its cache
            waiting = [s for s in self._subscribers.values() if s.acked < version]
            if not waiting:
                return
            acked = self._acked
            try:
                await within(acked.wait(), max(0.0, min(s.lease_until for s in waiting) - now))
            except asyncio.TimeoutError:
                pass
