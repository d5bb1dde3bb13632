"""An append-only file of msgpack frames: length-prefixed, checksummed, repaired on open.

File layout: the 8-byte header ``DSHLOG1\\n``, then frames. A frame is a 4-byte
big-endian payload length, the 4-byte CRC-32 of the payload, and the payload (one
msgpack value). :meth:`FrameFile.append` writes the whole frame and flushes it to the
operating system before it returns, so a crash of the writing *process* loses nothing
that was acknowledged. Whether it also ``fsync``\\ s (surviving a machine crash or power
loss) is the :data:`FsyncPolicy`:

* ``"always"`` — fsync before every append returns (default: nothing acknowledged is lost);
* ``"interval"`` — fsync when at least ``fsync_interval_s`` passed since the last one;
* ``"never"`` — leave it to the operating system.

On open, frames are scanned; a torn tail (a frame cut short, or a last frame whose
checksum or encoding does not hold) is truncated. A bad frame *followed by* good data is
corruption, not a torn write, and is refused loudly rather than silently dropped.
"""

from __future__ import annotations

import os
import struct
import threading
import time
import zlib
from pathlib import Path
from typing import Any, Iterator, Literal

import msgpack

from ..core.errors import HarnessError

__all__ = ["FrameFile", "FsyncPolicy", "LogCorruptError", "HEADER", "read_records"]

HEADER = b"DSHLOG1\n"
_PREFIX = struct.Struct(">II")
FsyncPolicy = Literal["always", "interval", "never"]
_MAX_FRAME = 64 * 2**20


class LogCorruptError(HarnessError):
    """A session log holds a damaged frame before its end (not a torn tail)."""

    code = "LOG_CORRUPT"


def _decode(payload: bytes) -> Any:
    return msgpack.unpackb(payload, raw=False, strict_map_key=True)


class FrameFile:
    """One append-only frame file. Not shared between processes: one writer owns it."""

    def __init__(self, path: str | os.PathLike[str], *, fsync: FsyncPolicy = "always",
                 fsync_interval_s: float = 0.05) -> None:
        if fsync not in ("always", "interval", "never"):
            raise ValueError(f'fsync must be "always", "interval" or "never", got {fsync!r}')
        if not (isinstance(fsync_interval_s, (int, float)) and fsync_interval_s > 0):
            raise ValueError("fsync_interval_s must be a positive number of seconds")
        self.path = Path(path)
        self.fsync = fsync
        self.fsync_interval_s = float(fsync_interval_s)
        self.truncated_bytes = 0
        self._lock = threading.Lock()
        self._last_sync = 0.0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._records: list[Any] = []
        self._file = open(self.path, "a+b")
        try:
            self._recover()
        except BaseException:
            self._file.close()
            raise

    def _recover(self) -> None:
        self._file.seek(0)
        data = self._file.read()
        if not data:
            self._file.write(HEADER)
            self._sync(force=True)
            return
        if not data.startswith(HEADER):
            if HEADER.startswith(data):  # the header itself was torn
                self._truncate(0, len(data))
                self._file.write(HEADER)
                self._sync(force=True)
                return
            raise LogCorruptError(f"{self.path} is not a dsh-actors session log (bad header)")
        offset = len(HEADER)
        while offset < len(data):
            frame = self._frame_at(data, offset)
            if frame is None:
                if self._valid_frame_follows(data, offset):
                    raise LogCorruptError(
                        f"{self.path}: damaged frame at byte {offset} followed by valid frames; "
                        "refusing to drop committed events (restore from a copy)"
                    )
                self._truncate(offset, len(data) - offset)
                return
            value, end = frame
            self._records.append(value)
            offset = end

    def _frame_at(self, data: bytes, offset: int) -> tuple[Any, int] | None:
        if offset + _PREFIX.size > len(data):
            return None
        length, crc = _PREFIX.unpack_from(data, offset)
        start, end = offset + _PREFIX.size, offset + _PREFIX.size + length
        if length > _MAX_FRAME or end > len(data):
            return None
        payload = data[start:end]
        if zlib.crc32(payload) != crc:
            return None
        try:
            return _decode(payload), end
        except Exception:
            return None

    def _valid_frame_follows(self, data: bytes, offset: int) -> bool:
        for candidate in range(offset + 1, len(data) - _PREFIX.size):
            if self._frame_at(data, candidate) is not None:
                length = _PREFIX.unpack_from(data, candidate)[0]
                if length > 0:
                    return True
        return False

    def _truncate(self, offset: int, dropped: int) -> None:
        self._file.truncate(offset)
        self._file.seek(0, os.SEEK_END)
        self.truncated_bytes = dropped
        self._sync(force=True)

    def _sync(self, force: bool = False) -> None:
        self._file.flush()
        now = time.monotonic()
        if force or self.fsync == "always" or (
            self.fsync == "interval" and now - self._last_sync >= self.fsync_interval_s
        ):
            os.fsync(self._file.fileno())
            self._last_sync = now

    def append(self, value: Any) -> int:
        """Write one frame; returns its index. Flushed (and fsynced per policy) on return."""
        return self.append_many([value])[0]

    def append_many(self, values: list[Any]) -> list[int]:
        """Write one frame per value, in order, with one flush (and one fsync per policy)
        covering them all; returns their indexes. Nothing is written if one is too big."""
        payloads = [msgpack.packb(value, use_bin_type=True) for value in values]
        for payload in payloads:
            if len(payload) > _MAX_FRAME:
                raise ValueError(f"a frame holds at most {_MAX_FRAME} bytes; this one is {len(payload)}")
        with self._lock:
            self._file.seek(0, os.SEEK_END)
            self._file.write(b"".join(_PREFIX.pack(len(p), zlib.crc32(p)) + p for p in payloads))
            self._sync()
            first = len(self._records)
            self._records.extend(msgpack.unpackb(payload, raw=False) for payload in payloads)
            return list(range(first, len(self._records)))

    def records(self, since: int = 0) -> list[Any]:
        """Every committed value from index ``since`` on."""
        with self._lock:
            return list(self._records[since:])

    def __len__(self) -> int:
        return len(self._records)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.records())

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._sync(force=True)
                self._file.close()

    def __enter__(self) -> "FrameFile":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def read_records(path: str | os.PathLike[str]) -> list[Any]:
    """The committed values of a frame file, read without changing it (a torn tail is
    simply not read; viewers must never repair a log another process may own)."""
    data = Path(path).read_bytes()
    if not data.startswith(HEADER):
        raise LogCorruptError(f"{path} is not a dsh-actors session log (bad header)")
    records, offset = [], len(HEADER)
    while offset + _PREFIX.size <= len(data):
        length, crc = _PREFIX.unpack_from(data, offset)
        payload = data[offset + _PREFIX.size: offset + _PREFIX.size + length]
        if len(payload) < length or zlib.crc32(payload) != crc:
            break
        try:
            records.append(_decode(payload))
        except Exception:
            break
        offset += _PREFIX.size + length
    return records
