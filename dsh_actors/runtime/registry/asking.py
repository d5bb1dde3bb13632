"""Asks put to a caller's own flow while the call waits for them in the approval queue.

A caller that answers asks itself — an MCP client through the protocol's input-required
round trip, an agent framework through its approval flow — starts its call here. Should the
call's policy ask, the caller learns the ask at once and answers it later (from any process
that reaches the registry), while the call goes on waiting for it in this process: *held*.
The answer's process then collects the result through the queue (:mod:`.held`, its side).
A held call its caller never answers is cancelled after ``ttl_s`` (nothing runs).

Progress: a held call's body runs once its ask is answered, after its first request went
back, so the reports it makes go to the queue (a :class:`Handover` sink switches there when
the call is held; they are sent one after another, and all before the result), and the
answer's process hands them to its own listener while it waits for the result.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable

from ...core.progress import ProgressSink, Reports

__all__ = ["AskingCalls", "Handover"]


class Handover:
    """A progress sink for a call that may be held: its reports go to ``sink`` (the first
    request's listener) until :meth:`to` hands them elsewhere. Never raises into the body."""

    def __init__(self, sink: ProgressSink) -> None:
        self._sink = sink

    def to(self, sink: ProgressSink) -> None:
        self._sink = sink

    def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        try:
            self._sink(progress, total, message)
        except Exception:  # noqa: BLE001 - a deaf listener never stops a call
            pass


class AskingCalls:
    """One process's calls whose asks go to their callers, in registry ``registry``."""

    def __init__(self, registry: str, namespace: str, *, ttl_s: float) -> None:
        self.registry, self.namespace, self.ttl_s = registry, namespace, ttl_s
        self.held: set[asyncio.Task[None]] = set()
        self._queue: Any = None

    async def queue(self) -> Any:
        """The registry's approval queue actor, or ``None`` when it has none mounted."""
        if self._queue is None:
            from .approval import ApprovalQueue

            try:
                self._queue = await ApprovalQueue(self.registry, self.namespace).actor()
            except ValueError:
                return None
        return self._queue

    async def run_or_ask(self, call_id: str, execution: Awaitable[Any],
                         progress: Handover | None = None) -> tuple[str, Any]:
        """Run the call (``execution``, of call ``call_id``): ``("done", result)``, or
        ``("asked", ask)`` when its policy asked first — the call is then held until
        :meth:`answer` (or ``ttl_s``), and ``progress`` (the sink ``execution`` reports to, if
        any) hands its reports to the queue. Without an approval queue it just runs."""
        from ..requester import requester

        running = asyncio.ensure_future(execution)
        queue = await self.queue()
        if queue is None:
            return "done", await running
        watch = asyncio.ensure_future(_awaited(queue.ask_of.remote(call_id, requester())))
        try:
            await asyncio.wait({running, watch}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            running.cancel()
            watch.cancel()
            queue.forget.remote(call_id)
            raise
        ask = watch.result() if watch.done() and watch.exception() is None else None
        if running.done() or ask is None:
            watch.cancel()
            queue.forget.remote(call_id)
            if not watch.done() or watch.exception() is not None:
                self._queue = None  # it may have died: found again next time
            return "done", await running
        forwarding = None
        if progress is not None:  # (one at a time: an async actor may run calls out of order)
            reports = Reports()
            progress.to(reports.sink)
            forwarding = asyncio.ensure_future(_forward(queue, call_id, reports, running))
        task = asyncio.ensure_future(self._hold(queue, call_id, ask["id"], running, forwarding))
        self.held.add(task)
        task.add_done_callback(self.held.discard)
        return "asked", ask

    async def _hold(self, queue: Any, call_id: str, ask_id: str, running: asyncio.Future[Any],
                    forwarding: asyncio.Future[None] | None) -> None:
        from ...core.errors import error_result
        from ...core.within import within

        try:
            try:
                result = dict(await within(asyncio.shield(running), self.ttl_s))
            except TimeoutError:  # never answered: its ask is cancelled, the call ends
                queue.cancel.remote(ask_id)
                result = dict(await running)
        except Exception as exc:  # noqa: BLE001 - the answerer gets it as the call's error
            result = {**error_result(exc), "call_id": call_id}
        if forwarding is not None:  # its reports before its result (bounded: a slow queue)
            await asyncio.wait({forwarding}, timeout=FORWARD_DRAIN_S)
        await queue.deposit.remote(call_id, result)

    async def answer(self, call_id: str, ask_id: str, outcome: str,
                     progress: ProgressSink | None = None) -> tuple[str, Any]:
        """Answer the ask ``ask_id`` of held call ``call_id`` (``allowed-once``, ``rejected``,
        ``cancelled``) and collect its result: ``("done", result)``; ``("died", None)`` when
        the process holding it died (its ask is then cancelled: nothing runs unseen);
        ``("unknown", None)`` when no call of that id is held (answered already, dropped);
        ``("late", None)`` when it did not end within ``ttl_s``; ``("gone", None)`` when the
        registry has no approval queue any more (the call died with it). ``progress`` hears
        the call's reports meanwhile, in order."""
        queue = await self.queue()
        if queue is None:
            return "gone", None
        await queue.answer_held.remote(call_id, ask_id, outcome)
        listener = Handover(progress) if progress is not None else None
        heard, deadline = (0 if listener is not None else None), time.monotonic() + self.ttl_s
        while True:
            left = max(0.0, deadline - time.monotonic())
            status, value = await queue.collect.remote(call_id, left, heard)
            if status != "progress" or listener is None:
                return status, value
            heard, reports = value
            for report in reports:
                listener(*report)


FORWARD_DRAIN_S = 10.0
"""How long a held call's last reports may take to reach the queue before its result."""


async def _forward(queue: Any, call_id: str, reports: Reports, running: asyncio.Future[Any]) -> None:
    """Hand held call ``call_id``'s reports to the queue, each once the one before is in."""
    async for report in reports.during(running):
        if report is not None:  # (always: no idle_s)
            try:
                await queue.report_held.remote(call_id, report)
            except Exception:  # noqa: BLE001 - the queue is gone, and whoever would hear them with it
                return


async def _awaited(ref: Any) -> Any:
    return await ref
