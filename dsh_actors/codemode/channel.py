"""The host's side of a sandbox's pipes: non-blocking, bounded, never waiting on the child.

Frames are a 4-byte big-endian length and a msgpack body. :class:`FrameReader` decodes
what arrives as it arrives (from the event loop's reader callbacks); a declared length
over ``max_frame`` or a body that is not msgpack is a :class:`ChannelError` — the stream
can no longer be trusted, so the run ends with a coded error. :class:`PipeWriter` queues
outgoing bytes and lets the loop write them when the pipe has room; a child that stops
reading fills at most ``max_pending`` bytes, and then the run ends with a coded error
instead of blocking the host.
"""

from __future__ import annotations

import asyncio
import os
import struct
from typing import Any, Callable

import msgpack

__all__ = ["ChannelError", "FrameReader", "PipeWriter", "encode_frame", "read_available"]

HEADER = struct.Struct(">I")


class ChannelError(Exception):
    """The child broke the framing (oversized, undecodable) or stopped reading its replies."""


def encode_frame(message: dict[str, Any]) -> bytes:
    """One frame; strings travel as they are, lone surrogates included (``surrogatepass``)."""
    payload = msgpack.packb(message, use_bin_type=True, unicode_errors="surrogatepass")
    return HEADER.pack(len(payload)) + payload


MAX_CONTAINERS = 64
"""Maps and arrays one frame may decode to (the protocol's frames hold one or two): a frame
of a million empty maps is refused after the 64th, not built in full on the host."""


class _Counted:
    """Decoder hooks that stop a frame once it has built too many containers."""

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = MAX_CONTAINERS

    def map(self, value: Any) -> Any:
        self.left -= 1
        if self.left < 0:
            raise ChannelError(f"a frame of more than {MAX_CONTAINERS} maps and arrays")
        return value

    list = map


class FrameReader:
    """Incremental decoder: feed bytes, get whole frames; never holds more than one frame
    (plus what arrived with it), and consumes each feed in one pass (no per-frame copy of
    the rest of the buffer)."""

    def __init__(self, max_frame: int) -> None:
        self.max_frame = max_frame
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        self._buffer += data
        view = memoryview(self._buffer)
        frames = []
        offset = 0
        try:
            while len(view) - offset >= HEADER.size:
                (size,) = HEADER.unpack_from(view, offset)
                if size > self.max_frame:
                    raise ChannelError(f"frame of {size} bytes exceeds the {self.max_frame}-byte limit")
                end = offset + HEADER.size + size
                if len(view) < end:
                    break
                counted = _Counted()
                try:
                    frames.append(msgpack.unpackb(view[offset + HEADER.size:end], raw=False, strict_map_key=True,
                                                  unicode_errors="surrogatepass", object_hook=counted.map,
                                                  list_hook=counted.list))
                except ChannelError:
                    raise
                except Exception as exc:  # any decoder failure: the stream is not ours any more
                    raise ChannelError(f"undecodable frame ({type(exc).__name__})") from None
                offset = end
        finally:
            view.release()
        if offset:
            del self._buffer[:offset]
        return frames


def read_available(fd: int, limit: int = 65536) -> bytes | None:
    """What the pipe holds now (``b""`` when nothing is there yet, ``None`` at EOF)."""
    try:
        data = os.read(fd, limit)
    except BlockingIOError:
        return b""
    except OSError:
        return None
    return data or None


class PipeWriter:
    """Writes to a non-blocking pipe from the event loop; bounded, never blocking."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, max_pending: int,
                 on_error: Callable[[ChannelError], None]) -> None:
        self._loop, self._fd, self._max = loop, fd, max_pending
        self._pending = bytearray()
        self._on_error = on_error
        self._watching = False
        self._closed = False

    def write(self, data: bytes) -> None:
        if self._closed:
            return
        if len(self._pending) + len(data) > self._max:
            self.close()
            self._on_error(ChannelError(f"the sandbox stopped reading: more than {self._max} bytes of replies pending"))
            return
        self._pending += data
        self._flush()

    def _flush(self) -> None:
        while self._pending and not self._closed:
            try:
                written = os.write(self._fd, self._pending)
            except BlockingIOError:
                break
            except OSError:  # the child is gone: what it did not read no longer matters
                self._pending.clear()
                break
            del self._pending[:written]
        want = bool(self._pending) and not self._closed
        if want and not self._watching:
            self._loop.add_writer(self._fd, self._flush)
            self._watching = True
        elif not want and self._watching:
            self._loop.remove_writer(self._fd)
            self._watching = False

    def close(self) -> None:
        if self._watching:
            self._loop.remove_writer(self._fd)
            self._watching = False
        self._closed = True
        self._pending.clear()
