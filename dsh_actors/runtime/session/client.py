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
import os
from typing import Any, Awaitable, Callable, Mapping

import msgpack
import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ...core.errors import HarnessError
from ...log import FsyncPolicy, InvalidEventError, LogCorruptError, check_event
from ...log.mirror import EventMirror
from ..backoff import WHILE_RESTARTING
from ..coalesce import Coalescer
from ..errors import ACTOR_GONE, DEAD_ACTORS, RAY_ERROR, RayRuntimeError, remember_dead, translate
from ..local import ensure_ray
from ..process import current
from ..response import Response, background_loop
from ..revive import kept_actor_async
from ..wire import DEFAULT_NAMESPACE, session_writer_name
from ...log.writer import (FSYNC_POLICIES, Append, Close, Op, Open, Reply, SessionHeldError, SessionLogWriteError)
from .writer import SESSION_WRITER_OPTIONS, SessionWriter

__all__ = ["SessionLog"]


class _Batcher:
    """One loop's ops on one writer (opens, appends, closes), sent through a
    :class:`~.coalesce.Coalescer` (one actor call per batch). Appends and closes of a
    session the writer does not know (it restarted) are sent again, in the order they
    were made, once the session is opened there again."""

    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self._ops: Coalescer[_Op] = Coalescer(self._send, _fail)

    def enqueue(self, op: Op, reopen: Callable[[], Awaitable[Any]] | None = None) -> "asyncio.Future[Reply]":
        """Queue ``op`` now (ops go out in the order they were queued); await the future
        for its result. ``reopen``: how an append or a close opens its session again."""
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._ops.add(_Op(op, reopen, future))
        return future

    async def _send(self, batch: list["_Op"]) -> None:
        packed = await self.handle.commit_batch.remote([o.op for o in batch])
        again = []
        for op, packed_reply in zip(batch, msgpack.unpackb(packed)):
            reply = Reply(*packed_reply)
            if reply.kind == "not_open" and op.reopen is not None and op.tries < _OPEN_TRIES:
                again.append(op)
            elif not op.future.done():
                op.future.set_result(reply)
        for session_id, reopen in {o.op.session_id: o.reopen for o in again}.items():
            try:
                await reopen()  # type: ignore[misc]
            except Exception as exc:  # noqa: BLE001 — its callers hear it
                _fail([o for o in again if o.op.session_id == session_id], exc)
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

    def __init__(self, op: Op, reopen: Callable[[], Awaitable[Any]] | None,
                 future: "asyncio.Future[Reply]") -> None:
        self.op, self.reopen, self.future = op, reopen, future
        self.tries = 0


_OPEN_TRIES = 3




def _batcher(handle: Any) -> _Batcher:
    loop = asyncio.get_running_loop()
    batchers = current().session_batchers
    per_loop = batchers.get(loop)
    if per_loop is None:
        per_loop = batchers[loop] = {}
    key = handle._actor_id.hex()
    if key not in per_loop:
        per_loop[key] = _Batcher(handle)
    return per_loop[key]


def _alive_nodes() -> list[str]:
    return [n["NodeID"] for n in ray.nodes() if n.get("Alive")]


def _existing_writer(namespace: str, node: str) -> Any:
    """``node``'s writer if it exists (never made by a lookup), else ``None`` (blocking)."""
    handle = current().session_writers.get((namespace, node))
    if handle is not None and handle._actor_id.hex() not in DEAD_ACTORS:
        return handle
    try:
        return ray.get_actor(session_writer_name(node), namespace=namespace)
    except ValueError:
        return None


async def _where(session_id: str, namespace: str, nodes: list[str]) -> dict[str, Any] | None:
    """The record of ``session_id`` from the first of ``nodes``' writers that has it open."""
    async def ask(node: str) -> dict[str, Any] | None:
        handle = current().session_writers.get((namespace, node))
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


