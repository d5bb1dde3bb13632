"""Fleet-wide limits: at most N calls of a tool (or a group of tools) in flight at once,
across every agent, executor and node — the shared rate limiter rollout frameworks put in
front of a sandbox service or a licensed API.

:func:`fleet_limit` makes a ``tools/execute`` wrapper; register it on a registry or a
scope like any policy (``registry.on("tools/execute", fleet_limit({"bash": 4}))``), or name
it in an episode file: ``"policies": ["fleet-limit:bash=4,read_file+write_file=8"]`` (tools
joined by ``+`` share one cap). A call of a limited tool first takes a slot from the named
:class:`LimiterActor` (one per limit name, found or made on first use); while none is free
it waits — a coroutine, in order of arrival — and its signal still aborts it; the slot is
given back when the call ends, however it ends.

What keeps the cap true when things die:

- **The limiter restarted** (SIGKILL, its node lost): it keeps its leases and caps in Ray's
  KV store as they change, and starts from them — each lease held gets a fresh
  ``LEASE_S``, since its holder renews every third of that (renewals are not written):
  live holders keep their slots, dead ones lapse. Waiting calls ask again (each request
  names its lease: a request asked twice never takes two slots).
- **The limiter killed for good** (``ray.kill``): a caller whose request or renewal finds
  it dead makes it again (from the same KV record) and asks again; it is never an error
  the call sees, unless no limiter can be reached at all (``FLEET_LIMIT_UNAVAILABLE``).
- **A caller dead** (its executor killed, its job's driver gone, taking the executors
  with it): its held slot lapses ``LEASE_S`` after its last renewal; its waiting requests
  are dropped once the limiter sees its process gone (checked every ``CHECK_S``); and a slot
  granted to a request nobody receives lapses after ``CONFIRM_S`` unless its holder
  confirms it (its first renewal, sent as soon as the slot arrives).
- **Two caps for one group** (episodes declaring ``bash=1`` beside others declaring
  ``bash=8``): the cap a group is first used with holds while it is in use; a request with
  another one fails its call with ``FLEET_LIMIT_CONFLICT``, saying both.

A call aborted while it waits for a slot fails with its signal's reason, coded: past its
deadline ``TOOL_TIMEOUT``, else ``CANCELLED`` — never a policy's denial.
"""

from __future__ import annotations

import asyncio
import collections
import os
import re
import time
import uuid
from typing import Any, Awaitable, Callable, Mapping

import msgpack
import ray
from ray.experimental import internal_kv

from ..core.errors import ExecutionCancelledError, HarnessError, ToolTimeoutError
from ..core.signal import TimeoutReason
from ..core.types import ToolExecution
from ..core.within import within
from .backoff import WHILE_RESTARTING
from .errors import ACTOR_GONE, RAY_ERROR, died_for_good
from .requester import CHECK_S, requester, still_there
from .wire import DEFAULT_NAMESPACE, limiter_name

__all__ = ["CONFIRM_S", "FleetLimitConflictError", "FleetLimitUnavailableError", "LEASE_S", "LimiterActor",
           "fleet_limit", "parse_fleet_limit"]

LEASE_S = 30.0
"""How long a slot outlives its holder's last renewal (renewed every third of it)."""
CONFIRM_S = 5.0
"""How long a slot just granted waits for its holder to confirm it (a request whose
caller died meanwhile is granted to nobody: its slot comes back this soon)."""

LIMITER_OPTIONS: dict[str, Any] = {"num_cpus": 0, "max_restarts": -1, "max_task_retries": -1,
                                   "lifetime": "detached", "max_concurrency": 10_000}
"""Restarted by Ray, its requests retried (each is idempotent: it names its lease); detached,
so it serves every job that names it until it is killed."""

_KV_NAMESPACE = "dsh_actors"


class FleetLimitConflictError(HarnessError):
    """A call asked for a group's slot with a cap other than the one the group is in use with."""

    code = "FLEET_LIMIT_CONFLICT"


class FleetLimitUnavailableError(HarnessError):
    """No fleet limiter could be reached to take a slot (the call did not run)."""

    code = "FLEET_LIMIT_UNAVAILABLE"


