"""The session writer's plain part (no Ray): the sessions one writer owns, their group
commit, the notes that let its successor say where each is open, and the ops it commits.

A commit carries ops (:class:`Open`, :class:`Append`, :class:`Close`) from many clients,
each answered by a :class:`Reply`: each session's frames written in order, then one sync
covering every file written (``syncfs`` per file system, else ``fsync`` per file).
:mod:`dsh_actors.runtime.session` puts it on an actor, one per node.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import time
from pathlib import Path
from typing import Any, Literal, NamedTuple, Union

import msgpack

from ..core.errors import HarnessError, error_message
from .events import InvalidEventError
from .frames import FrameFile, FsyncPolicy

__all__ = ["FSYNC_POLICIES", "Append", "Close", "Op", "Open", "Reply", "SessionDirectory", "SessionHeldError",
           "SessionLogWriteError", "SessionWriterCore"]

FSYNC_POLICIES = ("always", "interval", "never")


class Open(NamedTuple):
    """Open (or join) a session over ``path``; ``holder``: the opening actor's id (``None``:
    a driver). Answered ``ok`` with the session's info, or an error (never a take-over:
    that is :meth:`SessionWriterCore.open`'s, asked on its own)."""

    session_id: str
    path: str
    fsync: FsyncPolicy
    interval: float
    holder: str | None = None


class Append(NamedTuple):
    """Append events, validated and msgpack-packed by their client (once, where they were
    made). Answered ``ok`` with their indexes, ``not_open``, or an error (nothing of them
    written; a payload that is not one msgpack value is refused)."""

    session_id: str
    payloads: list[bytes]


class Close(NamedTuple):
    """Close a session, its file synced and closed in its turn. Answered ``ok`` with its
    summary (:meth:`SessionWriterCore.summary`), or ``not_open``."""

    session_id: str


Op = Union[Open, Append, Close]


class Reply(NamedTuple):
    """One op's answer; travels as a plain array (``Reply(*packed)`` reads it back)."""

    kind: Literal["ok", "not_open", "error"]
    value: Any = None
    code: str = ""  # (errors)
    message: str = ""

    @classmethod
    def ok(cls, value: Any) -> "Reply":
        return cls("ok", value)

    @classmethod
    def error(cls, code: str, message: str) -> "Reply":
        return cls("error", None, code, message)


NOT_OPEN = Reply("not_open")


class SessionLogWriteError(HarnessError):
    """The session log could not take an event: the disk refused it (full, file too big),
    or its writer died before acknowledging it (it may or may not be on disk)."""

    code = "LOG_WRITE_FAILED"


