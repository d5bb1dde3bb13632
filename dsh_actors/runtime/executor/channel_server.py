"""The executor's side of its channel: calls from processes on its node, over a local socket.

An actor call costs about as much CPU whatever it carries (≈0.7 ms in the caller and
≈0.9 ms in an async actor here), so CPU-trivial calls spend most of their time in Ray's
machinery. A caller on the executor's node can instead stream its calls over a Unix
socket the executor listens on (:mod:`.channel` is the caller's side): one frame per
call and per outcome (:class:`~.wire.Frame`), many per write, no task per call. Ray
still places, restarts and addresses the executor; it hands out the socket's address and
secret (:meth:`ChannelServer.open`, behind the actor's ``channel`` method), so only a
process Ray let call the executor is served.

What the channel promises, like the actor calls it stands in for:

- a call runs only after its caller was told it arrived (:attr:`~.wire.Frame.RECEIVED`
  leaves before any call it covers starts), so when the executor dies, the caller knows
  which calls may have run (``WORKER_CRASHED``) and which never arrived (sent again,
  elsewhere);
- a cancel reaches its call whether it comes before the call started or while it runs;
- every call answers exactly one outcome frame, or none when the socket is gone.

A caller that does not keep up with its outcomes has no more calls taken: while any byte
for it waits in this process (the kernel holds all it will), none of its frames is read
(its cancels wait too), so calls it sends meanwhile stay unreceived on its side (sent elsewhere if the channel
is lost) instead of piling up here; reading resumes once it has taken everything. The
outcomes of the calls it had running still come: once more than
:data:`OUTBOX_MAX_BYTES` of them wait here, the next one cuts its channel off, and its
calls fail as on an executor's death (``WORKER_CRASHED`` for those it had been told were
received, sent elsewhere for the rest) — exactly one result each, none run twice.

Any process on the node can connect, so a connection that has not proven the secret costs
little and not for long: at most :data:`STRANGERS_MAX` wait for their hello at once (a
newer one pushes out the oldest), each for :data:`HELLO_WAIT_S` at most, and nothing they
send is unpacked. A flood of them never takes the executor toward its descriptor limit
or its memory, and callers already welcomed keep being served.

The socket lives in Linux's abstract namespace (no file to clean up after a SIGKILL); on
other systems it is a file in a private temporary folder. Plain asyncio: no Ray.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import os
import secrets
import sys
import tempfile
import uuid
from typing import Awaitable, Callable, cast

import msgpack

from .mailboxes import task_outcome
from ..wire import Frame, Outbox, Outcome

__all__ = ["ChannelServer"]

HELLO_WAIT_S = 1.0
"""How long a new connection may stay without its hello before it is cut off. A caller
writes its hello the moment it connects, so it arrives a turn or two of the loop later;
one whose loop stalls longer is cut off and its lane tries again (actor calls meanwhile)."""

STRANGERS_MAX = 64
"""How many connections may wait for their hello at once; a newer one pushes out the
oldest. Each holds a descriptor and some memory until then: a flood of 20,000 pinned an
executor at its descriptor limit and 2.7 GB (issue 44). Callers connect once per event
loop and process and are through in a few turns of the loop, so 64 at once is far more
than real ones need. Pushing out the oldest rather than refusing the newest means a
stranger cannot lock callers out by holding 64 silent connections: it has to open more
than 64 in the few turns a caller's hello takes, for as long as it wants them out."""

OUTBOX_MAX_BYTES = 64 << 20
"""How many bytes of outcomes may wait here for one caller before the next cuts it off
(see the module docs). Only outcomes of calls already running when it stopped reading
can come to this; bounding them bounds what a stuck caller costs the executor (one
stuck with 200 MiB of outcomes held them all before). 64 MiB is a thousand 64 KiB shell
outputs, and as much as one session-log frame holds. The bound is checked before each
outcome is queued, so a single outcome larger than it still goes to a caller that reads."""

ACCEPT_BACKLOG = 100
"""How many connections the kernel queues for the executor to accept (asyncio's default),
which is also how many asyncio accepts in one go before any reaches this module: in a
flood, up to three such batches are held for a turn or two beyond the strangers (just
accepted, being set up, pushed out and closing)."""


def _address() -> str:
    if sys.platform.startswith("linux"):
        return f"\0dsh-executor-{uuid.uuid4().hex}"
    return os.path.join(tempfile.mkdtemp(prefix="dsh-executor-"), "channel")


class ChannelServer:
    """Serves ``run(envelope) -> outcome bytes`` to callers on this node (see the module
    docs); ``incarnation`` names this executor process in every welcome, and
    ``outbox_max_bytes`` bounds the outcomes waiting for one caller."""

    def __init__(self, run: Callable[[bytes], Awaitable[bytes]], incarnation: str,
                 outbox_max_bytes: int = OUTBOX_MAX_BYTES) -> None:
        self._run, self.incarnation, self.outbox_max_bytes = run, incarnation, outbox_max_bytes
        self.secret = secrets.token_bytes(16)
        self.hello = msgpack.packb([Frame.HELLO, self.secret])  # the exact bytes a caller must send first
        self._opening: asyncio.Future[str] | None = None
        self._server: asyncio.AbstractServer | None = None
        self.connections: set[_ExecutorEnd] = set()
        self.strangers: dict[_ExecutorEnd, None] = {}  # connected, no hello yet: oldest first
        self.served = 0  # calls started from the channel (a count for tests and operators)

    async def open(self) -> tuple[str, bytes]:
        """Listen (once) and answer ``(address, secret)`` for a caller to connect with."""
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._listen())
        return await asyncio.shield(self._opening), self.secret

    async def _listen(self) -> str:
        address = _address()
        self._server = await asyncio.get_running_loop().create_unix_server(
            lambda: _ExecutorEnd(self), address, backlog=ACCEPT_BACKLOG)
        return address

    async def close(self) -> None:
        """Stop listening and cut every connection (their callers see the channel lost)."""
        if self._server is not None:
            self._server.close()
            for end in list(self.connections):
                end._close()
            await self._server.wait_closed()

    def arrived(self, end: "_ExecutorEnd") -> None:
        """A new connection: a stranger until its hello; the oldest stranger goes if too many wait."""
        self.connections.add(end)
        self.strangers[end] = None
        if len(self.strangers) > STRANGERS_MAX:
            next(iter(self.strangers))._cut()

    def run(self, envelope: bytes) -> "asyncio.Task[bytes]":
        self.served += 1
        return asyncio.ensure_future(self._run(envelope))


