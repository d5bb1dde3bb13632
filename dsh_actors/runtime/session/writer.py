"""The session writer: one detached actor per node owns the files of the sessions opened there.

Appends from every process reach it as batches; it commits what arrived while its previous
commit ran as one group: each session's frames in order, then one sync covering every file
written (``syncfs`` per file system, else ``fsync`` per file). Under ``always`` an append is
acknowledged only after the sync that covers it. Where a session is open is what its writer
answers (:class:`SessionDirectory`, with recovery notes in Ray's session folder).
:class:`SessionWriterCore` is the plain writer (no Ray); :class:`SessionWriterService` puts
it on a thread of the actor.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import ctypes.util
import hashlib
import logging
import os
import time
from pathlib import Path
from typing import Any

import msgpack
import ray

from ...core.errors import HarnessError, error_message
from ...log import FrameFile, FsyncPolicy, InvalidEventError, derive_messages

__all__ = ["ABANDONED_S", "FSYNC_POLICIES", "SESSION_WRITER_OPTIONS", "SessionDirectory", "SessionHeldError",
           "SessionLogWriteError", "SessionWriter", "SessionWriterCore", "SessionWriterService"]

SESSION_WRITER_OPTIONS = {"num_cpus": 0, "max_restarts": -1, "max_task_retries": 0, "lifetime": "detached"}
"""Options of a node's session writer: restarted by Ray (its files are durable); an
append it was running is never retried. Detached: whichever process happens to make it,
it serves every process on its node and must not end with that one."""

FSYNC_POLICIES = ("always", "interval", "never")
ABANDONED_S = 60.0
"""How long a session its (all dead) openers left must be idle before its writer closes it."""


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
logger = logging.getLogger("dsh_actors.runtime")


class SessionHeldError(HarnessError, ValueError):
    """The session is open over another file by a process that may still write to it."""

    code = "SESSION_HELD"


def _all_dead(actor_ids: set[str | None]) -> bool:
    """Whether every one of these actors is dead (a GCS read per actor: off the loop)."""
    from ray._private import state

    return all(state.actors(actor_id=a).get("State", "DEAD") == "DEAD" for a in actor_ids if a)


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

    def commit(self, ops: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        """Carry out each op in order, then one sync covering every file written whose
        policy wants one; a result per op. The ops: ``("append", session id, packed
        events)`` → ``("ok", indexes)``, ``("not_open",)`` or ``("error", code, message)``
        (nothing of it written); ``("open", session id, path, fsync, interval, holder)``
        → ``("ok", info)`` or an error (never a take-over: that is :meth:`open`'s, asked
        on its own); ``("close", session id)`` → ``("ok", summary)`` or ``("not_open",)``, its
        file synced and closed in its turn. Events arrive validated and packed
        by their clients (once, where they were made); a payload that is not one msgpack
        value is refused here."""
        results: list[tuple[Any, ...]] = []
        paths: list[str | None] = []  # the file each append result depends on
        written: dict[str, FrameFile] = {}
        failed: dict[str, str] = {}
        for op in ops:
            kind, session_id = op[0], op[1]
            path = self._sessions.get(session_id)
            paths.append(path if kind == "append" else None)
            if kind == "open":
                try:
                    results.append(("ok", self.open(session_id, *op[2:])))
                except Exception as exc:  # noqa: BLE001 — this open's own result, never the group's
                    code = getattr(exc, "code", None) or SessionLogWriteError.code  # SESSION_HELD, LOG_CORRUPT, …
                    results.append(("error", code, f"{op[2]}: {error_message(exc)}"))
            elif kind == "close" and path is not None:
                summary = self.summary(session_id)
                try:
                    self.close(session_id)
                except OSError as exc:  # its file's last sync failed
                    failed[str(path)] = error_message(exc)
                if path not in self._files:
                    written.pop(path, None)  # closed: synced (or failed) in its close
                results.append(("ok", summary))
            elif path is None:  # an append or close of a session not open here
                results.append(("not_open",))
            else:
                results.append(self._write(path, op[2]))
                self._used[session_id] = time.monotonic()
                if results[-1][0] == "ok":
                    written[path] = self._files[path]
        failed.update(self._sync([f for f in written.values() if f.sync_due()]))
        for i, (path, result) in enumerate(zip(paths, results)):
            if result[0] == "ok" and path in failed:  # written, but not known to be durable
                results[i] = ("error", SessionLogWriteError.code, f"{path}: the sync failed: {failed[path]}")
        return results

    def _write(self, path: str, payloads: list[bytes]) -> tuple[Any, ...]:
        try:
            return ("ok", self._files[path].write_payloads(payloads))
        except (msgpack.UnpackException, ValueError, TypeError) as exc:
            return ("error", InvalidEventError.code, f"not a packed session event: {error_message(exc)}")
        except OSError as exc:  # cut back to the last good frame already
            return ("error", SessionLogWriteError.code, f"{path}: {error_message(exc)}")

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


class SessionWriterService:
    """One node's session writer: a thin shell over :class:`SessionWriterCore` whose
    commits run one at a time on a thread of their own, so requests that arrive during a
    commit form the next group."""

    def __init__(self, directory: str | None = None) -> None:
        """``directory``: the file noting which sessions are open here (default: one in Ray's
        session folder on this node, named for this writer)."""
        self._core = SessionWriterCore(directory if directory is not None else _directory_file())
        self._node = _this_node()
        self._thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="dsh-commit")
        self._waiting: list[tuple[list[tuple[str, list[Any]]], asyncio.Future[Any]]] = []
        self._committing = False
        self._sweeper: asyncio.Task[None] | None = None

    def _sweep_later(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.ensure_future(self._sweep())

    async def _sweep(self) -> None:
        """While sessions are open: every ``ABANDONED_S``, close those left idle that long by
        actors that are all dead (an episode runner killed mid-episode, a killed driver's
        runners): this detached writer outlives every job, and kept their files open for
        ever (97 after four killed drivers; its file limit is 20,000)."""
        while True:
            await asyncio.sleep(ABANDONED_S)
            candidates = await self._in_thread(self._core.idle_held_by_actors, ABANDONED_S)
            for session_id, holders in candidates.items():
                if await asyncio.to_thread(_all_dead, set(holders)):
                    await self._in_thread(self._core.close, session_id)
                    logger.info("closed session %r: every process that opened it is dead", session_id)

    async def _in_thread(self, fn: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, fn, *args)

    async def open(self, session_id: str, path: str, fsync: FsyncPolicy, fsync_interval_s: float,
                   holder: str | None = None, create: bool = True) -> dict[str, Any]:
        """Open ``session_id`` over ``path``. Held over another file by actors that all
        died (an episode runner killed mid-episode never closes its logs), it is closed
        there and opened here: the same agent id serves a later run. ``create``: see
        :meth:`SessionWriterCore.open`."""
        opening = (self._core.open, session_id, path, fsync, fsync_interval_s, holder)
        try:
            return await self._in_thread(*opening, False, create)  # type: ignore[no-any-return]
        except SessionHeldError:
            holders = await self._in_thread(self._core.holders, session_id)  # the core lives on that thread
            if None in holders or not await asyncio.to_thread(_all_dead, holders):
                raise
        logger.warning("session %r was left open by dead actors %s: opening it over %s", session_id,
                       sorted(h for h in holders if h), path)
        return await self._in_thread(*opening, True, create)  # type: ignore[no-any-return]

    async def commit_batch(self, batch: list[tuple[Any, ...]]) -> bytes:
        """Commit ``batch`` (ops: see :meth:`SessionWriterCore.commit`) with whatever else
        is waiting; its results, msgpack-packed (one bytes value is the cheapest thing Ray
        returns). Opens and closes ride here with the appends, so an episode's log costs
        no actor call of its own."""
        self._sweep_later()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting.append((batch, future))
        if not self._committing:
            self._committing = True
            asyncio.ensure_future(self._commit_groups())
        return msgpack.packb(await future)  # type: ignore[no-any-return]

    async def _commit_groups(self) -> None:
        try:
            while self._waiting:
                group, self._waiting = self._waiting, []
                flat = [request for batch, _ in group for request in batch]
                try:
                    results = await self._in_thread(self._core.commit, flat)
                except Exception as exc:  # noqa: BLE001 — every waiter hears it
                    for _, future in group:
                        future.set_exception(exc)
                    continue
                start = 0
                for batch, future in group:
                    future.set_result(results[start:start + len(batch)])
                    start += len(batch)
        finally:
            self._committing = False

    # Reads answer ``None`` for a session this writer does not have open (it restarted
    # since): the client opens it again and asks once more, so a read is one call.

    def events(self, session_id: str, since: int = 0) -> list[dict[str, Any]] | None:
        return self._core.file(session_id).records(since) if self._core.is_open(session_id) else None

    def derive_messages(self, session_id: str) -> list[dict[str, Any]] | None:
        return derive_messages(self._core.file(session_id).records()) if self._core.is_open(session_id) else None

    def info(self, session_id: str) -> dict[str, Any] | None:
        return self._core.info(session_id) if self._core.is_open(session_id) else None

    async def where(self, session_id: str) -> dict[str, Any] | None:
        """Where ``session_id`` is open on this writer (its record, this node), else ``None``."""
        record = await self._in_thread(self._core.directory.where, session_id)  # the core lives on that thread
        return None if record is None else {**record, "node": self._node}

    def ping(self) -> str:
        return "pong"


def _this_node() -> str | None:
    try:
        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - not in a Ray process (a test of the plain class)
        return None


def _directory_file() -> str | None:
    """This writer's directory notes, in Ray's session folder on its node (``None`` outside Ray)."""
    try:
        context = ray.get_runtime_context()
        name, namespace = context.get_actor_name(), context.namespace
        folder = ray._private.worker._global_node.get_session_dir_path()
    except Exception:  # noqa: BLE001 - not an actor of a Ray node
        return None
    if not name:
        return None
    tag = hashlib.sha256(f"{namespace}\0{name}".encode()).hexdigest()[:16]
    return os.path.join(folder, f"dsh-session-writer-{tag}.notes")


SessionWriter = ray.remote(SessionWriterService)
"""The session writer actor class (options: :data:`SESSION_WRITER_OPTIONS`)."""
