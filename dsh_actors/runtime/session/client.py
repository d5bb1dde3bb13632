"""Session logs on Ray: one writer actor per node serves many agents' logs, with group commit.

Each session keeps its own file and frame format (:mod:`dsh_actors.log.frames`). A
:class:`SessionWriter` actor on the node where the session was opened owns its file:
appends from every process reach it as batches — a process sends what its callers
appended while its previous batch was in flight, as one actor call — and the writer
commits whatever arrived while its previous commit ran as one group: each session's
frames written in order, then one sync covering every file written (``syncfs`` per file
system; ``fsync`` per file where that is missing). With the ``always`` policy an
append's response resolves only after the sync that covers its event, so nothing
acknowledged is lost across a kill of the writer, of its node's processes, or a power
cut. An append that was not acknowledged (its writer died first) fails with a coded
error: it may or may not be on disk, and is never retried behind the caller's back.

Reopening a session after its writer died — a crash mid-commit included — recovers
every acknowledged event and truncates a torn tail. A writer killed for good is made
again on first use; one Ray restarted has forgotten its sessions, and each client opens
its session there again before sending more. Where a session is open (its file, policy
and node) is what its writer answers (:class:`SessionDirectory`), so any process can find it
by id and append to it — nothing is written cluster-wide per session.
:class:`SessionLog` is the client (responses to await or block on); it pickles by id.
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
import weakref
from pathlib import Path
from typing import Any, Awaitable, Callable, Mapping

import msgpack
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ...core.errors import HarnessError, error_message
from ...log import FrameFile, FsyncPolicy, InvalidEventError, LogCorruptError, check_event, derive_messages
from ...log.mirror import EventMirror
from ..backoff import WHILE_RESTARTING
from ..coalesce import Coalescer
from ..errors import ACTOR_GONE, DEAD_ACTORS, RAY_ERROR, RayRuntimeError, remember_dead, translate
from ..local import ensure_ray
from ..response import Response, background_loop
from ..revive import live_actor, live_actor_async
from ..wire import DEFAULT_NAMESPACE

__all__ = ["SESSION_WRITER_OPTIONS", "SessionHeldError", "SessionLog", "SessionLogWriteError", "SessionWriter",
           "SessionWriterCore", "SessionWriterService"]

SESSION_WRITER_OPTIONS = {"num_cpus": 0, "max_restarts": -1, "max_task_retries": 0, "lifetime": "detached"}
"""Options of a node's session writer: restarted by Ray (its files are durable); an
append it was running is never retried. Detached: whichever process happens to make it,
it serves every process on its node and must not end with that one."""

_FSYNC_POLICIES = ("always", "interval", "never")
ABANDONED_S = 60.0
"""How long a session its (all dead) openers left must be idle before its writer closes it."""


class SessionLogWriteError(HarnessError):
    """The session log could not take an event: the disk refused it (full, file too big),
    or its writer died before acknowledging it (it may or may not be on disk)."""

    code = "LOG_WRITE_FAILED"


# --- the writer ---------------------------------------------------------------------------------

def _syncfs() -> Any:
    """libc's ``syncfs`` (one call syncs a whole file system), or ``None``."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.syncfs
    except (OSError, AttributeError):
        return None


_SYNCFS = _syncfs()


logger = logging.getLogger("dsh_actors.runtime")  # not `log`: that names a SessionLog here


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


# --- the client ----------------------------------------------------------------------------------

class _Batcher:
    """One loop's ops on one writer (opens, appends, closes), sent through a
    :class:`~.coalesce.Coalescer` (one actor call per batch). Appends and closes of a
    session the writer does not know (it restarted) are sent again, in the order they
    were made, once the session is opened there again."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self._ops: Coalescer[_Op] = Coalescer(self._send, _fail)

    def enqueue(self, op: tuple[Any, ...], reopen: Callable[[], Awaitable[Any]] | None = None) -> "asyncio.Future[Any]":
        """Queue ``op`` now (ops go out in the order they were queued); await the future
        for its result. ``reopen``: how an append or a close opens its session again."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._ops.add(_Op(op, reopen, future))
        return future

    async def _send(self, batch: list["_Op"]) -> None:
        packed = await self.handle.commit_batch.remote([o.op for o in batch])
        again = []
        for op, result in zip(batch, msgpack.unpackb(packed)):
            if result[0] == "not_open" and op.reopen is not None and op.tries < _OPEN_TRIES:
                again.append(op)
            elif not op.future.done():
                op.future.set_result(result)
        for session_id, reopen in {o.op[1]: o.reopen for o in again}.items():
            try:
                await reopen()  # type: ignore[misc]
            except Exception as exc:  # noqa: BLE001 — its callers hear it
                _fail([o for o in again if o.op[1] == session_id], exc)
        for op in again:
            op.tries += 1
        self._ops.put_back([o for o in again if not o.future.done()])  # first, in their order


