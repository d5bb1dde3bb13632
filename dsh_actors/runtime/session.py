"""The session log on Ray: one named actor per session owns its frame file.

The actor is the file's only writer, so appends are ordered and never interleave; each
append is flushed (and fsynced, per the policy) before it returns. Reopening a session
after its actor died — a crash mid-append included — recovers every acknowledged event
and truncates a torn tail. :class:`SessionLog` is the client (responses to await or
block on); it pickles by name.
"""

from __future__ import annotations

from typing import Any, Mapping

import ray

from ..log import FrameFile, FsyncPolicy, check_event, derive_messages
from .errors import RayRuntimeError
from .local import ensure_ray
from .response import NamedActorClient, Response
from .revive import live_actor
from .wire import DEFAULT_NAMESPACE, session_actor_name

__all__ = ["SessionLog", "SessionLogActor", "session_actor_name"]



SESSION_OPTIONS = {"num_cpus": 0, "max_restarts": 0, "max_concurrency": 1}
"""Options of a session log actor: one call at a time; a dead one is reopened over its file."""


@ray.remote
class SessionLogActor:
    """Owns one session's frame file; one call at a time, in arrival order."""

    def __init__(self, path: str, fsync: FsyncPolicy, fsync_interval_s: float) -> None:
        self._file = FrameFile(path, fsync=fsync, fsync_interval_s=fsync_interval_s)

    def append(self, event: Mapping[str, Any]) -> int:
        return self._file.append(check_event(event))

    def append_many(self, events: list[Mapping[str, Any]]) -> list[int]:
        checked = [check_event(e) for e in events]  # all or nothing is validated first
        return self._file.append_many(checked)  # one fsync covers the batch

    def events(self, since: int = 0) -> list[dict[str, Any]]:
        return self._file.records(since)

    def derive_messages(self) -> list[dict[str, Any]]:
        return derive_messages(self._file.records())

    def info(self) -> dict[str, Any]:
        return {"path": str(self._file.path), "events": len(self._file), "fsync": self._file.fsync,
                "recovered_truncated_bytes": self._file.truncated_bytes}

    def close(self) -> None:
        self._file.close()


class SessionLog(NamedActorClient):
    """Client of one session's log actor (``SessionLog.open(session_id, path)``)."""

    def __init__(self, session_id: str, namespace: str = DEFAULT_NAMESPACE, handle: Any = None) -> None:
        super().__init__(session_id, namespace, handle)

    @property
    def session_id(self) -> str:
        return self._key

    def _actor_name(self) -> str:
        return session_actor_name(self._key)

    def _what(self) -> str:
        return f"session log {self._key!r}"

    @classmethod
    def open(cls, session_id: str, path: str, *, fsync: FsyncPolicy = "always", fsync_interval_s: float = 0.05,
             namespace: str = DEFAULT_NAMESPACE) -> "SessionLog":
        """Get or create the session's log actor over the file at ``path``."""
        ensure_ray()
        if fsync not in ("always", "interval", "never"):
            raise ValueError(f'fsync must be "always", "interval" or "never", got {fsync!r}')
        handle, _ = live_actor(  # a log actor SIGKILLed earlier is replaced; the file is durable
            lambda: SessionLogActor.options(**SESSION_OPTIONS,  # type: ignore[attr-defined]
                name=session_actor_name(session_id), namespace=namespace, get_if_exists=True,
            ).remote(path, fsync, fsync_interval_s),
            lambda h: h.info.remote(), what=f"session log {session_id!r}", unavailable=RayRuntimeError)
        return cls(session_id, namespace, handle)


    def append(self, event: Mapping[str, Any]) -> Response[int]:
        """Append one event; resolves (to its index) once it is on disk per the fsync policy."""
        return self._call("append", event)

    def append_many(self, events: list[Mapping[str, Any]]) -> Response[list[int]]:
        return self._call("append_many", list(events))

    def events(self, since: int = 0) -> Response[list[dict[str, Any]]]:
        return self._call("events", since)

    def derive_messages(self) -> Response[list[dict[str, Any]]]:
        return self._call("derive_messages")

    def info(self) -> Response[dict[str, Any]]:
        return self._call("info")

    def close(self) -> Response[None]:
        """Close the file and end the actor."""
        async def run() -> None:
            handle = self._handle()
            try:
                await handle.close.remote()
            finally:
                ray.kill(handle)
        return Response(run)
