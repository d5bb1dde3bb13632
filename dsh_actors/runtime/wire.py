"""The wire: what crosses between a client, the registry's actors and an executor.

- actor names (every named actor the runtime makes is named here: registries are named by
  their users, episode runners by the batch job);
- :class:`PlanTicket`, what a client caches per scope to say which plan a call runs;
- the call envelope (:class:`Envelope`): one msgpack bytes argument per call, carrying
  the execution the client created (token, identity, frozen arguments) — it packs and
  unpacks itself, and the executor rebuilds the execution from it, never creates it again;
- the task outcome (:class:`Outcome`): one tagged bytes value per call — the final
  result, or *stale plan* / *need the plan* when nothing ran (and, for a batched call,
  *cancelled* or *failed* where a call of its own would have raised).

Nothing here imports another runtime module: every layer above may import it.
"""

from __future__ import annotations

import asyncio
import uuid
import zlib
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, NamedTuple

import msgpack
import ray

from ..core.jsonvalue import FrozenDict, FrozenList
from ..core.pipeline import ExecutionPlan
from ..core.signal import AbortSignal
from ..core.types import ExecutionToken, ToolExecution, ToolExecutionResult, token_from_bytes, token_to_bytes

__all__ = [
    "COLLECT_WAIT_S",
    "DEFAULT_NAMESPACE",
    "Frame",
    "Outbox",
    "HEARTBEAT_S",
    "Item",
    "LEASE_S",
    "Outcome",
    "PROCESS_INCARNATION",
    "PlanTicket",
    "Envelope",
    "agent_session",
    "approvals_actor_name",
    "env_host_name",
    "host_index",
    "limiter_name",
    "scope_actor_name",
    "session_writer_name",
]


DEFAULT_NAMESPACE = "dsh-actors"
"""Where the runtime names its actors unless told otherwise."""


# --- actor names ------------------------------------------------------------------------------

def scope_actor_name(registry: str, agent: str) -> str:
    """A new scope actor of ``agent``: each one (first, replacement after a death, after a
    close) takes a fresh name, because Ray may hold a dead actor's name for a while."""
    return f"dsh-scope:{registry}:{agent}#{uuid.uuid4().hex[:8]}"


def host_index(agent: str, hosts: int) -> int:
    """Which of ``hosts`` shared scope hosts keeps ``agent``'s scope: a hash stable across
    processes (Python's own ``hash`` of a string is salted per process)."""
    return zlib.crc32(agent.encode("utf-8", "surrogatepass")) % hosts


def approvals_actor_name(registry: str) -> str:
    return f"dsh-approvals:{registry}"


def limiter_name(name: str) -> str:
    """The fleet-wide limiter of limit group ``name``."""
    return f"dsh-limits:{name}"


def env_host_name(node: str) -> str:
    """The environment host of node ``node``."""
    return f"dsh-envs:{node}"


def session_writer_name(node: str) -> str:
    """The session writer of node ``node``."""
    return f"dsh-session-writer:{node}"


def agent_session(sessions: str | None, agent: str) -> str:
    """The id of ``agent``'s session log in a registry whose sessions are ``sessions``
    (``None``: the agent id itself; else ``<sessions>/<agent>``, so two batch jobs whose
    episodes share agent ids keep their logs apart on one cluster)."""
    return agent if sessions is None else f"{sessions}/{agent}"



# --- plan tickets ------------------------------------------------------------------------------

