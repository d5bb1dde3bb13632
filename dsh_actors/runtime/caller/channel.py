"""The caller's side of an executor's channel: calls streamed over a local socket.

A lane (:mod:`.lanes`) whose executor runs on the caller's own node asks it once, by an
actor call, where its channel listens (:mod:`.channel_server` is the executor's side)
and connects. From then on every call that carries nothing but its envelope goes as one
frame on that socket and its outcome comes back as one frame: no actor task per call or
per batch, and what one turn of the loop sends leaves in one write. Calls that carry a
plan's ref or a signal hub's handle (they need Ray's ownership rules) still go as actor
calls, and so does everything while no channel is open.

When the socket closes (the executor's process died, or it cut the channel off), each
call still waiting fails with :class:`~.errors.ChannelLost`: *reached* if the executor
had said it received the call (it may have run: the caller answers ``WORKER_CRASHED``),
*unreached* otherwise (nothing ran: the caller sends it to another executor). The lane
then opens a channel to the executor's next process, once Ray has restarted it.

Plain asyncio: tests drive it without Ray.
"""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any, Callable, Protocol, cast

import msgpack

from ...core.within import within
from ..errors import ChannelLost
from ..wire import Frame, Outbox

__all__ = ["Channel", "StreamedCall", "connect"]


class StreamedCall(Protocol):
    """What the channel needs of a call (a lane's ``SentCall``): its key on the channel, its
    route (the channel it went on: where a cancel goes), and how to settle it."""

    key: int
    route: Any

    def resolve(self, raw: bytes) -> None: ...

    def fail(self, exc: BaseException) -> None: ...


WELCOME_WAIT_S = 10.0
"""How long a new channel waits for the executor's welcome before it is given up."""


class Channel(asyncio.Protocol):
    """One lane's open channel to one executor (see the module docs); ``lost(channel)``
    is called once when it closes."""

    def __init__(self, secret: bytes, lost: Callable[["Channel"], None]) -> None:
        self._secret, self._lost = secret, lost
        loop = asyncio.get_running_loop()
        self.welcomed: asyncio.Future[str] = loop.create_future()
        self.ended: asyncio.Future[None] = loop.create_future()  # set when the socket closed
        self.pending: dict[int, "StreamedCall"] = {}
        self.received = 0  # the executor has every call up to this key
        self.closed = False
        self.closing = False  # closed from this side (its loop ends): not to be reopened
        self._keys = 0
        self._written = 0  # every call up to this key was handed to the socket
        self._queued = 0  # the last call queued for the next write
        self._unpacker = msgpack.Unpacker(raw=False)
        self._transport: asyncio.Transport | None = None
        self._out = Outbox(self._write)

    # --- asyncio's side -----------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not an isinstance check: uvloop's transports (the loop of Ray's async actors where
        # uvloop is installed) have the whole API without subclassing asyncio.Transport.
        self._transport = cast(asyncio.Transport, transport)
        self._transport.write(msgpack.packb([Frame.HELLO, self._secret]))

    def data_received(self, data: bytes) -> None:
        self._unpacker.feed(data)
        for frame in self._unpacker:
            tag = frame[0]
            if tag == Frame.OUTCOME:
                call = self.pending.pop(frame[1], None)
                if call is not None:
                    call.resolve(frame[2])
            elif tag == Frame.RECEIVED:
                self.received = frame[1]
            elif tag == Frame.WELCOME and not self.welcomed.done():
                self.welcomed.set_result(frame[1])

    def connection_lost(self, exc: Exception | None) -> None:
        # What the executor said before the socket closed decides which calls may have run:
        # read it all first (asyncio stops reading when a write fails). If the executor's end
        # is still open (this side closed it), its word is not final: whatever was written
        # may have arrived and run.
        final = self._read_to_the_end()
        self.closed, self._transport = True, None
        if not self.welcomed.done():
            self.welcomed.set_exception(ConnectionError("the executor closed its channel before it welcomed us"))
            self.welcomed.exception()  # retrieved: nobody may be waiting any more
        if not self.ended.done():
            self.ended.set_result(None)
        arrived = self.received if final else max(self.received, self._written)
        pending, self.pending = self.pending, {}
        for key, call in pending.items():
            call.fail(ChannelLost(reached=key <= arrived))
        self._lost(self)

    def _read_to_the_end(self) -> bool:
        """Feed what is still unread on the socket; ``True`` when the executor's end is
        closed (end of stream or reset), so nothing more will ever come."""
        try:
            fd = self._transport.get_extra_info("socket").fileno() if self._transport is not None else -1
        except Exception:  # noqa: BLE001 - no socket to read
            return False
        if fd < 0:
            return False
        while True:
            try:
                data = os.read(fd, 1 << 16)
            except BlockingIOError:
                return False
            except OSError:
                return True  # reset by a peer that died
            if not data:
                return True
            try:
                self.data_received(data)
            except Exception:  # noqa: BLE001 - a torn last frame: what was read stands
                return True

    # --- the lane's side ----------------------------------------------------------------

    def send(self, call: StreamedCall, envelope: bytes) -> None:
        """Send ``call`` (it resolves with its outcome, or fails with :class:`ChannelLost`)."""
        self._keys += 1
        call.key, call.route = self._keys, self
        if self.closed:
            call.fail(ChannelLost(reached=False))
            return
        self.pending[call.key] = call
        self._queued = call.key
        self._out.put(Frame.CALL, call.key, envelope)

    def cancel(self, call: StreamedCall) -> None:
        """Cancel ``call`` in the executor (it answers *cancelled* unless it finished)."""
        if call.key in self.pending:
            self._out.put(Frame.CANCEL, call.key)

    def close(self) -> None:
        """Close from this side (cancels queued this turn still leave first)."""
        self.closing = True
        if self._transport is not None:
            self._out.flush()
            self._transport.close()

    async def kept_open(self) -> None:
        """Wait until the socket closes; closes it if the waiting task is cancelled (its
        loop is shutting down, as at the end of ``asyncio.run``)."""
        try:
            await asyncio.shield(self.ended)
        finally:
            self.close()

    def discard(self) -> None:
        """Close the socket of a channel whose event loop was closed without cancelling its
        tasks (the transport cannot close itself then: it would call back on that loop)."""
        transport, self._transport, self.closed, self.closing = self._transport, None, True, True
        sock = getattr(transport, "_sock", None)
        if sock is not None:
            sock.close()
        elif transport is not None:  # uvloop's: no socket of its own to close; end the connection
            try:
                fd = transport.get_extra_info("socket").fileno()
                with socket.socket(fileno=os.dup(fd)) as duplicate:
                    duplicate.shutdown(socket.SHUT_RDWR)  # the executor reads its end; the fd dies with its loop
            except (OSError, AttributeError):
                pass

    def _write(self, data: bytes) -> None:
        if self._transport is not None:
            self._written = self._queued
            self._transport.write(data)


async def connect(address: str, secret: bytes, lost: Callable[[Channel], None]) -> Channel:
    """A channel to the executor listening at ``address``, once it has welcomed us."""
    loop = asyncio.get_running_loop()
    # Connected here, then handed over: uvloop (the loop of Ray's async actors where it is
    # installed) refuses an abstract-namespace address in create_unix_connection (EINVAL).
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        await loop.sock_connect(sock, address)
        _, channel = await loop.create_unix_connection(lambda: Channel(secret, lost), sock=sock)
    except BaseException:
        sock.close()
        raise
    try:
        await within(asyncio.shield(channel.welcomed), WELCOME_WAIT_S)
    except BaseException:
        channel.close()
        raise
    return channel
