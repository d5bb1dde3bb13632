"""The executor's side of its channel: calls from processes on its node, over a local socket.

An actor call costs about as much CPU whatever it carries (≈0.7 ms in the caller and
≈0.9 ms in an async actor here), so CPU-trivial calls spend most of their time in Ray's
machinery. A caller on the executor's node can instead stream its calls over a Unix
socket the executor listens on (:mod:`.channel` is the caller's side): one frame per
call and per outcome (:class:`~.wire.Frame`), many per write, no task per call. Ray
still places, restarts and addresses the executor; it hands out the socket's address and
secret (:meth:`ChannelServer.open`, behind the actor's ``channel`` method), so only a
process Ray let call the executor can connect.

What the channel promises, like the actor calls it stands in for:

- a call runs only after its caller was told it arrived (:attr:`~.wire.Frame.RECEIVED`
  leaves before any call it covers starts), so when the executor dies, the caller knows
  which calls may have run (``WORKER_CRASHED``) and which never arrived (sent again,
  elsewhere);
- a cancel reaches its call whether it comes before the call started or while it runs;
- every call answers exactly one outcome frame, or none when the socket is gone.

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
from typing import Awaitable, Callable

import msgpack

from .mailboxes import task_outcome
from .wire import Frame, Outbox, Outcome

__all__ = ["ChannelServer"]

HELLO_WAIT_S = 10.0
"""How long a connection may stay without its hello (a stranger is cut off then)."""


def _address() -> str:
    if sys.platform.startswith("linux"):
        return f"\0dsh-executor-{uuid.uuid4().hex}"
    return os.path.join(tempfile.mkdtemp(prefix="dsh-executor-"), "channel")


class ChannelServer:
    """Serves ``run(envelope) -> outcome bytes`` to callers on this node (see the module
    docs); ``incarnation`` names this executor process in every welcome."""

    def __init__(self, run: Callable[[bytes], Awaitable[bytes]], incarnation: str) -> None:
        self._run, self.incarnation = run, incarnation
        self.secret = secrets.token_bytes(16)
        self._opening: asyncio.Future[str] | None = None
        self._server: asyncio.AbstractServer | None = None
        self.connections: set[_ExecutorEnd] = set()
        self.served = 0  # calls started from the channel (a count for tests and operators)

    async def open(self) -> tuple[str, bytes]:
        """Listen (once) and answer ``(address, secret)`` for a caller to connect with."""
        if self._opening is None:
            self._opening = asyncio.ensure_future(self._listen())
        return await asyncio.shield(self._opening), self.secret

    async def _listen(self) -> str:
        address = _address()
        self._server = await asyncio.get_running_loop().create_unix_server(lambda: _ExecutorEnd(self), address)
        return address

    async def close(self) -> None:
        """Stop listening and cut every connection (their callers see the channel lost)."""
        if self._server is not None:
            self._server.close()
            for end in list(self.connections):
                end._close()
            await self._server.wait_closed()

    def run(self, envelope: bytes) -> "asyncio.Task[bytes]":
        self.served += 1
        return asyncio.ensure_future(self._run(envelope))


class _ExecutorEnd(asyncio.Protocol):
    """One caller's connection: its calls, as tasks of this loop."""

    def __init__(self, server: ChannelServer) -> None:
        self.server = server
        self.unpacker = msgpack.Unpacker(raw=False)
        self.transport: asyncio.Transport | None = None
        self.welcomed = False
        self.hello = msgpack.packb([Frame.HELLO, server.secret])  # the exact bytes a caller must send first
        self.unchecked = b""  # what arrived before the hello was checked
        self.start_due = False
        self.running: dict[int, asyncio.Task[bytes]] = {}
        self.waiting: dict[int, bytes] = {}  # arrived, held until their RECEIVED frame has left
        self.out = Outbox(self._write)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.connections.add(self)
        asyncio.get_running_loop().call_later(HELLO_WAIT_S, self._hello_overdue)

    def connection_lost(self, exc: Exception | None) -> None:
        # The caller is gone: its calls still finish (a body may be half way through a
        # side effect), and their outcomes go nowhere.
        self.server.connections.discard(self)
        self.transport = None
        self.waiting.clear()

    def data_received(self, data: bytes) -> None:
        if not self.welcomed:
            after = self._hello(data)
            if after is None:
                return
            data = after
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
            if not self.start_due:
                self._start_waiting()

    def _hello(self, data: bytes) -> bytes | None:
        """Check the first bytes against the hello, byte for byte (nothing a stranger sends
        is ever unpacked); what follows it, or ``None`` while it is incomplete or wrong."""
        self.unchecked += data
        if len(self.unchecked) < len(self.hello):
            return None  # (never judged by a prefix: that would tell a stranger each right byte)
        head, rest = self.unchecked[:len(self.hello)], self.unchecked[len(self.hello):]
        self.unchecked = b""
        if not hmac.compare_digest(head, self.hello):
            self._close()
            return None
        self.welcomed = True
        self.out.put(Frame.WELCOME, self.server.incarnation)
        return rest

    def _hello_overdue(self) -> None:
        if not self.welcomed:
            self._close()

    def _start_waiting(self) -> None:
        """Start the calls that arrived — only once their RECEIVED frame is in the kernel's
        hands: if this process dies before, the caller knows none of them ran."""
        self.start_due = False
        if self.transport is None or self.transport.is_closing() or not self.waiting:
            return
        if self.transport.get_write_buffer_size():
            self.start_due = True
            asyncio.get_running_loop().call_later(0.001, self._start_waiting)
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
        self.out.put(Frame.OUTCOME, key, task_outcome(done))

    def _write(self, data: bytes) -> None:
        if self.transport is not None:
            self.transport.write(data)

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()