class _ExecutorEnd(asyncio.Protocol):
    """One caller's connection: its calls, as tasks of this loop."""

    def __init__(self, server: ChannelServer) -> None:
        self.server = server
        self.unpacker: msgpack.Unpacker | None = None  # made at the welcome (a stranger costs less)
        self.transport: asyncio.Transport | None = None
        self.welcomed = False
        self.unchecked = b""  # what arrived before the hello was checked
        self.overdue: asyncio.TimerHandle | None = None
        self.running: dict[int, asyncio.Task[bytes]] = {}
        self.waiting: dict[int, bytes] = {}  # arrived, held until their RECEIVED frame has left
        self.out = Outbox(self._write)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not an isinstance check: under uvloop (Ray runs async actors on it where it is
        # installed) a transport has the whole API without subclassing asyncio.Transport.
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=0)  # told when bytes start to wait here, and when none do
        self.server.arrived(self)
        self.overdue = asyncio.get_running_loop().call_later(HELLO_WAIT_S, self._cut)

    def connection_lost(self, exc: Exception | None) -> None:
        # The caller is gone: its calls still finish (a body may be half way through a
        # side effect), and their outcomes go nowhere.
        self._known()
        self.server.connections.discard(self)
        self.transport = None
        self.waiting.clear()

    def _known(self) -> None:
        """No longer a stranger (welcomed, or gone): its slot and timer are freed."""
        self.server.strangers.pop(self, None)
        if self.overdue is not None:
            self.overdue.cancel()  # (a pending timer would keep this end alive until it fires)
            self.overdue = None

    def data_received(self, data: bytes) -> None:
        if not self.welcomed:
            after = self._hello(data)
            if after is None:
                return
            data = after
        assert self.unpacker is not None
        self.unpacker.feed(data)
        arrived = 0
        for frame in self.unpacker:
            tag = frame[0]
            if tag == Frame.CALL:
                self.waiting[frame[1]] = frame[2]
                arrived = frame[1]
            elif tag == Frame.CANCEL:
                self._cancel(frame[1])
        if arrived:
            self.out.put(Frame.RECEIVED, arrived)
            self.out.flush()
            self._start_waiting()

    def _hello(self, data: bytes) -> bytes | None:
        """Check the first bytes against the hello, byte for byte (nothing a stranger sends
        is ever unpacked); what follows it, or ``None`` while it is incomplete or wrong."""
        hello = self.server.hello
        self.unchecked += data
        if len(self.unchecked) < len(hello):
            return None  # (never judged by a prefix: that would tell a stranger each right byte)
        head, rest = self.unchecked[:len(hello)], self.unchecked[len(hello):]
        self.unchecked = b""
        if not hmac.compare_digest(head, hello):
            self._cut()
            return None
        self.welcomed = True
        self._known()
        self.unpacker = msgpack.Unpacker(raw=False)
        self.out.put(Frame.WELCOME, self.server.incarnation)
        return rest

    def pause_writing(self) -> None:
        """The caller is behind (the kernel holds all it will of what it has not read):
        read none of its frames until it has taken the rest."""
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        """Everything written is in the kernel's hands: read on, and start what waited."""
        if self.transport is not None:
            self.transport.resume_reading()
            self._start_waiting()

    def _start_waiting(self) -> None:
        """Start the calls that arrived — only once their RECEIVED frame is in the kernel's
        hands: if this process dies before, the caller knows none of them ran (while it is
        not, :meth:`resume_writing` comes once it is)."""
        if self.transport is None or self.transport.is_closing() or not self.waiting \
                or self.transport.get_write_buffer_size():
            return
        waiting, self.waiting = self.waiting, {}
        for key, envelope in waiting.items():
            task = self.server.run(envelope)
            self.running[key] = task
            task.add_done_callback(functools.partial(self._finished, key))

    def _cancel(self, key: int) -> None:
        task = self.running.get(key)
        if task is not None:
            task.cancel()
        elif self.waiting.pop(key, None) is not None:
            self.out.put(Frame.OUTCOME, key, Outcome.CANCELLED)

    def _finished(self, key: int, done: "asyncio.Task[bytes]") -> None:
        self.running.pop(key, None)
        outcome = task_outcome(done)  # (read even when it goes nowhere: a failure is retrieved)
        if self.transport is None:
            return
        if self.transport.get_write_buffer_size() + self.out.size > self.server.outbox_max_bytes:
            self._cut()  # a caller that left this much unread (see OUTBOX_MAX_BYTES)
            return
        self.out.put(Frame.OUTCOME, key, outcome)

    def _write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def _cut(self) -> None:
        """Close at once, dropping whatever is still unsent; the caller sees its channel lost."""
        self._known()
        if self.transport is not None:
            self.transport.abort()
            self.transport = None
