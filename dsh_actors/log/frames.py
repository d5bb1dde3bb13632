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
checksum or encoding does not hold) is truncated. A frame whose header declares more
bytes than the file holds (or exactly as many) is the last one, torn: what follows is its
own payload, whatever frame-like bytes it holds. Otherwise a bad frame *followed by* committed frames — a valid
frame ends exactly where the file ends, after the damage — is corruption, not a torn
write, and is refused loudly rather than silently dropped. The search after a bad frame
runs in C over the damaged bytes alone, so its cost follows the damage, not the file. An append that fails part-way (disk full,
a file too big) is cut back to the last good frame before anything else is acknowledged.
"""

from __future__ import annotations

import array
import os
import struct
import sys
import threading
import time
import zlib
from pathlib import Path
from dataclasses import dataclass, field
from typing import Any, Iterator, Literal

import msgpack

from ..core.errors import HarnessError

__all__ = ["FrameFile", "FsyncPolicy", "HEADER", "LogCorruptError", "LogScan", "read_records", "scan_log"]

HEADER = b"DSHLOG1\n"
_PREFIX = struct.Struct(">II")
FsyncPolicy = Literal["always", "interval", "never"]
_MAX_FRAME = 64 * 2**20


class LogCorruptError(HarnessError):
    """A session log holds a damaged frame before its end (not a torn tail)."""

    code = "LOG_CORRUPT"


def _decode(payload: bytes) -> Any:
    return msgpack.unpackb(payload, raw=False, strict_map_key=True)


def _frame_at(data: bytes, offset: int) -> tuple[Any, int] | None:
    """The value of the valid frame at ``offset`` and where it ends, or ``None``."""
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


def _frames_from(data: bytes, offset: int) -> tuple[list[Any], int]:
    """The valid frames from ``offset`` on, up to the first bad one; and where they end."""
    records = []
    while offset < len(data):
        frame = _frame_at(data, offset)
        if frame is None:
            break
        records.append(frame[0])
        offset = frame[1]
    return records, offset


def _frame_ending_at(data: bytes, bad: int, end: int) -> int | None:
    """The offset of a valid frame after ``bad`` that ends exactly at ``end`` (at the end of
    the file: committed data after damage), or ``None``.

    Such a frame at offset ``c`` has the length ``end - c - 8`` in its first four
    bytes. For each residue of ``c`` mod 4 the candidate length fields are aligned 4-byte
    words; XOR-ing them, as one big integer, with the expected lengths leaves a zero word
    exactly where they match — all in C, linear in the damaged bytes."""
    first, last = bad + 1, end - _PREFIX.size  # candidate offsets
    for residue in range(4):
        start = first + residue
        count = (last - start) // 4 + 1
        if count <= 0:
            continue
        actual = data[start:start + 4 * count]
        expected = array.array("I", range(end - start - 8, end - start - 8 - 4 * count, -4))
        if sys.byteorder == "little":
            expected.byteswap()
        diff = (int.from_bytes(actual, "big") ^ int.from_bytes(expected.tobytes(), "big")).to_bytes(4 * count, "big")
        at = diff.find(b"\0\0\0\0")
        while at != -1:
            if at % 4 == 0 and _frame_at(data, start + at) is not None:  # its length says it ends at end
                return start + at
            at = diff.find(b"\0\0\0\0", at + (4 - at % 4 if at % 4 else 4))
    return None


def _last_frame(data: bytes, offset: int) -> bool:
    """Whether the (bad) frame at ``offset`` is the file's last: its header is cut, or
    declares a plausible length reaching the end of the file or past it (a frame cut
    short). Everything after its header is then its own torn payload — whatever frame-like
    bytes that payload holds."""
    if offset + _PREFIX.size > len(data):
        return True
    length = _PREFIX.unpack_from(data, offset)[0]
    return length <= _MAX_FRAME and offset + _PREFIX.size + length >= len(data)


@dataclass
class LogScan:
    """What a scan of a log's bytes found: the committed ``records`` before any damage;
    ``end``, where they end; and when the file goes on past them, either a torn tail
    (``torn_bytes``) or ``damage``: committed frames resume at ``resumes_at`` and
    ``after`` holds them."""

    records: list[Any]
    end: int
    size: int
    torn_bytes: int = 0
    resumes_at: int | None = None
    after: list[Any] = field(default_factory=list)

    @property
    def damaged(self) -> bool:
        return self.resumes_at is not None

    def describe(self, path: Any) -> str:
        """A sentence on what is damaged, where, and what was recovered."""
        if self.resumes_at is not None:
            return (f"{path}: damaged bytes {self.end}-{self.resumes_at} (of {self.size}); recovered "
                    f"{len(self.records)} event(s) before the damage and {len(self.after)} after it; whatever "
                    "the damaged bytes held is lost — restore the file from a copy to recover it")
        if self.torn_bytes:
            return f"{path}: a torn tail of {self.torn_bytes} byte(s) after {len(self.records)} event(s) (an append cut short)"
        return f"{path}: {len(self.records)} event(s), intact"


def scan_log(data: bytes, path: Any = "log", *, recover_after: bool = False) -> LogScan:
    """Scan a log file's bytes (see :class:`LogScan`); raises :class:`LogCorruptError`
    for a file that is not a session log. ``recover_after`` also reads back the frames
    after damage (walking back from the file's end, frame by frame: for viewers)."""
    if not data.startswith(HEADER):
        raise LogCorruptError(f"{path} is not a dsh-actors session log (bad header)")
    records, end = _frames_from(data, len(HEADER))
    scan = LogScan(records, end, len(data))
    if end < len(data):
        if _last_frame(data, end):  # the last append, torn: what follows is its own payload
            scan.torn_bytes = len(data) - end
            return scan
        resumes = _frame_ending_at(data, end, len(data))
        if resumes is None:
            scan.torn_bytes = len(data) - end
            return scan
        while recover_after and (earlier := _frame_ending_at(data, end, resumes)) is not None:
            resumes = earlier
        scan.resumes_at = resumes
        scan.after = _frames_from(data, resumes)[0] if recover_after else []
    return scan


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
        self._dirty = False  # written since the last fsync
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._records: list[Any] = []
        self._size = 0  # where the last good frame ends
        self._file = open(self.path, "a+b")
        try:
            self._recover()
        except BaseException:
            self._file.close()
            raise

    def _recover(self) -> None:
        self._file.seek(0)
        data = self._file.read()
        if not data or (not data.startswith(HEADER) and HEADER.startswith(data)):  # new, or its header torn
            if data:
                self._truncate(0, len(data))
            # Synced by the first sync its events get, not on its own: a crash before that
            # leaves it empty or its header torn, which the next open writes again.
            self._file.write(HEADER)
            self._file.flush()
            self._dirty = True
            self._size = len(HEADER)
            return
        scan = scan_log(data, self.path)
        if scan.damaged:
            raise LogCorruptError(
                f"{self.path}: damaged frame at byte {scan.end} followed by committed frames (from byte "
                f"{scan.resumes_at}); refusing to drop committed events (restore from a copy; "
                "`dsh-actors show` reads what is recoverable)")
        self._records = scan.records
        self._size = scan.end
        self._dirty = True  # whoever wrote it last may have died before its sync: the next sync covers it
        if scan.torn_bytes:
            self._truncate(scan.end, scan.torn_bytes)

    def _truncate(self, offset: int, dropped: int) -> None:
        self._file.truncate(offset)
        self._file.seek(0, os.SEEK_END)
        self.truncated_bytes = dropped
        self._dirty = True
        self._sync(force=True)

    def _sync(self, force: bool = False) -> None:
        """Flush; fsync per the policy, or (``force``) if anything is not synced yet."""
        self._file.flush()
        now = time.monotonic()
        if self._dirty and (force or self.fsync == "always" or (
            self.fsync == "interval" and now - self._last_sync >= self.fsync_interval_s
        )):
            os.fsync(self._file.fileno())
            self._last_sync = now
            self._dirty = False

    def append(self, value: Any) -> int:
        """Write one frame; returns its index. Flushed (and fsynced per policy) on return."""
        return self.append_many([value])[0]

    def append_many(self, values: list[Any]) -> list[int]:
        """Write one frame per value, in order, with one flush (and one fsync per policy)
        covering them all; returns their indexes. Nothing is written if one is too big."""
        indexes = self.write_many(values)
        with self._lock:
            self._sync()
        return indexes

    def write_many(self, values: list[Any]) -> list[int]:
        """:meth:`append_many` without the fsync (flushed to the operating system only):
        a group commit writes many files, then syncs them together (:meth:`sync`).

        A write that fails part-way (disk full, file too big) is cut back to the last good
        frame before the error is raised, so the file never holds a half frame that a
        later, acknowledged append would follow."""
        return self.write_payloads([msgpack.packb(value, use_bin_type=True) for value in values])

    def write_payloads(self, payloads: list[bytes]) -> list[int]:
        """:meth:`write_many` of values already packed (each must be one msgpack value)."""
        for payload in payloads:
            if len(payload) > _MAX_FRAME:
                raise ValueError(f"a frame holds at most {_MAX_FRAME} bytes; this one is {len(payload)}")
        values = [msgpack.unpackb(payload, raw=False, strict_map_key=True) for payload in payloads]
        with self._lock:
            self._file.seek(0, os.SEEK_END)
            chunk = b"".join(_PREFIX.pack(len(p), zlib.crc32(p)) + p for p in payloads)
            try:
                self._file.write(chunk)
                self._file.flush()
            except BaseException:
                self._cut_back()
                raise
            self._size += len(chunk)
            self._dirty = True
            first = len(self._records)
            self._records.extend(values)
            return list(range(first, len(self._records)))

    def _cut_back(self) -> None:
        """Drop whatever a failed write left past the last good frame (buffered or on disk)."""
        try:
            self._file.close()  # its buffer may hold part of the failed chunk: never flush it
        except OSError:
            pass
        self._file = open(self.path, "r+b")
        self._file.truncate(self._size)
        self._file.seek(0, os.SEEK_END)
        os.fsync(self._file.fileno())

    def sync(self) -> None:
        """Flush, and fsync what is not synced yet (whatever the policy)."""
        with self._lock:
            self._sync(force=True)

    def sync_due(self) -> bool:
        """Whether the policy wants a sync after a write now (a group commit asks)."""
        return self.fsync == "always" or (
            self.fsync == "interval" and time.monotonic() - self._last_sync >= self.fsync_interval_s)

    def synced(self) -> None:
        """Record a sync made for this file by someone else (one ``syncfs`` for a group)."""
        self._last_sync = time.monotonic()
        self._dirty = False

    def at_its_path(self) -> bool:
        """Whether the file this holds open is still the one at its path (not removed or
        replaced since: appends to a file nobody can reach would be lost)."""
        try:
            here, there = os.fstat(self.fileno()), os.stat(self.path)
        except OSError:
            return False
        return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)

    def fileno(self) -> int:
        return self._file.fileno()

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
    simply not read; viewers must never repair a log another process may own). Raises
    :class:`LogCorruptError` for a file damaged before committed frames — its message says
    what is damaged, where, and what is recoverable (:func:`scan_log` reads it)."""
    data = Path(path).read_bytes()
    scan = scan_log(data, path)
    if scan.damaged:
        raise LogCorruptError(scan_log(data, path, recover_after=True).describe(path))
    return scan.records