class PlanTicket:
    """What a client caches per scope: the registry version the plan was composed at, the
    plan's object ref (boxed, so an executor receives the ref and fetches the plan only on
    a cache miss), whether the plan has ``tools/result`` observers (they run in the
    caller's process, which then fetches the plan once), and whether the scope it was
    answered for exists on its host (``scoped``: an agent that never changed its scope has
    none — its plan is the base plan, and there is nothing to close). Where each body
    runs is the executor's business."""

    __slots__ = ("version", "plan_box", "plan_id", "observed", "scoped")

    def __init__(self, version: int, plan_box: list[Any], observed: bool = True, scoped: bool = True) -> None:
        self.version = version
        self.plan_box = plan_box
        self.plan_id = plan_box[0].hex()
        self.observed = observed
        self.scoped = scoped

    def __reduce__(self) -> tuple[Any, ...]:
        return (PlanTicket, (self.version, self.plan_box, self.observed, self.scoped))

    @classmethod
    def of(cls, version: int, plan: ExecutionPlan, scoped: bool = True) -> "PlanTicket":
        """Put ``plan`` in the object store and describe it."""
        return cls(version, [ray.put(plan)], bool(plan.result), scoped)

    def held(self) -> "PlanTicket":
        """This (base) ticket, for a scope that exists on its host with an empty layer."""
        return PlanTicket(self.version, self.plan_box, self.observed, True)

    def quiet(self) -> "PlanTicket":
        """This (base) ticket, for an agent with no scope anywhere (nothing to close)."""
        return PlanTicket(self.version, self.plan_box, self.observed, False)


# --- the version subscription's timing -------------------------------------------------------

LEASE_S = 2.0
"""How long a client may trust what it knows of the version without hearing from the registry."""
HEARTBEAT_S = 0.5
"""How long a subscription poll waits for a change before answering anyway (renewing the lease)."""


# --- batched calls and the processes behind them ------------------------------------------------

PROCESS_INCARNATION = uuid.uuid4().hex
"""This process's id: an actor restarted by Ray answers another one, so whoever asks
learns that what the earlier process held (calls, asks) died with it."""

COLLECT_WAIT_S = 30.0
"""How long one ``collect`` of an executor's mailbox waits for a result before answering
empty (the caller polls again)."""

Item = tuple[int, bytes, Any, Any]
"""One batched call on the wire: its key in the lane, its envelope, its plan box, its hub."""


# --- the call envelope ------------------------------------------------------------------------

def _token_bytes(token: ExecutionToken | None) -> bytes | None:
    return None if token is None else token_to_bytes(token)


class Envelope(NamedTuple):
    """One call on the wire, a typed frozen value: the execution its caller created (token,
    identity, frozen arguments) and how to run it. It packs itself to one msgpack bytes
    value (an array, in field order) — the cheapest thing Ray ships (several pickled
    arguments cost ~0.08 ms more per call, measured) — and unpacks itself on the executor,
    which rebuilds the execution from it and never creates it again."""

    token: bytes | None
    call_id: Any
    name: Any
    arguments: Any
    agent: Any
    parent: bytes | None
    version: int | None = None
    """Check the registry version (read under ``key``) first."""
    plan: str = ""
    """The id of the plan it runs."""
    key: bytes = b""
    signal: str | None = None
    """The caller's signal, linked through the signal hub."""
    aborted: bytes | None = None
    """The reason of a signal already aborted (pickled)."""
    trace: Any = None
    """The caller's trace context (a W3C carrier, when it traces)."""

    @classmethod
    def of(cls, execution: ToolExecution, *, version: int | None = None, plan_id: str = "", key: bytes = b"",
           signal_id: str | None = None, aborted: bytes | None = None,
           trace: dict[str, str] | None = None) -> "Envelope":
        return cls(_token_bytes(execution.token), execution.call_id, execution.name, execution.arguments,
                   execution.agent, _token_bytes(execution.parent), version, plan_id, key, signal_id, aborted, trace)

    def pack(self) -> bytes:
        return msgpack.packb(self)  # type: ignore[no-any-return]

    @classmethod
    def unpack(cls, raw: bytes) -> "Envelope":
        """The envelope of ``raw``; its arguments arrive deep-frozen (they were checked
        lossless when the execution was created, so no second walk of the rules)."""
        return cls._make(msgpack.unpackb(raw, object_hook=FrozenDict, list_hook=FrozenList))

    def execution(self, signal: AbortSignal | None) -> ToolExecution:
        """The execution the caller created, rebuilt on this side with ``signal``."""
        return ToolExecution(
            call_id=self.call_id, name=self.name, arguments=self.arguments, agent=self.agent,
            parent=None if self.parent is None else token_from_bytes(self.parent), signal=signal,
            token=token_from_bytes(self.token),  # type: ignore[arg-type]
        )


