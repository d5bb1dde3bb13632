"""Calls whose ask is put to their client, held in the approval queue until it answers.

An MCP client answers an ask through the protocol's input-required round trip: the first
``tools/call`` returns the question, and the client retries the call with its answer — on
any gateway replica. The call itself keeps running (waiting on its ask) in the replica that
took the first request. This is where the two meet, in the registry's approval queue, which
every replica can reach:

1. the first replica asks :meth:`HeldCalls.ask_of` while its call runs: the answer is the
   call's ask once one is pending (``None`` if the call ended first and the replica said
   :meth:`forget`); the replica is recorded as the call's holder;
2. it answers its client with the question, and hands the call's result, when it comes,
   to :meth:`deposit`;
3. the retry (any replica) answers the ask as the queue's asks are answered, then
   :meth:`collect`-s the result: it waits for the deposit, and learns it if the holder
   died meanwhile (its call died with it) or the wait ran past its limit.

The body runs only once its ask is answered, so whatever progress it reports is made after
its first request went back: the holder hands each report to :meth:`report`, and a
collector that listens (the client's retry asked for progress) gets them, in order, from
:meth:`collect` before the result.

A deposited result nobody collects is dropped after :data:`KEEP_S`.
"""

from __future__ import annotations

import asyncio
import collections
import time
from typing import Any, Callable

from ...core.within import within
from ..requester import CHECK_S, still_there

__all__ = ["HeldCalls", "KEEP_S", "KEEP_REPORTS"]

KEEP_S = 900.0
"""How long a held call's result waits to be collected."""

KEEP_REPORTS = 1000
"""How many of a held call's latest progress reports wait for its collector (older ones are
dropped: a report says how far the call is, so the latest matter)."""


class HeldCalls:
    """The queue's held calls (see the module docs); ``pending_ask(call_id)`` finds the
    pending ask of a call among the queue's own."""

    def __init__(self, pending_ask: Callable[[str], dict[str, Any] | None]) -> None:
        self._pending_ask = pending_ask
        self._watchers: dict[str, asyncio.Future[dict[str, Any] | None]] = {}
        self._holders: dict[str, tuple[float, tuple[Any, str] | None]] = {}  # call -> (since, holder)
        self._results: dict[str, tuple[float, Any]] = {}
        self._reports: dict[str, tuple[int, collections.deque[Any]]] = {}  # call -> (reports made, the latest)
        self._arrived: dict[str, asyncio.Event] = {}

    async def ask_of(self, call_id: str, holder: tuple[Any, str] | None) -> dict[str, Any] | None:
        """The pending ask of ``call_id`` once there is one; ``None`` once :meth:`forget`."""
        self._drop_stale()
        self._holders[call_id] = (time.monotonic(), holder)
        found = self._pending_ask(call_id)
        if found is not None:
            return found
        future = self._watchers[call_id] = asyncio.get_running_loop().create_future()
        try:
            return await future
        finally:
            self._watchers.pop(call_id, None)

    def holder(self, call_id: str) -> tuple[Any, str] | None:
        """The process holding ``call_id`` for its client, if one does."""
        return self._holders.get(call_id, (0.0, None))[1]

    def asked(self, info: dict[str, Any]) -> None:
        """(The queue.) An ask is pending: a holder waiting for its call learns it."""
        future = self._watchers.get(info.get("call_id") or "")
        if future is not None and not future.done():
            future.set_result(dict(info))

    def forget(self, call_id: str) -> None:
        """The call ended without an ask put to its client: nothing is held."""
        self._holders.pop(call_id, None)
        future = self._watchers.get(call_id)
        if future is not None and not future.done():
            future.set_result(None)

    def _drop_stale(self) -> None:
        """Results nobody collected in :data:`KEEP_S`, and holders whose call ended longer ago
        than any client may still answer (its holder died before depositing)."""
        now = time.monotonic()
        for stale in [c for c, (at, _) in self._results.items() if now - at > KEEP_S]:
            del self._results[stale]
            self._holders.pop(stale, None)
        for stale in [c for c, (at, _) in self._holders.items() if now - at > 2 * KEEP_S]:
            self._holders.pop(stale, None)
        for gone in [c for c in (*self._reports, *self._arrived) if c not in self._holders and c not in self._results]:
            self._reports.pop(gone, None)
            self._arrived.pop(gone, None)

    def report(self, call_id: str, report: Any) -> None:
        """A progress report of held call ``call_id`` (its body runs after its ask was put to
        its client): kept for its collector. Dropped if no call of that id is held."""
        if call_id not in self._holders:
            return
        made, latest = self._reports.setdefault(call_id, (0, collections.deque(maxlen=KEEP_REPORTS)))
        latest.append(report)
        self._reports[call_id] = (made + 1, latest)
        self._arrived.setdefault(call_id, asyncio.Event()).set()

    def _reports_after(self, call_id: str, heard: int) -> tuple[int, list[Any]]:
        """How many reports ``call_id`` made, and those after the first ``heard`` still kept."""
        made, latest = self._reports.get(call_id, (0, collections.deque()))
        return made, list(latest)[max(0, len(latest) - (made - heard)):] if made > heard else []

    def deposit(self, call_id: str, result: Any) -> None:
        self._drop_stale()
        self._results[call_id] = (time.monotonic(), result)
        self._arrived.setdefault(call_id, asyncio.Event()).set()

    async def collect(self, call_id: str, timeout_s: float, heard: int | None = None) -> tuple[str, Any]:
        """The held call's result, waiting for it: ``("done", result)`` (taken: a second
        collect finds nothing), ``("died", None)`` when its holder died first (the call died
        with it), ``("late", None)`` when ``timeout_s`` passed first, and at once
        ``("unknown", None)`` when no call of that id is held (collected already, dropped, or
        never held). ``heard``: a collector that listens to the call's progress says how many
        reports it has had; it is answered ``("progress", (made, reports))`` as soon as there
        are later ones (``made`` reports in all, the kept ones after those it heard), and
        collects again with ``heard=made``. The result comes once it has them all."""
        if call_id not in self._results and call_id not in self._holders:
            return "unknown", None
        arrived = self._arrived.setdefault(call_id, asyncio.Event())
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                if heard is not None:
                    made, reports = self._reports_after(call_id, heard)
                    if made > heard:
                        return "progress", (made, reports)
                if call_id in self._results:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    return "late", None
                arrived.clear()  # (what set it is seen above: nothing ran since)
                try:
                    await within(arrived.wait(), min(CHECK_S, left))
                except TimeoutError:
                    holder = self.holder(call_id)
                    if call_id not in self._results and holder is not None and not await still_there(*holder):
                        self._holders.pop(call_id, None)
                        self._reports.pop(call_id, None)
                        return "died", None
            self._holders.pop(call_id, None)
            self._reports.pop(call_id, None)
            return "done", self._results.pop(call_id)[1]
        finally:
            if call_id not in self._results and call_id not in self._holders:
                self._arrived.pop(call_id, None)
