"""Any process's side of a started environment: :func:`connect` to its address.

An environment's address names its socket (in its backend's 0700 folder) and a secret
(who holds the address may use it). :class:`EnvClient` speaks to the environment's init
directly (:mod:`._wire`): one connection per client and event loop, opened on first use,
requests in flight at once, each answered under its id. Nothing passes through the
backend that started the environment.
"""

from __future__ import annotations

import asyncio
import itertools
import urllib.parse
from typing import Any

from ..core.within import within
from . import _wire
from .contract import CommandResult, DiskBoundError, EnvironmentGoneError, EnvironmentStartError, EnvPathError

__all__ = ["EnvClient", "connect", "format_address", "parse_address"]

ANSWER_GRACE_S = 10.0
"""How much longer than a command's own ``timeout_s`` a client waits for its answer before
it calls the environment gone: the init kills the command at ``timeout_s`` and answers
within milliseconds, unless it is dead or wedged."""

FILE_TIMEOUT_S = 120.0
"""How long a file request may take (64 MiB, written by the init, at disk speed)."""

SCHEME = "unix:"


def format_address(socket_path: str, env_id: str, secret: str) -> str:
    """``unix:<socket path>?id=<environment id>#<secret>`` (path and id percent-encoded)."""
    return f"{SCHEME}{urllib.parse.quote(socket_path)}?id={urllib.parse.quote(env_id, safe='')}#{secret}"


def parse_address(address: str) -> tuple[str, str, str]:
    """``(socket path, environment id, secret)`` of an address; ``ValueError`` otherwise."""
    if not isinstance(address, str) or not address.startswith(SCHEME) or "#" not in address or "?id=" not in address:
        raise ValueError(f"not an environment address: {address!r}")
    rest, _, secret = address[len(SCHEME):].rpartition("#")
    path, _, env_id = rest.rpartition("?id=")
    return urllib.parse.unquote(path), urllib.parse.unquote(env_id), secret