class _Waiter:
    __slots__ = ("lease", "future", "requester")

    def __init__(self, lease: str, future: asyncio.Future[None], requester: tuple[Any, str] | None) -> None:
        self.lease, self.future, self.requester = lease, future, requester


class LimiterActorCore:
    """The slots of one limit name: per group, its cap, the leases held and the requests
    waiting (see the module docs)."""

    def __init__(self, name: str) -> None:
        self._key = f"limits:{name}".encode()
        self._held: dict[str, tuple[str, float]] = {}  # lease -> (group, wall-clock expiry)
        self._caps: dict[str, int] = {}  # per group in use: the cap it was first asked with
        self._waiting: dict[str, collections.deque[_Waiter]] = collections.defaultdict(collections.deque)
        raw = internal_kv._internal_kv_get(self._key, namespace=_KV_NAMESPACE)
        if raw:  # a restart, or a successor of one killed: the slots still held stay taken
            record = msgpack.unpackb(raw)
            held, caps = (record["held"], record["caps"]) if "held" in record else (record, {})
            fresh = time.time() + LEASE_S  # live holders renew within a third of it; dead ones lapse
            self._held = {lease: (group, max(expiry, fresh)) for lease, (group, expiry) in held.items()}
            self._caps = {group: cap for group, cap in caps.items() if self._in_use(group)}
        self._sweeper: asyncio.Task[None] | None = None

    async def _save(self) -> None:
        data = msgpack.packb({"held": {lease: list(held) for lease, held in self._held.items()},
                              "caps": self._caps})
        await asyncio.to_thread(internal_kv._internal_kv_put, self._key, data, True, namespace=_KV_NAMESPACE)

    def _in_use(self, group: str) -> int:
        return sum(1 for g, _ in self._held.values() if g == group)

    def _lapse(self) -> bool:
        now = time.time()
        lapsed = [lease for lease, (_, expiry) in self._held.items() if expiry < now]
        for lease in lapsed:
            del self._held[lease]
        return bool(lapsed)

    def _grant(self, group: str) -> None:
        """Give waiting requests of ``group`` the slots that are free (each to be confirmed)."""
        queue, cap = self._waiting[group], self._caps.get(group, 0)
        while queue and self._in_use(group) < cap:
            waiter = queue.popleft()
            if not waiter.future.done():
                self._held[waiter.lease] = (group, time.time() + CONFIRM_S)
                waiter.future.set_result(None)
        self._forget_if_idle(group)

    def _forget_if_idle(self, group: str) -> None:
        """A group nobody holds or waits for has no cap any more (a later job may choose another)."""
        if not self._waiting.get(group) and not self._in_use(group):
            self._waiting.pop(group, None)
            self._caps.pop(group, None)

    async def acquire(self, lease: str, group: str, limit: int, caller: tuple[Any, str] | None = None) -> bool:
        """Take a slot of ``group`` (at most ``limit`` held) for ``lease``, waiting in line
        while none is free; ``caller`` names the process asking (its waiting request is
        dropped if it dies). Idempotent: a lease that holds one already returns at once."""
        if lease in self._held:
            return True
        self._lapse()
        cap = self._caps.setdefault(group, limit)
        if cap != limit:
            raise FleetLimitConflictError(
                f"fleet limit {group!r} is in use with a cap of {cap} calls in flight; this call asked for {limit}. "
                "One group has one cap: give every episode (or policy) of the fleet the same one, or name another "
                "limiter for the other (fleet_limit(..., name=...))")
        self._ensure_sweeper()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[group].append(_Waiter(lease, future, caller))
        self._grant(group)
        try:
            await future
        except asyncio.CancelledError:  # the caller gave up (its call was aborted)
            self._held.pop(lease, None)
            self._grant(group)
            raise
        await self._save()
        return True

    async def renew(self, lease: str) -> bool:
        """Keep (or, just granted, confirm) ``lease``'s slot for another ``LEASE_S``;
        ``False`` if it lapsed."""
        held = self._held.get(lease)
        if held is None:
            return False
        self._held[lease] = (held[0], time.time() + LEASE_S)
        return True

    async def release(self, lease: str) -> None:
        """Give ``lease``'s slot back, or withdraw its request if it still waits (its call
        was aborted meanwhile); nothing if it holds or asks for none."""
        held = self._held.pop(lease, None)
        if held is not None:
            self._grant(held[0])
            await self._save()
            return
        for queue in self._waiting.values():
            for waiter in [w for w in queue if w.lease == lease]:
                queue.remove(waiter)
                waiter.future.cancel()

    def pid(self) -> int:
        return os.getpid()

    def in_use(self) -> dict[str, int]:
        """Slots held per group."""
        self._lapse()
        return dict(collections.Counter(group for group, _ in self._held.values()))

    def waiting(self) -> dict[str, int]:
        """Requests waiting per group."""
        return {group: len(queue) for group, queue in self._waiting.items() if queue}

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.ensure_future(self._sweep())

    async def _sweep(self) -> None:
        """While requests wait or slots are held: drop the requests of processes that died,
        let lapsed slots go, and give what is free to who waits."""
        while any(self._waiting.values()) or self._held:
            await asyncio.sleep(CHECK_S)
            await self._drop_dead_waiters()
            lapsed = self._lapse()
            for group in list(self._waiting):
                self._grant(group)
            if lapsed:
                await self._save()

    async def _drop_dead_waiters(self) -> None:
        callers: dict[tuple[str, str], Any] = {}
        for queue in self._waiting.values():
            for waiter in queue:
                if waiter.requester is not None:
                    handle, incarnation = waiter.requester
                    callers[(handle._actor_id.hex(), incarnation)] = handle
        gone = {key for key, handle in callers.items() if not await still_there(handle, key[1])}
        for queue in self._waiting.values():
            for waiter in [w for w in queue if w.requester is not None and
                           (w.requester[0]._actor_id.hex(), w.requester[1]) in gone]:
                queue.remove(waiter)
                waiter.future.cancel()


