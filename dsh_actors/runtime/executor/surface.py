"""What a caller's lanes send calls to: an actor that answers an envelope with an outcome.

Two actors take calls this way — the executor (a call's envelope, :mod:`.executor`) and the
Code Mode queue (a run's sub-call, :mod:`.codemode`). Both answer :meth:`execute` with an
:class:`~.wire.Outcome`'s bytes, and :class:`CallSurface` gives both the rest of what a
lane (:mod:`.lanes`) uses, so every route a call can take reaches either of them alike:

- its own actor task (``execute``); a call whose caller listens for its progress, its own
  streaming task (:meth:`~CallSurface.execute_reporting`); or one of a batch (:meth:`~CallSurface.execute_batch`,
  its outcome handed over by :meth:`~CallSurface.collect`, :mod:`.mailboxes`);
- one frame on the actor's channel, from a caller on its node
  (:meth:`~CallSurface.channel`, :mod:`.channel_server`);
- ``alive``, a probe that runs nothing; ``outlive``, a call that never answers (its
  failure is the news of a death); ``abort_agents``, which cancels given agents' calls.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any, AsyncIterator

import ray

from ...core.progress import Reports, progress_to
from .agent_calls import AgentCalls
from .channel_server import ChannelServer
from ..wire import Item, Outcome
from .mailboxes import Mailboxes

__all__ = ["CallSurface"]


class CallSurface:
    """The call-taking methods shared by the executor and the Code Mode queue (see the
    module docs); a subclass defines ``execute`` and calls :meth:`_take_calls` first."""

    _mail: Mailboxes
    _channel: ChannelServer
    _agents: AgentCalls

    def _take_calls(self) -> None:
        self._mail = Mailboxes()
        self._channel = ChannelServer(self.execute, self._mail.incarnation)
        self._agents = AgentCalls()

    async def execute(self, envelope: bytes, plan_box: list[Any] | None = None, hub: Any = None) -> bytes:
        raise NotImplementedError

    async def execute_reporting(self, envelope: bytes, plan_box: list[Any] | None = None,
                                hub: Any = None) -> AsyncIterator[tuple[float, float | None, str | None] | bytes]:
        """:meth:`execute` for a caller that listens for the call's progress (a streaming
        actor task): yields each report its body makes, ``(progress, total, message)``, as
        it comes, then the outcome's bytes. Cancelling the task cancels the call."""
        reports = Reports()
        with progress_to(reports.sink):
            call = asyncio.ensure_future(self.execute(envelope, plan_box, hub))
        try:
            async for report in reports.during(call):
                if report is not None:  # (always: no idle_s)
                    yield report
            yield Outcome.CANCELLED if call.cancelled() else call.result()  # (aborted here: abort_agents)
        finally:
            call.cancel()

    async def execute_batch(self, client: str, items: list[Item]) -> str:
        """Start a batch of ``client``'s calls (see ``lanes``): each runs as :meth:`execute`
        would run it, and its outcome waits for ``client``'s next :meth:`collect`. Answers
        this process's incarnation."""
        return self._mail.start(client, [(key, self.execute(envelope, plan_box, hub))
                                         for key, envelope, plan_box, hub in items])

    async def collect(self, client: str, incarnation: str, wait_s: float) -> list[tuple[int, bytes]] | None:
        """``client``'s batched outcomes, once any is ready (``None``: ``incarnation`` is
        not this process — its calls died with an earlier one)."""
        return await self._mail.collect(client, incarnation, wait_s)

    async def cancel_batched(self, client: str, keys: list[int]) -> None:
        """Cancel batched calls of ``client`` (each then answers *cancelled*)."""
        self._mail.cancel(client, keys)

    async def channel(self) -> tuple[str, str, bytes, int]:
        """Where a caller on this node streams its calls instead (see ``channel_server``):
        ``(node id, socket address, secret, pid)``. Calls there run as :meth:`execute` runs
        them; the pid lets that caller see this process end before it sends anything else."""
        address, secret = await self._channel.open()
        return ray.get_runtime_context().get_node_id(), address, secret, os.getpid()

    async def alive(self) -> str:
        """This process's incarnation: a probe that runs nothing."""
        return self._mail.incarnation

    async def abort_agents(self, agents: list[str], why: str) -> int:
        """Cancel every call (or Code Mode run) of ``agents`` running here; how many."""
        return self._agents.cancel(agents, why)

    async def outlive(self) -> None:
        """Never answers: how it fails tells its caller this actor died (the registry
        watches its pools this way, so one dead for good is replaced at once)."""
        await asyncio.Event().wait()