class _Link(asyncio.Protocol):
    """One open connection: frames parsed as they arrive (no reader task: a command's
    answer costs one callback), and the answers awaited on it by id (the hello's is 0)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.frames = _wire.FrameBuffer()
        self.waiting: dict[int, asyncio.Future[Any]] = {}
        self.ids = itertools.count(1)
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.frames.feed(data)
        except ValueError:
            self.close()
            return
        for message in frames:
            request = message.get("id") if isinstance(message, dict) else None
            future = self.waiting.pop(request, None) if isinstance(request, int) else None
            if future is not None and not future.done():
                future.set_result(message)

    def connection_lost(self, exc: Exception | None) -> None:
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()
        for future in self.waiting.values():
            if not future.done():
                future.set_exception(EnvironmentGoneError("the environment ended or died"))
        self.waiting.clear()

    def expect(self, request: int) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.waiting[request] = future
        return future

    def send(self, message: dict[str, Any]) -> None:
        assert self.transport is not None
        self.transport.write(_wire.encode(message))

    def ask(self, message: dict[str, Any]) -> tuple[int, asyncio.Future[Any]]:
        request = next(self.ids)
        future = self.expect(request)
        self.send({**message, "id": request})
        return request, future


class EnvClient:
    """A started environment, from this process (the :class:`~.contract.Environment`
    protocol). Picklable: it travels as its address and connects again where it lands."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._path, self.id, self._secret = parse_address(address)
        self._link: _Link | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening: asyncio.Lock | None = None
        self._ended = False

    def __reduce__(self) -> tuple[Any, ...]:
        return (connect, (self.address,))

    def __repr__(self) -> str:
        return f"EnvClient({self.id!r})"

    async def _open(self) -> _Link:
        loop = asyncio.get_running_loop()
        if self._ended:
            raise EnvironmentGoneError(f"environment {self.id!r} was ended", unsent=True)
        if self._link is not None and not self._link.closed and self._loop is loop:
            return self._link
        if self._opening is None or self._loop is not loop:
            self._opening, self._loop, self._link = asyncio.Lock(), loop, None
        async with self._opening:
            if self._link is not None and not self._link.closed:
                return self._link
            try:
                _, link = await loop.create_unix_connection(_Link, self._path)
            except OSError as exc:
                raise EnvironmentGoneError(f"environment {self.id!r} is gone ({exc.strerror})", unsent=True) from None
            hello = link.expect(0)
            link.send({"op": "hello", "secret": self._secret})
            try:
                answer = await within(hello, FILE_TIMEOUT_S)
            except (EnvironmentGoneError, asyncio.TimeoutError):
                link.close()
                raise EnvironmentGoneError(f"environment {self.id!r} refused this address", unsent=True) from None
            if answer.get("ok") != self.id:
                link.close()
                raise EnvironmentGoneError(f"the socket of {self.id!r} answers for {answer.get('ok')!r}", unsent=True)
            self._link = link
            return link

    async def _ask(self, message: dict[str, Any], timeout_s: float) -> Any:
        link = await self._open()
        request, future = link.ask(message)
        timer = asyncio.get_running_loop().call_later(timeout_s, self._expired, link, future, timeout_s)
        try:
            answer = await future
        except asyncio.CancelledError:
            link.waiting.pop(request, None)
            if not link.closed and message["op"] == "run":
                link.send({"op": "cancel", "id": request})  # kills what it started
            raise
        finally:
            timer.cancel()
        if "error" in answer:
            code, text = answer["error"].get("code"), answer["error"].get("message", "")
            if code == "ENV_PATH":
                raise EnvPathError(text)
            if code == "ENV_DISK":
                raise DiskBoundError(text)
            raise EnvironmentStartError(f"environment {self.id!r} refused the request: {text}")
        return answer.get("ok")

    def _expired(self, link: _Link, future: asyncio.Future[Any], timeout_s: float) -> None:
        if not future.done():
            future.set_exception(EnvironmentGoneError(f"environment {self.id!r} did not answer in {timeout_s:.0f} s"))
            link.close()

    async def run(self, command: str, *, timeout_s: float, cwd: str | None = None,
                  max_output: int = 65536) -> CommandResult:
        """``bash -c command`` inside the environment (see the contract)."""
        if not isinstance(command, str):
            raise TypeError("a command is a str")
        if len(command.encode()) > _wire.MAX_COMMAND:
            raise ValueError(f"a command is at most 128 KiB ({_wire.MAX_COMMAND} bytes): write a longer script to a "
                             f"file first (write_file), then run it")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise ValueError(f"timeout_s is a positive number of seconds; got {timeout_s!r}")
        if isinstance(max_output, bool) or not isinstance(max_output, int) or not 0 <= max_output <= _wire.MAX_DATA:
            raise ValueError(f"max_output is a whole number from 0 to {_wire.MAX_DATA}; got {max_output!r}")
        answer = await self._ask({"op": "run", "command": command, "timeout_s": float(timeout_s), "cwd": cwd,
                                  "max_output": max_output}, timeout_s + ANSWER_GRACE_S)
        return CommandResult(**answer)

    async def read_file(self, path: str, *, limit: int | None = None) -> bytes:
        """The bytes of ``path`` inside the workspace (at most ``limit``; see the contract)."""
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise ValueError(f"limit is a whole number of bytes; got {limit!r}")
        data = await self._ask({"op": "read", "path": path, "limit": limit}, FILE_TIMEOUT_S)
        return bytes(data)

    async def write_file(self, path: str, data: bytes) -> None:
        """Write ``path`` inside the workspace (see the contract)."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError("data is bytes")
        if len(data) > _wire.MAX_DATA:
            raise EnvPathError(f"a write is at most {_wire.MAX_DATA} bytes; write larger files with a command")
        await self._ask({"op": "write", "path": path, "data": bytes(data)}, FILE_TIMEOUT_S)

    async def end(self) -> None:
        """Ask the environment to end: its init kills every process in it, answers once
        they are gone, and exits; its backend then releases its cgroups and socket. Ending
        an environment already gone is fine; afterwards every call fails ``ENV_GONE``."""
        if self._ended:
            return
        try:
            await self._ask({"op": "end"}, FILE_TIMEOUT_S)
        except EnvironmentGoneError:
            pass
        finally:
            self._ended = True
            await self.close()

    async def close(self) -> None:
        """Close this client's connection (the environment goes on)."""
        link, self._link = self._link, None
        if link is not None:
            link.close()


def connect(address: str) -> EnvClient:
    """A client of the environment at ``address`` (from its backend's ``start``), usable
    from any process of the node; it connects on its first call."""
    return EnvClient(address)