def _fail(ops: list["_Op"], exc: Exception) -> None:
    """Every caller of these ops hears ``exc`` (the batch's call, or a reopen, failed)."""
    for op in ops:
        if not op.future.done():
            op.future.set_exception(exc)


class _Op:
    __slots__ = ("op", "reopen", "future", "tries")

    def __init__(self, op: tuple[Any, ...], reopen: Callable[[], Awaitable[Any]] | None,
                 future: "asyncio.Future[Any]") -> None:
        self.op, self.reopen, self.future = op, reopen, future
        self.tries = 0


_OPEN_TRIES = 3


_BATCHERS: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Batcher]]" = weakref.WeakKeyDictionary()


def _batcher(handle: Any) -> _Batcher:
    loop = asyncio.get_running_loop()
    per_loop = _BATCHERS.get(loop)
    if per_loop is None:
        per_loop = _BATCHERS[loop] = {}
    key = handle._actor_id.hex()
    if key not in per_loop:
        per_loop[key] = _Batcher(handle)
    return per_loop[key]


def _alive_nodes() -> list[str]:
    return [n["NodeID"] for n in ray.nodes() if n.get("Alive")]


def _existing_writer(namespace: str, node: str) -> Any:
    """``node``'s writer if it exists (never made by a lookup), else ``None`` (blocking)."""
    handle = _WRITERS.get((namespace, node))
    if handle is not None and handle._actor_id.hex() not in DEAD_ACTORS:
        return handle
    try:
        return ray.get_actor(writer_name(node), namespace=namespace)
    except ValueError:
        return None


async def _where(session_id: str, namespace: str, nodes: list[str]) -> dict[str, Any] | None:
    """The record of ``session_id`` from the first of ``nodes``' writers that has it open."""
    async def ask(node: str) -> dict[str, Any] | None:
        handle = _WRITERS.get((namespace, node))
        if handle is None or handle._actor_id.hex() in DEAD_ACTORS:
            handle = await asyncio.to_thread(_existing_writer, namespace, node)
        if handle is None:
            return None
        for pause in WHILE_RESTARTING.pauses():  # a writer Ray is restarting still knows (its notes)
            try:
                return await handle.where.remote(session_id)  # type: ignore[no-any-return]
            except ACTOR_GONE as exc:
                remember_dead(exc)
                if pause is None or handle._actor_id.hex() in DEAD_ACTORS:  # dead for good: its sessions went with it
                    return None
                await asyncio.sleep(pause)
            except RAY_ERROR:
                return None
        return None

    for record in await asyncio.gather(*(ask(node) for node in nodes)):
        if record is not None:
            return record
    return None


def writer_name(node_id: str) -> str:
    return f"dsh-session-writer:{node_id}"


_WRITERS: dict[tuple[str, str], Any] = {}


def _writer_options(namespace: str, node: str) -> Callable[[], Any]:
    return lambda: SessionWriter.options(  # type: ignore[attr-defined]
        **SESSION_WRITER_OPTIONS, name=writer_name(node), namespace=namespace, get_if_exists=True,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
    ).remote()


def _writer(namespace: str, node: str) -> Any:
    """This process's handle of ``node``'s session writer: made (or found) and asked to
    answer once, then kept until it is seen dead for good (blocking: for plain code)."""
    handle = _WRITERS.get((namespace, node))
    if handle is None or handle._actor_id.hex() in DEAD_ACTORS:
        handle, _ = live_actor(_writer_options(namespace, node), lambda h: h.ping.remote(),
                               what=f"the session writer of node {node[:12]}", unavailable=RayRuntimeError)
        _WRITERS[(namespace, node)] = handle
    return handle


