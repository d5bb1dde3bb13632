"""The caller's side of calls to executors: streamed to one on this node, and batched
into shared actor tasks once several are in flight to one elsewhere.

An actor call costs about as much CPU whatever it carries (≈0.7 ms in the caller and
≈0.9 ms in an async actor here), so a process that keeps many calls in flight sends them
together — without tying a fast call's result to a slow one's:

- **Streaming** (an executor on this node). A lane asks its executor once where its
  channel listens (:mod:`.channel`); while that channel is open, every call carrying only
  its envelope is one frame on a local socket and its outcome one frame back — no actor
  task at all. Everything below is the route of the other calls (a plan's ref or a
  signal hub to carry, an executor elsewhere, no channel yet or any more).
- **Sending** (:class:`Lanes`, one per event loop; a :class:`_Lane` per executor). A call
  made while its lane is idle goes at once as its own actor task (``execute``): one call
  in flight pays nothing for batching. A call made while others are in flight waits for
  the end of the loop's current iteration — or, while the lane's previous batch is still
  being started, for that start's answer — and every call queued by then goes in one
  ``execute_batch`` task, which only starts them. So batches grow with the load (the
  rule is :class:`~.coalesce.Coalescer`'s, which the session log's appends follow too).
- **Reporting.** A call whose caller listens for its progress (a sink set where it is sent,
  :mod:`~dsh_actors.core.progress`) goes alone as a streaming actor task
  (``execute_reporting``), never on the channel nor in a batch: each report its body makes
  comes back as an item of the stream, handed to the sink as it arrives, then the outcome.
- **Collecting.** While batched calls are pending, the lane keeps one ``collect`` long
  poll open on their executor (:mod:`.mailboxes` is the executor's side). It answers as
  soon as any result is ready, with every result ready by then, so results return in
  groups as they finish — an approval wait of an hour never holds the call batched
  beside it.
- **Failures.** A call is not submitted to an executor this process's Ray already holds
  dead for good (Ray would fail it unsent with the same error as a call that died inside
  it): it fails with :class:`~.errors.HeldDead`, and its caller sends it elsewhere. After
  the process of an executor on this node ended (the kernel says so through a pidfd, before
  this loop reads its channel's end or Ray notices), a call made there waits until a new
  channel is open or Ray has said whether the executor lives. Each executor incarnation has an id that ``execute_batch`` answers; a
  ``collect`` for another incarnation answers ``None``, so calls started by an executor
  that died and was restarted fail (``WORKER_CRASHED``) instead of waiting for results
  no one will send. A ``collect`` or ``execute_batch`` that fails fails its calls with
  Ray's error, exactly as ``await`` on the call's own task would have (the caller then
  tells a call that never reached the executor from one that may have run).
- **Cancelling** a queued call drops it; a batched one is cancelled in its executor
  (``cancel_batched``), and it answers *cancelled* like a cancelled actor task.

Plain asyncio: tests drive it without Ray.
"""

from __future__ import annotations

import asyncio
import os
import select
import uuid
from typing import Any, Callable, Protocol

import ray

from ...core.progress import ProgressSink, listening, relay
from ..backoff import WHILE_RESTARTING
from .channel import Channel, connect
from ..coalesce import Coalescer
from ..errors import ChannelLost, HeldDead, WorkerCrashedError, died_for_good, held_dead, never_reached
from ..local import this_node
from ..wire import COLLECT_WAIT_S, Item, Outcome

__all__ = ["CHANNEL_ENVELOPE_MAX", "Lanes", "SentCall"]

CHANNEL_ENVELOPE_MAX = 8 << 20
"""A call whose envelope is larger goes as an actor task (Ray's object store carries big
values better than one frame of a shared stream)."""