def _writer_options(namespace: str, node: str) -> Callable[[], Any]:
    return lambda: SessionWriter.options(  # type: ignore[attr-defined]
        **SESSION_WRITER_OPTIONS, name=session_writer_name(node), namespace=namespace, get_if_exists=True,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
    ).remote()


async def _writer_async(namespace: str, node: str) -> Any:
    """This process's handle of ``node``'s session writer: made (or found) and asked to
    answer once, then kept until it is seen dead for good."""
    return await kept_actor_async(current().session_writers, (namespace, node), _writer_options(namespace, node),
                                  what=f"the session writer of node {node[:12]}")


def _this_actor() -> str | None:
    """This process's actor id: who holds the sessions it opens (``None``: a driver, or a
    process not on Ray)."""
    return ray.get_runtime_context().get_actor_id() if ray.is_initialized() else None


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
        ensure_ray()  # here, in the caller's thread: Ray's first start belongs there, not in the loop's
        return asyncio.run_coroutine_threadsafe(
            cls.open_async(session_id, path, fsync=fsync, fsync_interval_s=fsync_interval_s, namespace=namespace),
            background_loop()).result()

    @classmethod
    async def open_async(cls, session_id: str, path: str, *, fsync: FsyncPolicy = "always",
                         fsync_interval_s: float = 0.05, namespace: str = DEFAULT_NAMESPACE) -> "SessionLog":
        """:meth:`open` for async code (the event loop is not blocked while the file opens)."""
        log = cls._new(session_id, path, fsync, fsync_interval_s, namespace)
        opened = await log._resent(lambda handle: log._queue_on(handle, Open(*log._open_args())))
        if opened.kind == "error":
            if opened.code != SessionHeldError.code:
                raise (LogCorruptError if opened.code == LogCorruptError.code else SessionLogWriteError)(opened.message)
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
        if fsync not in FSYNC_POLICIES:
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
        return (self._key, record["path"], record["fsync"], record["interval"], _this_actor())

    def _open_on(self, handle: Any, create: bool = True) -> Any:
        return handle.open.remote(*self._open_args(), create)

    async def _handle_async(self) -> Any:
        """The writer's handle (one per node, shared by this process's clients); one seen
        dead for good is made again on its node."""
        handle = self._writer
        if handle is None or handle._actor_id.hex() in DEAD_ACTORS:
            self._writer = handle = await _writer_async(self.namespace, self._record["node"])
        return handle

    async def _enqueued(self, op: Op) -> "asyncio.Future[Reply]":
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

    def _queue_on(self, handle: Any, op: Op) -> "asyncio.Future[Reply]":
        # A restarted writer forgot the session: an append or a close opens it there again
        # (its file recovered) and is sent once more, so a close still answers the summary.
        reopen = None if isinstance(op, Open) else (lambda: self._open_on(handle, create=isinstance(op, Append)))
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
            reply = await (await self._enqueued(Append(self._key, payloads)))
        except ACTOR_GONE as exc:
            remember_dead(exc)
            raise SessionLogWriteError(
                f"the session writer of {self._key!r} died before acknowledging {len(events)} event(s); "
                "they may or may not be on disk") from None
        if reply.kind == "ok":
            self._mirror.remember(reply.value, checked)
            return list(reply.value)
        if reply.kind == "not_open":
            raise SessionLogWriteError(f"the session log {self._key!r} could not be opened on its writer")
        raise (InvalidEventError if reply.code == InvalidEventError.code else SessionLogWriteError)(reply.message)

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
            op = Close(self._key)
            try:
                try:
                    result = await (await self._enqueued(op))  # in order, behind this client's appends
                except ACTOR_GONE as exc:  # the writer died under it: close there once it is back
                    remember_dead(exc)
                    result = await self._resent(lambda handle: self._queue_on(handle, op))
            except (HarnessError, OSError, ray.exceptions.RayTaskError):  # the writer, or the file, is gone for good
                return None
            self._closed = True
            return result.value if result.kind == "ok" else None
        return Response(run)