def _syncfs() -> Any:
    """libc's ``syncfs`` (one call syncs a whole file system), or ``None``."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.syncfs
    except (OSError, AttributeError):
        return None


_SYNCFS = _syncfs()


class SessionHeldError(HarnessError, ValueError):
    """The session is open over another file by a process that may still write to it."""

    code = "SESSION_HELD"


def _note_line(*note: Any) -> bytes:
    return msgpack.packb(list(note)).hex().encode() + b"\n"


class SessionDirectory:
    """Where each session a writer holds is open — its file, fsync policy and interval —
    so any process can find a session by id (:meth:`SessionLog.find`) by asking the
    writers, and no cluster-wide store is written per session.

    With a ``path`` (on the writer's node), every open and close is also noted in that
    file, one write call each (a process death keeps it: the page cache survives it). A
    writer Ray restarted reads its predecessor's notes: the sessions it had open are
    still found (their clients open them again on their next append), until they are
    opened or closed here."""

    _COMPACT_AT = 4096

    def __init__(self, path: str | None = None) -> None:
        self._open: dict[str, tuple[str, str, float]] = {}
        self._left: dict[str, tuple[str, str, float]] = {}  # open in a dead predecessor
        self._path = path
        self._lines = 0
        if path is not None:
            self._left = self._read(path)
            self._rewrite()

    @staticmethod
    def _read(path: str) -> dict[str, tuple[str, str, float]]:
        found: dict[str, tuple[str, str, float]] = {}
        try:
            with open(path, "rb") as notes:
                for line in notes:
                    try:
                        note = msgpack.unpackb(bytes.fromhex(line.decode().strip()))
                    except (ValueError, msgpack.UnpackException):
                        continue  # a torn last line
                    if note[0] == "open":
                        found[note[1]] = (note[2], note[3], note[4])
                    else:
                        found.pop(note[1], None)
        except FileNotFoundError:
            pass
        return found

    def _rewrite(self) -> None:
        """Start the notes again with only what is open (or left open) now."""
        fresh = f"{self._path}.{os.getpid()}"
        with open(fresh, "wb") as notes:
            notes.writelines(_note_line("open", session_id, *record)
                             for session_id, record in {**self._left, **self._open}.items())
        os.replace(fresh, self._path)  # type: ignore[arg-type]
        self._lines = len(self._left) + len(self._open)

    def _note(self, *note: Any) -> None:
        if self._path is None:
            return
        with open(self._path, "ab") as notes:  # one write call: nothing held open between notes
            notes.write(_note_line(*note))
        self._lines += 1
        if self._lines > self._COMPACT_AT + 4 * len(self._open):
            self._rewrite()

    def opened(self, session_id: str, path: str, fsync: str, interval: float) -> None:
        record = (path, fsync, interval)
        self._left.pop(session_id, None)
        if self._open.get(session_id) != record:
            self._open[session_id] = record
            self._note("open", session_id, *record)

    def closed(self, session_id: str) -> None:
        if self._open.pop(session_id, None) is not None or self._left.pop(session_id, None) is not None:
            self._note("close", session_id)

    def where(self, session_id: str) -> dict[str, Any] | None:
        """``{path, fsync, interval}`` of ``session_id`` if it is open here (or was, in a
        predecessor, and nobody closed it since), else ``None``."""
        record = self._open.get(session_id) or self._left.get(session_id)
        return None if record is None else {"path": record[0], "fsync": record[1], "interval": record[2]}


class SessionWriterCore:
    """The sessions one writer owns and their group commit, without Ray."""

    def __init__(self, directory: str | None = None) -> None:
        """``directory``: a file where this writer notes which sessions it has open (see
        :class:`SessionDirectory`), so its successor on the node can still say where each is."""
        self._files: dict[str, FrameFile] = {}  # by resolved path: sessions may share a file
        self._sessions: dict[str, str] = {}  # session id -> resolved path
        self._holders: dict[str, set[str | None]] = {}  # session id -> its openers' actor ids (None: a driver)
        self._used: dict[str, float] = {}  # session id -> when it was last opened or written (monotonic)
        self.directory = SessionDirectory(directory)

    def open(self, session_id: str, path: str, fsync: FsyncPolicy, fsync_interval_s: float,
             holder: str | None = None, take_over: bool = False, create: bool = True) -> dict[str, Any]:
        """Open (or join) ``session_id`` over ``path``; ``holder``: the opening actor's id.
        Open over another file, it raises :class:`SessionHeldError` — unless ``take_over``
        (its holders are known dead): then it is closed there first. Without ``create``
        a missing file raises :class:`FileNotFoundError` (a close never makes one)."""
        resolved = str(Path(path).resolve())
        stale = self._files.get(resolved)
        if stale is not None and not stale.at_its_path():
            # Its file was removed or replaced under it (an episode run again starts a new
            # log where its dead attempt's was): whoever joined it would write where no one
            # can read. Every session on it ends; this open starts the file anew.
            for session_id_on_it in [s for s, p in self._sessions.items() if p == resolved]:
                self.close(session_id_on_it)
        if not create and resolved not in self._files and not os.path.exists(resolved):
            raise FileNotFoundError(f"{resolved}: the session's log is gone")
        if take_over and self._sessions.get(session_id, resolved) != resolved:
            self.close(session_id)
        if self._sessions.get(session_id, resolved) != resolved:
            raise SessionHeldError(
                f"session {session_id!r} is already open over {self._sessions[session_id]} by a process that is "
                "still alive (or a driver); close it there first, or open the log under another session id")
        if resolved not in self._files:
            self._files[resolved] = FrameFile(resolved, fsync=fsync, fsync_interval_s=fsync_interval_s)
        self._sessions[session_id] = resolved
        self._holders.setdefault(session_id, set()).add(holder)
        self._used[session_id] = time.monotonic()
        self.directory.opened(session_id, resolved, fsync, fsync_interval_s)
        return self.info(session_id)

    def holders(self, session_id: str) -> set[str | None]:
        """The actor ids of the processes that opened ``session_id`` (``None``: a driver)."""
        return set(self._holders.get(session_id, ()))

    def is_open(self, session_id: str) -> bool:
        return session_id in self._sessions

    def commit(self, ops: list[Op]) -> list[Reply]:
        """Carry out each op in order (see :class:`Open`, :class:`Append`, :class:`Close`),
        then one sync covering every file written whose policy wants one; a reply per op.
        An op's failure is its own reply, never the group's."""
        replies: list[Reply] = []
        paths: list[str | None] = []  # the file each append's reply depends on
        written: dict[str, FrameFile] = {}
        failed: dict[str, str] = {}
        for op in ops:
            path = self._sessions.get(op.session_id)
            paths.append(path if isinstance(op, Append) else None)
            if isinstance(op, Open):
                replies.append(self._open(op))
            elif path is None:  # an append or close of a session not open here
                replies.append(NOT_OPEN)
            elif isinstance(op, Close):
                summary = self.summary(op.session_id)
                try:
                    self.close(op.session_id)
                except OSError as exc:  # its file's last sync failed
                    failed[path] = error_message(exc)
                if path not in self._files:
                    written.pop(path, None)  # closed: synced (or failed) in its close
                replies.append(Reply.ok(summary))
            else:
                replies.append(self._write(path, op.payloads))
                self._used[op.session_id] = time.monotonic()
                if replies[-1].kind == "ok":
                    written[path] = self._files[path]
        failed.update(self._sync([f for f in written.values() if f.sync_due()]))
        for i, (path, reply) in enumerate(zip(paths, replies)):
            if reply.kind == "ok" and path in failed:  # written, but not known to be durable
                replies[i] = Reply.error(SessionLogWriteError.code, f"{path}: the sync failed: {failed[path]}")
        return replies

    def _open(self, op: Open) -> Reply:
        try:
            return Reply.ok(self.open(*op))
        except Exception as exc:  # noqa: BLE001 — this open's own reply, never the group's
            code = getattr(exc, "code", None) or SessionLogWriteError.code  # SESSION_HELD, LOG_CORRUPT, …
            return Reply.error(code, f"{op.path}: {error_message(exc)}")

    def _write(self, path: str, payloads: list[bytes]) -> Reply:
        try:
            return Reply.ok(self._files[path].write_payloads(payloads))
        except (msgpack.UnpackException, ValueError, TypeError) as exc:
            return Reply.error(InvalidEventError.code, f"not a packed session event: {error_message(exc)}")
        except OSError as exc:  # cut back to the last good frame already
            return Reply.error(SessionLogWriteError.code, f"{path}: {error_message(exc)}")

    @staticmethod
    def _sync(files: list[FrameFile]) -> dict[str, str]:
        """Sync ``files``: one ``syncfs`` per file system when more than one file waits,
        else ``fsync`` each. Returns the paths whose sync failed (with why)."""
        failed: dict[str, str] = {}
        by_device: dict[int, list[FrameFile]] = {}
        for file in files:
            by_device.setdefault(os.fstat(file.fileno()).st_dev, []).append(file)
        for group in by_device.values():
            if len(group) > 1 and _SYNCFS is not None and _SYNCFS(group[0].fileno()) == 0:
                for file in group:
                    file.synced()
                continue
            for file in group:
                try:
                    file.sync()
                except OSError as exc:
                    failed[str(file.path)] = error_message(exc)
        return failed

    def file(self, session_id: str) -> FrameFile:
        path = self._sessions.get(session_id)
        if path is None:
            raise KeyError(session_id)
        return self._files[path]

    def info(self, session_id: str) -> dict[str, Any]:
        file = self.file(session_id)
        return {"path": str(file.path), "events": len(file), "fsync": file.fsync,
                "recovered_truncated_bytes": file.truncated_bytes}

    def summary(self, session_id: str) -> dict[str, Any]:
        """:meth:`info`, with how many events of each type the session holds
        (``by_type``) and how many of those say ``is_error`` (``errors_by_type``): what
        a report counts, without shipping the events."""
        info = self.info(session_id)
        by_type: dict[str, int] = {}
        errors: dict[str, int] = {}
        for event in self.file(session_id).records():
            kind = event.get("type") if isinstance(event, dict) else None
            if isinstance(kind, str):
                by_type[kind] = by_type.get(kind, 0) + 1
                if event.get("is_error") is True:
                    errors[kind] = errors.get(kind, 0) + 1
        return {**info, "by_type": by_type, "errors_by_type": errors}

    def idle_held_by_actors(self, idle_s: float) -> dict[str, set[str]]:
        """Sessions untouched for ``idle_s`` whose openers are all actors (not drivers,
        whose death nobody can ask about), with those actors' ids: candidates to close."""
        now = time.monotonic()
        return {session_id: {h for h in holders if h is not None} for session_id, holders in self._holders.items()
                if holders and None not in holders and now - self._used.get(session_id, now) >= idle_s}

    def close(self, session_id: str) -> None:
        """Close ``session_id``, and its file (synced first) unless another session shares it."""
        self._used.pop(session_id, None)
        self._holders.pop(session_id, None)
        self.directory.closed(session_id)
        path = self._sessions.pop(session_id, None)
        if path is not None and path not in self._sessions.values():
            self._files.pop(path).close()