class SentCall:
    """One call handed to a lane: ``await`` it for the executor's outcome bytes (or Ray's
    error); :meth:`cancel` from any thread."""

    __slots__ = ("lane", "envelope", "plan_box", "hub", "progress", "future", "key", "incarnation", "ref", "route")

    def __init__(self, lane: "_Lane", envelope: bytes, plan_box: Any, hub: Any,
                 progress: ProgressSink | None = None) -> None:
        self.lane = lane
        self.envelope, self.plan_box, self.hub = envelope, plan_box, hub
        self.progress = progress  # who hears its body's reports (None: nobody, the common case)
        self.future: asyncio.Future[bytes] = lane.loop.create_future()
        self.key = 0
        self.incarnation: str | None = None  # of the executor that started it (batched calls)
        self.ref: Any = None  # its own actor task (calls sent alone)
        self.route: _Route | None = None  # what holds it now: where a cancel goes

    def __await__(self) -> Any:
        return self.future.__await__()

    def resolve(self, raw: bytes) -> None:
        if not self.future.done():
            self.future.set_result(raw)

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)

    def cancel(self) -> None:
        """Stop the call (thread-safe): a cancelled call answers *cancelled*."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self.lane.loop:
            self.lane.cancel(self)
            return
        try:
            self.lane.loop.call_soon_threadsafe(self.lane.cancel, self)
        except RuntimeError:
            pass  # its loop is closed: nothing is waiting for it any more


class _Route(Protocol):
    """A way a call goes to its executor (a :class:`~.channel.Channel`, its own task, a
    batch) or waits to (the stream's held calls): each takes back the calls it holds."""

    def cancel(self, call: SentCall) -> None: ...


class _Lane:
    """One event loop's calls to one executor: picks each call's route (see the module docs)."""

    def __init__(self, executor: Any, client: str, loop: asyncio.AbstractEventLoop, node: str | None) -> None:
        self.executor, self.loop = executor, loop
        self.stream = _Stream(self, node)
        self.alone = _OwnTasks(self)
        self.reporting = _Reporting(self)
        self.batches = _Batches(self, client)

    def send(self, envelope: bytes, plan_box: Any, hub: Any) -> SentCall:
        call = SentCall(self, envelope, plan_box, hub, listening())
        self.route(call)
        return call

    def route(self, call: SentCall) -> None:
        stream = self.stream
        if stream.held is not None:
            stream.hold(call)
        elif call.progress is not None and not stream.process_ended():
            self.reporting.send(call)
        elif stream.channel is not None and call.plan_box is None and call.hub is None \
                and len(call.envelope) <= CHANNEL_ENVELOPE_MAX:
            stream.channel.send(call, call.envelope)  # (the channel's end fails it unsent, if so)
        elif stream.process_ended():
            # Its process may be dead for good while this process's Ray does not know yet:
            # an actor task sent now could die unsent and still read as a call that died
            # inside it. So calls wait until a channel is back or Ray has said (its
            # channel's end is on its way; the routes avoid this executor meanwhile).
            stream.hold(call)
        elif self.batches.idle() and not self.alone.in_flight:
            self.alone.send(call)
        else:
            self.batches.add(call)

    def unsendable(self) -> BaseException | None:
        """Why no actor task may go to the executor now: Ray holds it dead for good (it
        would fail the task unsent, reading as if it died inside), or its process ended."""
        if held_dead(self.executor):
            return HeldDead(self.executor._actor_id.hex())
        if self.stream.process_ended():
            return ChannelLost(reached=False)
        return None

    def cancel(self, call: SentCall) -> None:
        if call.future.done() and not call.future.cancelled():
            return  # answered (a future cancelled with its awaiting task still stops the call)
        if call.route is not None:
            call.route.cancel(call)


class _Stream:
    """The lane's channel to an executor on this node (:mod:`.channel`): opened, followed
    by a pidfd of the executor's process, and the calls held while a lost one is replaced."""

    def __init__(self, lane: _Lane, node: str | None) -> None:
        self.lane = lane
        self.channel: Channel | None = None  # open to this executor (it runs on this node)
        self.held: list[SentCall] | None = None  # while its channel is lost and no new one settled
        self._opening = False
        self._process: int | None = None  # a pidfd of the executor's process, while its channel is open
        self._connecting: asyncio.Task[None] | None = None
        self._node = node  # None: no channel (not on Ray, or the executor is elsewhere or dead)
        self.open()

    def hold(self, call: SentCall) -> None:
        if self.held is None:
            self.held = []
        self.held.append(call)
        call.route = self

    def cancel(self, call: SentCall) -> None:
        if self.held is not None and call in self.held:
            self.held.remove(call)
            call.resolve(Outcome.CANCELLED)

    def open(self) -> None:
        if self._node is not None and self.channel is None and not self._opening:
            self._opening = True
            self._connecting = self.lane.loop.create_task(self._connect(self._node))  # held: asyncio keeps tasks weakly

    async def _connect(self, node: str) -> None:
        """Open the channel; this task then lives as long as it (a loop that ends closes it)."""
        try:
            channel = await self._reach(node)
        finally:
            self._opening = False
            self.release_held()
        if channel is not None:
            await channel.kept_open()

    async def _reach(self, node: str) -> Channel | None:
        """Ask the executor where its channel listens and connect, trying again while Ray
        restarts it; an executor on another node, or one dead for good, keeps actor calls."""
        for pause in WHILE_RESTARTING.pauses():
            if not ray.is_initialized():  # this process left Ray (a call would start a new one)
                return None
            try:
                where, address, secret, pid = await self.lane.executor.channel.remote()
                if where != node:
                    self._node = None
                    return None
                self.channel = await connect(address, secret, self._lost)
                self._follow_process(pid)
                return self.channel
            except Exception as exc:  # noqa: BLE001 - actor calls carry on meanwhile
                if died_for_good(exc):
                    self._node = None
                    return None
                if never_reached(exc):  # restarting, as Ray now knows: a call sent now fails unsent
                    self.release_held()
                if pause is None:
                    return None  # (a later answer from the executor tries again)
                await asyncio.sleep(pause)
        return None

    def process_ended(self) -> bool:
        """Whether the executor's process (on this node, its channel open) has ended, as
        the kernel says now: a call is never sent to a process known gone, even before
        this loop has read its channel's end or Ray has noticed (≈2 µs)."""
        if self._process is None:
            return False
        try:
            return bool(select.select([self._process], [], [], 0)[0])  # a pidfd reads ready once it exits
        except (OSError, ValueError):
            return False

    def _follow_process(self, pid: int | None) -> None:
        self.forget_process()
        try:
            self._process = os.pidfd_open(pid) if pid else None
        except OSError:  # gone already, or another PID namespace: Ray's word alone then
            self._process = None

    def forget_process(self) -> None:
        if self._process is not None:
            os.close(self._process)
            self._process = None

    def release_held(self) -> None:
        """Route the calls held since the channel was lost: on the new channel, or (Ray has
        said whether the executor lives) as actor tasks."""
        held, self.held = self.held or [], None
        for call in held:
            if not call.future.done():
                self.lane.route(call)

    def _lost(self, channel: Channel) -> None:
        """The executor's process died or cut the channel: the next one gets a new one."""
        if self.channel is channel:
            self.channel = None
            self.forget_process()
            if not channel.closing:  # closed here: its loop is ending
                self.held = self.held or []
                self.open()

    def discard(self) -> None:
        """Close the channel of a closed loop (see :meth:`Channel.discard`)."""
        if self.channel is not None:
            self.channel.discard()
        self.forget_process()


class _OwnTasks:
    """Calls sent alone, each as its own ``execute`` actor task (one call in flight pays
    nothing for batching)."""

    def __init__(self, lane: _Lane) -> None:
        self.lane = lane
        self.in_flight = 0

    def send(self, call: SentCall) -> None:
        lane = self.lane
        why = lane.unsendable()
        if why is not None:
            call.fail(why)
            return
        execute = lane.executor.execute
        if call.plan_box is None and call.hub is None:
            call.ref = execute.remote(call.envelope)
        else:
            call.ref = execute.remote(call.envelope, call.plan_box, call.hub)
        call.route = self
        self.in_flight += 1
        asyncio.wrap_future(call.ref.future(), loop=lane.loop).add_done_callback(
            lambda done: self._done(call, done))

    def _done(self, call: SentCall, done: "asyncio.Future[bytes]") -> None:
        self.in_flight -= 1
        if done.cancelled():
            call.resolve(Outcome.CANCELLED)
        elif done.exception() is not None:
            call.fail(done.exception())  # type: ignore[arg-type]
        else:
            call.resolve(done.result())
            self.lane.stream.open()  # the executor answers again: if its channel was given up, retry

    def cancel(self, call: SentCall) -> None:
        try:
            ray.cancel(call.ref)  # its own actor task: the coroutine sees CancelledError
        except Exception:
            pass


class _Reporting:
    """Calls whose caller listens for their progress, each its own streaming actor task
    (``execute_reporting``): the reports are handed to the call's sink as they arrive,
    the last item is the outcome."""

    def __init__(self, lane: _Lane) -> None:
        self.lane = lane
        self._following: set[asyncio.Task[None]] = set()  # asyncio holds tasks weakly

    def send(self, call: SentCall) -> None:
        why = self.lane.unsendable()
        if why is not None:
            call.fail(why)
            return
        call.ref = self.lane.executor.execute_reporting.remote(call.envelope, call.plan_box, call.hub)
        call.route = self
        following = self.lane.loop.create_task(self._follow(call))
        self._following.add(following)
        following.add_done_callback(self._following.discard)

    async def _follow(self, call: SentCall) -> None:
        assert call.progress is not None
        try:
            outcome = await relay(call.ref, call.progress)
        except (asyncio.CancelledError, ray.exceptions.TaskCancelledError):
            call.resolve(Outcome.CANCELLED)
        except Exception as exc:  # noqa: BLE001 - Ray's error, as awaiting the call's own task gives it
            call.fail(exc)
        else:
            if outcome is None:
                call.fail(ray.exceptions.RaySystemError("the executor's stream ended without the call's outcome"))
            else:
                call.resolve(outcome)

    def cancel(self, call: SentCall) -> None:
        try:
            ray.cancel(call.ref)  # the stream's coroutine sees CancelledError, and cancels the call
        except Exception:
            pass


class _Batches:
    """Calls started together by ``execute_batch`` and collected by one long poll (see the
    module docs)."""

    def __init__(self, lane: _Lane, client: str) -> None:
        self.lane, self.client = lane, client
        self.queue: Coalescer[SentCall] = Coalescer(self._start, self._failed_start)
        self.pending: dict[int, SentCall] = {}  # batched, not yet answered
        self.incarnation: str | None = None  # of the executor, as its last answer said
        self._keys = 0
        self._collecting = False

    def idle(self) -> bool:
        return not (self.queue.queued or self.queue.busy or self.pending)

    def add(self, call: SentCall) -> None:
        call.route = self
        self.queue.add(call)

    def cancel(self, call: SentCall) -> None:
        if self.queue.remove(call):
            call.resolve(Outcome.CANCELLED)
        elif call.key in self.pending:
            self.lane.executor.cancel_batched.remote(self.client, [call.key])

    async def _start(self, calls: list[SentCall]) -> None:
        """Start ``calls`` in one ``execute_batch`` task (the coalescer sends what gathered
        while the previous batch was being started: under load, many)."""
        lane = self.lane
        if len(calls) == 1 and not (self.pending or lane.alone.in_flight):
            lane.alone.send(calls[0])
            return
        why = lane.unsendable()
        if why is not None:
            raise why  # each call fails unsent (_failed_start)
        for call in calls:
            self._keys += 1
            call.key = self._keys
            self.pending[call.key] = call
        items: list[Item] = [(c.key, c.envelope, c.plan_box, c.hub) for c in calls]
        incarnation = await lane.executor.execute_batch.remote(self.client, items)
        if incarnation != self.incarnation:
            # A new executor process: what the old one started is lost with it.
            self._lose(lambda c: c.incarnation is not None and c.incarnation != incarnation)
            self.incarnation = incarnation
        for call in calls:
            call.incarnation = incarnation
        if not self._collecting and self.pending:
            self._collecting = True
            lane.loop.create_task(self._collect())

    def _failed_start(self, calls: list[SentCall], exc: Exception) -> None:
        """The batch never started (the executor is dead or restarting): its calls fail."""
        for call in calls:
            self.pending.pop(call.key, None)
            call.fail(exc)

    async def _collect(self) -> None:
        try:
            while self.pending and self.incarnation is not None:
                incarnation = self.incarnation
                try:
                    entries = await self.lane.executor.collect.remote(self.client, incarnation, COLLECT_WAIT_S)
                except Exception as exc:
                    self._lose(lambda c: c.incarnation == incarnation, exc)
                    self._forget(incarnation)
                    continue
                if entries is None:  # that executor is not the one that started them
                    self._lose(lambda c: c.incarnation == incarnation)
                    self._forget(incarnation)
                    continue
                for key, raw in entries:
                    call = self.pending.pop(key, None)
                    if call is not None:
                        call.resolve(raw)
        finally:
            self._collecting = False

    def _forget(self, incarnation: str) -> None:
        """That executor process is gone — unless a batch started since already learnt
        its successor's incarnation (then calls started there are still collected)."""
        if self.incarnation == incarnation:
            self.incarnation = None

    def _lose(self, which: Callable[[SentCall], bool], error: BaseException | None = None) -> None:
        """Fail the pending calls ``which`` selects: with ``error``, or as lost with an
        executor process that died (a new one answers now)."""
        for call in [c for c in self.pending.values() if which(c)]:
            del self.pending[call.key]
            call.fail(error if error is not None else WorkerCrashedError(
                "the executor running the call was restarted before it answered (its process died)"))


class Lanes:
    """One event loop's lanes to a registry's executors, one per executor actor."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.client = uuid.uuid4().hex
        self.loop = loop
        self._lanes: dict[Any, _Lane] = {}

    def discard(self) -> None:
        """Close every channel (this loop is closed: nothing of it runs any more)."""
        for lane in self._lanes.values():
            lane.stream.discard()

    def streams_to(self, executor: Any) -> bool:
        """Whether calls to ``executor`` go on its open channel now (so one that never
        reaches it is told from one that may have run, without a probe)."""
        lane = self._lanes.get(executor._actor_id)
        return lane is not None and lane.stream.channel is not None

    def send(self, executor: Any, envelope: bytes, plan_box: Any = None, hub: Any = None) -> SentCall:
        """Send one call's envelope to ``executor`` (see the module docs)."""
        key = executor._actor_id
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane(executor, self.client, self.loop, this_node())
        return lane.send(envelope, plan_box, hub)


