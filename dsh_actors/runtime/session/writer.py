"""The session writer: one detached actor per node owns the files of the sessions opened there.

Appends from every process reach it as batches; it commits what arrived while its previous
commit ran as one group (the batching rule of :class:`~..coalesce.Coalescer`). Under
``always`` an append is acknowledged only after the sync that covers it. Where a session is
open is what its writer answers (:class:`~dsh_actors.log.writer.SessionDirectory`, with
recovery notes in Ray's session folder). The plain writer is
:class:`~dsh_actors.log.writer.SessionWriterCore` (no Ray); :class:`SessionWriterService`
puts it on a thread of the actor.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import logging
import os
from typing import Any

import msgpack
import ray

from ...log import FsyncPolicy, derive_messages
from ...log.writer import Op, Reply, SessionHeldError, SessionWriterCore
from ..coalesce import Coalescer
from ..local import this_node

__all__ = ["ABANDONED_S", "SESSION_WRITER_OPTIONS", "SessionWriter", "SessionWriterService"]

SESSION_WRITER_OPTIONS = {"num_cpus": 0, "max_restarts": -1, "max_task_retries": 0, "lifetime": "detached"}
"""Options of a node's session writer: restarted by Ray (its files are durable); an
append it was running is never retried. Detached: whichever process happens to make it,
it serves every process on its node and must not end with that one."""

ABANDONED_S = 60.0
"""How long a session its (all dead) openers left must be idle before its writer closes it."""


logger = logging.getLogger("dsh_actors.runtime")


def _all_dead(actor_ids: set[str | None]) -> bool:
    """Whether every one of these actors is dead (a GCS read per actor: off the loop)."""
    from ray._private import state

    return all(state.actors(actor_id=a).get("State", "DEAD") == "DEAD" for a in actor_ids if a)


class SessionWriterService:
    """One node's session writer: a thin shell over :class:`SessionWriterCore` whose
    commits run one at a time on a thread of their own, so requests that arrive during a
    commit form the next group."""

    def __init__(self, directory: str | None = None) -> None:
        """``directory``: the file noting which sessions are open here (default: one in Ray's
        session folder on this node, named for this writer)."""
        self._core = SessionWriterCore(directory if directory is not None else _directory_file())
        self._node = this_node()
        self._thread = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="dsh-commit")
        self._groups: Coalescer[tuple[list[Op], asyncio.Future[list[Reply]]]] | None = None
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

    async def commit_batch(self, batch: list[Op]) -> bytes:
        """Commit ``batch`` (see :meth:`SessionWriterCore.commit`) with whatever else is
        waiting; its replies, msgpack-packed (one bytes value is the cheapest thing Ray
        returns). Opens and closes ride here with the appends, so an episode's log costs
        no actor call of its own."""
        self._sweep_later()
        if self._groups is None:  # made on the actor's loop
            self._groups = Coalescer(self._commit_group, _fail_group)
        future: asyncio.Future[list[Reply]] = asyncio.get_running_loop().create_future()
        self._groups.add((batch, future))
        return msgpack.packb(await future)  # type: ignore[no-any-return]

    async def _commit_group(self, group: list[tuple[list[Op], "asyncio.Future[list[Reply]]"]]) -> None:
        """Commit every batch that arrived while the previous group ran, as one group."""
        replies = await self._in_thread(self._core.commit, [op for batch, _ in group for op in batch])
        start = 0
        for batch, future in group:
            if not future.done():  # (its caller's task was cancelled)
                future.set_result(replies[start:start + len(batch)])
            start += len(batch)

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


def _directory_file() -> str | None:
    """This writer's directory notes, in Ray's session folder on its node (``None`` outside Ray)."""
    if not ray.is_initialized():
        return None
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


def _fail_group(group: list[tuple[list[Op], "asyncio.Future[list[Reply]]"]], exc: Exception) -> None:
    for _, future in group:  # every waiter of a commit that raised hears it
        if not future.done():
            future.set_exception(exc)


SessionWriter = ray.remote(SessionWriterService)
"""The session writer actor class (options: :data:`SESSION_WRITER_OPTIONS`)."""