LimiterActor = ray.remote(LimiterActorCore)


class _Limiter:
    """A process's handle on the limiter ``name``: found or made on first use, and made
    again once one is seen dead for good (``ray.kill``)."""

    _handles: dict[str, Any] = {}

    @classmethod
    async def handle(cls, name: str, dead: Any = None) -> Any:
        found = cls._handles.get(name)
        if found is None or (dead is not None and found._actor_id == dead._actor_id):
            found = await asyncio.to_thread(lambda: LimiterActor.options(
                name=limiter_name(name), namespace=DEFAULT_NAMESPACE, get_if_exists=True,
                **LIMITER_OPTIONS).remote(name))
            cls._handles[name] = found
        return found

    @classmethod
    async def call(cls, name: str, method: str, *args: Any) -> Any:
        """``method(*args)`` on the limiter — asked again while Ray restarts it, and of a
        new one when it is found dead for good (it reads the same slots); raises
        :class:`FleetLimitUnavailableError` when none answers."""
        limiter = await cls.handle(name)
        for pause in WHILE_RESTARTING.pauses():
            try:
                return await getattr(limiter, method).remote(*args)
            except ACTOR_GONE as exc:
                if pause is None:
                    raise FleetLimitUnavailableError(f"fleet limiter {name!r} is unreachable ({exc}); "
                                                     "the call did not run") from None
                if died_for_good(exc):
                    limiter = await cls.handle(name, dead=limiter)
                else:
                    await asyncio.sleep(pause)
            except RAY_ERROR as exc:
                cause = getattr(exc, "cause", None)
                if isinstance(cause, HarnessError):
                    raise cause from None  # the limiter's own answer (a cap conflict)
                raise FleetLimitUnavailableError(f"fleet limiter {name!r} failed: {exc}") from None
        raise AssertionError("unreachable")