# --- an executor's channel ----------------------------------------------------------------------

class Frame:
    """The frame tags of an executor's channel (:mod:`.channel` is the caller's side,
    :mod:`.channel_server` the executor's). A frame is a msgpack array whose first item is
    its tag; frames follow one another on the stream with nothing between them."""

    HELLO = 0  # caller → executor: [HELLO, secret] — the first frame; anything else closes the channel
    WELCOME = 1  # executor → caller: [WELCOME, incarnation]
    CALL = 2  # caller → executor: [CALL, key, envelope]; keys grow by one from 1
    CANCEL = 3  # caller → executor: [CANCEL, key]
    RECEIVED = 4  # executor → caller: [RECEIVED, key] — every call up to key arrived; none ran before this frame left
    OUTCOME = 5  # executor → caller: [OUTCOME, key, outcome bytes]


class Outbox:
    """The frames one end of a channel queues on its event loop: what one turn of the loop
    queues leaves in one ``write`` (both ends send through one)."""

    __slots__ = ("_write", "_frames", "_due", "size")

    def __init__(self, write: Callable[[bytes], None]) -> None:
        self._write = write
        self._frames: list[bytes] = []
        self._due = False
        self.size = 0  # bytes queued for the next write

    def put(self, *items: Any) -> None:
        """Queue the frame ``[*items]`` (its tag first)."""
        frame = msgpack.packb(items)
        self._frames.append(frame)
        self.size += len(frame)
        if not self._due:
            self._due = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Write what is queued now, instead of at the end of the loop's turn."""
        self._due = False
        if self._frames:
            frames, self._frames, self.size = self._frames, [], 0
            self._write(b"".join(frames))


# --- the task outcome ----------------------------------------------------------------------------

_RESULT, _STALE, _NEED_PLAN, _CANCELLED, _FAILED = b"R", b"S", b"P", b"C", b"F"
OutcomeKind = Literal["result", "stale", "need_plan", "cancelled", "failed"]
_KINDS: dict[bytes, OutcomeKind] = {
    _RESULT: "result", _STALE: "stale", _NEED_PLAN: "need_plan", _CANCELLED: "cancelled", _FAILED: "failed"}


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an executor answers for one envelope, tagged by its first byte on the wire.

    ``result``: the call ran; ``value`` is its final result. ``stale``: the ticket is
    older than the registry, nothing ran (the client resubmits with a fresh plan).
    ``need_plan``: the executor has not cached the plan, nothing ran (the client
    resubmits with the plan's ref). For a batched call (see ``batches``), which has no
    actor task of its own to raise through: ``cancelled`` (it was cancelled before it
    finished) and ``failed`` (it stopped before its pipeline could finish it;
    ``failure`` is the error result, for the caller to finish it with).
    """

    kind: OutcomeKind
    value: ToolExecutionResult | None = None
    failure: Mapping[str, Any] | None = None

    STALE = _STALE
    NEED_PLAN = _NEED_PLAN
    CANCELLED = _CANCELLED

    @staticmethod
    def result(result: ToolExecutionResult) -> bytes:
        """The wire form of a final result (already lossless and frozen: packed as is)."""
        return _RESULT + msgpack.packb(result)

    @staticmethod
    def failed(failure: Mapping[str, Any]) -> bytes:
        """The wire form of a call that stopped before its pipeline finished it."""
        return _FAILED + msgpack.packb(failure)

    @classmethod
    def read(cls, raw: bytes) -> "Outcome":
        tag = raw[:1]
        kind = _KINDS.get(tag)
        if kind is None:
            raise ValueError(f"not an executor outcome (tag {tag!r})")
        if kind == "failed":
            return cls(kind, failure=msgpack.unpackb(memoryview(raw)[1:]))
        if kind != "result":
            return cls(kind)
        # Decoded straight into frozen containers: the result is frozen once, where it was made.
        value = msgpack.unpackb(memoryview(raw)[1:], object_hook=FrozenDict, list_hook=FrozenList)
        return cls(kind, ToolExecutionResult(value))