async def _writer_async(namespace: str, node: str) -> Any:
    """:func:`_writer` for async code: nothing blocks the event loop while the writer answers."""
    handle = _WRITERS.get((namespace, node))
    if handle is None or handle._actor_id.hex() in DEAD_ACTORS:
        handle, _ = await live_actor_async(_writer_options(namespace, node), lambda h: h.ping.remote(),
                                           what=f"the session writer of node {node[:12]}", unavailable=RayRuntimeError)
        _WRITERS[(namespace, node)] = handle
    return handle


class SessionLog:
    """Client of one session's log (``SessionLog.open(session_id, path)``): its events go
    to the session writer of the node it was opened on."""

    def __init__(self, session_id: str, namespace: str, record: Mapping[str, Any], handle: Any = None) -> None:
        self._key = session_id
        self.namespace = namespace
        self._record = dict(record)
        self._writer: Any = handle
        self._waiting = 0  # appends waiting for the writer's handle to be looked up
        self._order: asyncio.Lock | None = None
        self._closed = False  # closed by this client, and nothing appended since
        self._mirror = EventMirror()  # what this client appended, at the indexes the writer gave

    @property
    def session_id(self) -> str:
        return self._key

    def __reduce__(self) -> tuple[Any, ...]:
        return (SessionLog, (self._key, self.namespace, self._record))

    def __repr__(self) -> str:
        return f"<SessionLog {self._key!r} at {self._record['path']}>"

    @classmethod
    def open(cls, session_id: str, path: str, *, fsync: FsyncPolicy = "always", fsync_interval_s: float = 0.05,
             namespace: str = DEFAULT_NAMESPACE) -> "SessionLog":
        """Open (or join) the session's log over the file at ``path`` — on this node's
        session writer, made on first use (or again, if it died), waited for while Ray
        restarts it — and record where it is open (blocking; in async code,
        :meth:`open_async`)."""
        log = cls._new(session_id, path, fsync, fsync_interval_s, namespace)
        for pause in WHILE_RESTARTING.pauses():
            try:
                ray.get(log._open_on(log._handle()), timeout=120)
                return log
            except ACTOR_GONE as exc:
                log._writer_failed(exc, pause is None)
                time.sleep(pause or 0)
            except ray.exceptions.RayTaskError as exc:  # the writer refused (SESSION_HELD): its own error
                raise translate(exc) from None
        raise AssertionError("unreachable")

    @classmethod
    async def open_async(cls, session_id: str, path: str, *, fsync: FsyncPolicy = "always",
                         fsync_interval_s: float = 0.05, namespace: str = DEFAULT_NAMESPACE) -> "SessionLog":
        """:meth:`open` for async code (the event loop is not blocked while the file opens)."""
        log = cls._new(session_id, path, fsync, fsync_interval_s, namespace)
        opened = await log._resent(lambda handle: log._queue_on(handle, ("open", *log._open_args())))
        if opened[0] == "error":
            if opened[1] != SessionHeldError.code:
                raise (LogCorruptError if opened[1] == LogCorruptError.code else SessionLogWriteError)(opened[2])
            await log._resent(log._open_on)  # on its own: the writer may take over what dead actors held
        return log

    async def _resent(self, send: Callable[[Any], Awaitable[Any]]) -> Any:
        """``send(writer)``, sent again while Ray restarts the writer (or after one dead
        for good is made again): for what runs nothing twice — opens and reads."""
        for pause in WHILE_RESTARTING.pauses():
            try:
                return await send(await self._handle_async())
            except ACTOR_GONE as exc:
                self._writer_failed(exc, pause is None)
                await asyncio.sleep(pause or 0)
            except ray.exceptions.RayTaskError as exc:  # the writer refused: its own error, not Ray's text
                raise translate(exc) from None
        raise AssertionError("unreachable")

    def _writer_failed(self, exc: BaseException, last: bool) -> None:
        """A writer call that ran nothing failed: one dead for good is made again at the
        next :meth:`_handle`, one restarting is waited for; the last attempt raises."""
        remember_dead(exc)
        if last:
            raise translate(exc, actor=RayRuntimeError, what=f"the session log {self._key!r}") from None

    @classmethod
    def _new(cls, session_id: str, path: str, fsync: FsyncPolicy, fsync_interval_s: float,
             namespace: str) -> "SessionLog":
        ensure_ray()
        if fsync not in _FSYNC_POLICIES:
            raise ValueError(f'fsync must be "always", "interval" or "never", got {fsync!r}')
        if not (isinstance(fsync_interval_s, (int, float)) and fsync_interval_s > 0):
            raise ValueError(f"fsync_interval_s must be a positive number of seconds, got {fsync_interval_s!r}")
        # Absolute here (the writer's working folder is not ours); the writer resolves links.
        record = {"path": os.path.abspath(path), "fsync": fsync, "interval": fsync_interval_s,
                  "node": ray.get_runtime_context().get_node_id()}
        return cls(session_id, namespace, record)

    @classmethod
    def find(cls, session_id: str, namespace: str = DEFAULT_NAMESPACE, *,
             near: str | None = None) -> "SessionLog | None":
        """The session's log if one is open (from any process), else ``None`` (blocking;
        in async code, :meth:`find_async`). The writers are asked: first the one of node
        ``near`` (default: this process's node — where an agent's calls run, its log
        usually is), then every other node's."""
        return asyncio.run_coroutine_threadsafe(cls.find_async(session_id, namespace, near=near),
                                                background_loop()).result()

    @classmethod
    async def find_async(cls, session_id: str, namespace: str = DEFAULT_NAMESPACE, *,
                         near: str | None = None) -> "SessionLog | None":
        """:meth:`find` for async code."""
        ensure_ray()
        near = near or ray.get_runtime_context().get_node_id()
        record = await _where(session_id, namespace, [near])
        if record is None:  # elsewhere, or nowhere: every other node's writer is asked
            nodes = await asyncio.to_thread(_alive_nodes)  # a GCS read: off the loop
            record = await _where(session_id, namespace, [n for n in nodes if n != near])
        return None if record is None else cls(session_id, namespace, record)

    def _open_args(self) -> tuple[Any, ...]:
        record = self._record
        return (self._key, record["path"], record["fsync"], record["interval"],
                ray.get_runtime_context().get_actor_id())  # None in a driver

    def _open_on(self, handle: Any, create: bool = True) -> Any:
        return handle.open.remote(*self._open_args(), create)

    def _handle(self) -> Any:
        """The writer's handle (one per node, shared by this process's clients); one seen
        dead for good is made again on its node (blocking: for plain code)."""
        handle = self._writer
        if handle is None or handle._actor_id.hex() in DEAD_ACTORS:
            self._writer = handle = _writer(self.namespace, self._record["node"])
        return handle

    async def _handle_async(self) -> Any:
        """:meth:`_handle` for async code (nothing blocks the event loop)."""
        handle = self._writer
        if handle is None or handle._actor_id.hex() in DEAD_ACTORS:
            self._writer = handle = await _writer_async(self.namespace, self._record["node"])
        return handle

    async def _enqueued(self, op: tuple[Any, ...]) -> "asyncio.Future[Any]":
        """Queue ``op`` on the writer, in the order ops were made: while the writer's
        handle is being looked up (first use, or after it died), later ops queue behind
        the lookup instead of overtaking the ones waiting for it."""
        handle = self._writer
        if not self._waiting and handle is not None and handle._actor_id.hex() not in DEAD_ACTORS:
            return self._queue_on(handle, op)
        if self._order is None:
            self._order = asyncio.Lock()
        self._waiting += 1
        try:
            async with self._order:  # FIFO: the order the ops were made
                return self._queue_on(await self._handle_async(), op)
        finally:
            self._waiting -= 1

    def _queue_on(self, handle: Any, op: tuple[Any, ...]) -> "asyncio.Future[Any]":
        # A restarted writer forgot the session: an append or a close opens it there again
        # (its file recovered) and is sent once more, so a close still answers the summary.
        reopen = (lambda: self._open_on(handle, create=op[0] == "append")) if op[0] in ("append", "close") else None
        return _batcher(handle).enqueue(op, reopen)

    async def _writer_call(self, method: str, *args: Any) -> Any:
        """A read on the writer (opening the session there again if it restarted)."""
        async def send(handle: Any) -> Any:
            answer = await getattr(handle, method).remote(self._key, *args)
            if answer is None:  # a restarted writer forgot the session: open it again, ask again
                await self._open_on(handle)
                answer = await getattr(handle, method).remote(self._key, *args)
            return answer
        return await self._resent(send)

    async def _append(self, events: list[Any]) -> list[int]:
        # Validated and packed here, once, where the events were made (InvalidEventError
        # at once); the writer only frames and writes the bytes.
        checked = [check_event(e) for e in events]
        payloads = [msgpack.packb(e, use_bin_type=True) for e in checked]
        self._closed = False  # an append after a close opens the session again
        try:
            result = await (await self._enqueued(("append", self._key, payloads)))
        except ACTOR_GONE as exc:
            remember_dead(exc)
            raise SessionLogWriteError(
                f"the session writer of {self._key!r} died before acknowledging {len(events)} event(s); "
                "they may or may not be on disk") from None
        if result[0] == "ok":
            self._mirror.remember(result[1], checked)
            return list(result[1])
        if result[0] == "not_open":
            raise SessionLogWriteError(f"the session log {self._key!r} could not be opened on its writer")
        _, code, message = result
        raise (InvalidEventError if code == InvalidEventError.code else SessionLogWriteError)(message)

    def append(self, event: Mapping[str, Any]) -> Response[int]:
        """Append one event; resolves (to its index) once it is on disk per the fsync policy."""
        async def run() -> int:
            return (await self._append([event]))[0]
        return Response(run)

    def append_many(self, events: list[Mapping[str, Any]]) -> Response[list[int]]:
        """Append events in order, all or none (each is validated first), under one sync."""
        return Response(lambda: self._append(list(events)))

    def events(self, since: int = 0) -> Response[list[dict[str, Any]]]:
        return Response(lambda: self._writer_call("events", since))

    def known_events(self, since: int = 0) -> Response[list[dict[str, Any]]]:
        """The events from ``since`` up to this client's last acknowledged append (at
        least): what it appended itself is answered from memory, and the writer is asked
        only from the first index another process filled (an ask's record, a ``run_code``
        sub-call) — so an agent loop reading its history back each turn costs no actor
        call. Everything logged before that append is included; events other processes
        append after it are seen by the next read that follows another append of this
        client (or by :meth:`events`, which always asks the writer). Read-only: the
        events are shared with later reads."""
        async def run() -> list[dict[str, Any]]:
            gap = self._mirror.gap(since)
            if gap is not None:
                self._mirror.fill(gap, await self._writer_call("events", gap))
                if self._mirror.gap(since) is not None:  # older than what the mirror keeps
                    return await self._writer_call("events", since)  # type: ignore[no-any-return]
            return self._mirror.read(since)
        return Response(run)

    def derive_messages(self) -> Response[list[dict[str, Any]]]:
        return Response(lambda: self._writer_call("derive_messages"))

    def info(self) -> Response[dict[str, Any]]:
        return Response(lambda: self._writer_call("info"))

    def close(self) -> Response[dict[str, Any] | None]:
        """Close the session (its file is closed once no other session shares it) and
        forget where it was open. Resolves to its summary as it closed — :meth:`info`
        with how many events of each type it holds (``by_type``) and how many of those
        say ``is_error`` (``errors_by_type``). A writer that restarted since opens the
        session again (its file recovered) to answer; ``None`` when no writer could
        answer, or this client closed it already. The close rides the writer's next
        batch with other sessions' appends, after this client's own."""
        async def run() -> dict[str, Any] | None:
            if self._closed:
                return None
            op = ("close", self._key)
            try:
                try:
                    result = await (await self._enqueued(op))  # in order, behind this client's appends
                except ACTOR_GONE as exc:  # the writer died under it: close there once it is back
                    remember_dead(exc)
                    result = await self._resent(lambda handle: self._queue_on(handle, op))
            except (HarnessError, OSError, ray.exceptions.RayTaskError):  # the writer, or the file, is gone for good
                return None
            self._closed = True
            return result[1] if result[0] == "ok" else None
        return Response(run)


SessionWriter = ray.remote(SessionWriterService)
"""The session writer actor class (options: :data:`SESSION_WRITER_OPTIONS`)."""