def _groups(limits: Mapping[Any, int]) -> tuple[dict[str, tuple[str, int]], dict[str, int]]:
    """tool -> (its group, the group's cap), and group -> cap."""
    by_tool: dict[str, tuple[str, int]] = {}
    caps: dict[str, int] = {}
    for tools, cap in limits.items():
        names = (tools,) if isinstance(tools, str) else tuple(tools)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"a fleet limit names tools (a name or a tuple of names); got {tools!r}")
        if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
            raise ValueError(f"a fleet limit is a whole number of calls, at least 1; got {cap!r} for {tools!r}")
        group = "+".join(sorted(names))
        caps[group] = cap
        for name in names:
            if name in by_tool:
                raise ValueError(f"tool {name!r} is in two fleet limits")
            by_tool[name] = (group, cap)
    return by_tool, caps


def fleet_limit(limits: Mapping[Any, int], *, name: str = "default") -> Callable[..., Awaitable[Any]]:
    """A ``tools/execute`` wrapper capping calls in flight per tool or group of tools
    (``{"bash": 4, ("read_file", "write_file"): 8}``) across the whole fleet, held by the
    limiter ``name``. Raises ``ValueError`` for a bad limit."""
    by_tool, caps = _groups(limits)

    async def limited(execution: ToolExecution, call_next: Callable[[], Awaitable[Any]]) -> Any:
        entry = by_tool.get(execution.name)
        if entry is None:
            return await call_next()
        group, cap = entry
        lease = uuid.uuid4().hex
        asking = asyncio.ensure_future(_Limiter.call(name, "acquire", lease, group, cap, requester()))
        signal = execution.signal
        waits: list[Any] = [asking]
        if signal is not None:
            waits.append(asyncio.ensure_future(_aborted(signal)))
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            asking.cancel()
            await _release(name, lease)
            raise
        finally:
            for wait in waits[1:]:
                wait.cancel()
        if asking not in done:  # aborted while waiting for a slot
            asking.cancel()
            await _release(name, lease)
            raise _stopped_waiting(execution, signal.reason if signal is not None else None)
        asking.result()  # a conflict, or no limiter: the call's coded failure
        renewing = asyncio.ensure_future(_renew(name, lease))  # its first renewal confirms the slot
        try:
            return await call_next()
        finally:
            renewing.cancel()
            await _release(name, lease)

    limited.__name__ = f"fleet_limit({', '.join(f'{g}={c}' for g, c in caps.items())})"
    return limited


def _stopped_waiting(execution: ToolExecution, reason: Any) -> HarnessError:
    """Why a call aborted while it waited for a slot: its deadline, or a cancel (coded)."""
    if isinstance(reason, TimeoutReason):
        return ToolTimeoutError(reason.timeout_ms)
    return ExecutionCancelledError(f'tool call "{execution.name}" ({execution.call_id}) was aborted while it '
                                   f"waited for a fleet-limit slot ({reason})")


async def _aborted(signal: Any) -> None:
    await signal


async def _renew(name: str, lease: str) -> None:
    while True:
        try:
            await _Limiter.call(name, "renew", lease)
        except (HarnessError, RAY_ERROR):
            pass  # restarting, or gone a moment: the next renewal reaches its successor
        await asyncio.sleep(LEASE_S / 3)


async def _release(name: str, lease: str) -> None:
    try:
        await within(_Limiter.call(name, "release", lease), LEASE_S)
    except (TimeoutError, HarnessError, RAY_ERROR):
        pass  # the lease lapses on its own


_SPEC = re.compile(r"^[A-Za-z0-9_.\-]+(\+[A-Za-z0-9_.\-]+)*=[1-9][0-9]{0,6}$")


def parse_fleet_limit(text: str) -> dict[tuple[str, ...], int]:
    """``"bash=4,read_file+write_file=8"`` as limits; ``ValueError`` saying what is wrong."""
    limits: dict[tuple[str, ...], int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not _SPEC.match(part):
            raise ValueError(f"fleet limit {part!r} is not tool=N or tool+tool=N (N a whole number ≥ 1)")
        tools, cap = part.rsplit("=", 1)
        key = tuple(tools.split("+"))
        if key in limits:
            raise ValueError(f"tool {tools!r} is in two fleet limits")
        limits[key] = int(cap)
    _groups(limits)
    return limits
