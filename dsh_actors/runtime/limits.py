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

The actor keeps its leases in Ray's KV store as they change, so one restarted (killed, its
node lost) starts from the slots still held: the cap holds across its death, and calls
waiting in it ask again (their requests are retried by Ray; each names its lease, so a
retried request never takes two slots). A lease is renewed while its call runs; one whose
holder died (an executor killed mid-call) lapses after ``LEASE_S`` instead of holding its
slot for good.
"""

from __future__ import annotations

import asyncio
import collections
import re
import time
import uuid
from typing import Any, Awaitable, Callable, Mapping

import msgpack
import ray
from ray.experimental import internal_kv

from ..core.signal import AbortError
from ..core.types import ToolExecution
from ..core.within import within
from .errors import RAY_ERROR
from .wire import DEFAULT_NAMESPACE

__all__ = ["LEASE_S", "LimiterActor", "fleet_limit", "parse_fleet_limit"]

LEASE_S = 30.0
"""How long a slot outlives its holder's last renewal (renewed every third of it)."""

LIMITER_OPTIONS: dict[str, Any] = {"num_cpus": 0, "max_restarts": -1, "max_task_retries": -1,
                                   "lifetime": "detached", "max_concurrency": 10_000}
"""Restarted by Ray, its requests retried (each is idempotent: it names its lease); detached,
so it serves every job that names it until it is killed."""

_KV_NAMESPACE = "dsh_actors"


def limiter_name(name: str) -> str:
    return f"dsh-limits:{name}"


class LimiterActorCore:
    """The slots of one limit name: per group, the leases held and the requests waiting."""

    def __init__(self, name: str) -> None:
        self._key = f"limits:{name}".encode()
        self._held: dict[str, tuple[str, float]] = {}  # lease -> (group, wall-clock expiry)
        self._waiting: dict[str, collections.deque[tuple[str, asyncio.Future[None]]]] = \
            collections.defaultdict(collections.deque)
        raw = internal_kv._internal_kv_get(self._key, namespace=_KV_NAMESPACE)
        if raw:  # a restart: the slots still held stay taken
            self._held = {lease: (group, expiry) for lease, (group, expiry) in msgpack.unpackb(raw).items()}
        self._caps: dict[str, int] = {}  # per group, as its requests said
        self._sweeper: asyncio.Task[None] | None = None

    async def _save(self) -> None:
        data = msgpack.packb({lease: list(held) for lease, held in self._held.items()})
        await asyncio.to_thread(internal_kv._internal_kv_put, self._key, data, True, namespace=_KV_NAMESPACE)

    def _in_use(self, group: str) -> int:
        return sum(1 for g, _ in self._held.values() if g == group)

    def _lapse(self) -> bool:
        now = time.time()
        lapsed = [lease for lease, (_, expiry) in self._held.items() if expiry < now]
        for lease in lapsed:
            del self._held[lease]
        return bool(lapsed)

    def _grant(self, group: str, limit: int) -> bool:
        """Give waiting requests of ``group`` the slots that are free; whether any was."""
        granted = False
        queue = self._waiting[group]
        while queue and self._in_use(group) < limit:
            lease, future = queue.popleft()
            if not future.done():
                self._held[lease] = (group, time.time() + LEASE_S)
                future.set_result(None)
                granted = True
        return granted

    async def acquire(self, lease: str, group: str, limit: int) -> bool:
        """Take a slot of ``group`` (at most ``limit`` held) for ``lease``, waiting in line
        while none is free. Idempotent: a lease that holds one already returns at once."""
        self._caps[group] = limit
        self._ensure_sweeper()
        if lease in self._held:
            return True
        self._lapse()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[group].append((lease, future))
        self._grant(group, limit)
        try:
            await future
        except asyncio.CancelledError:  # the caller gave up (its call was aborted)
            self._held.pop(lease, None)
            self._grant(group, limit)
            raise
        await self._save()
        return True

    async def renew(self, lease: str) -> bool:
        """Keep ``lease``'s slot for another ``LEASE_S``; ``False`` if it lapsed."""
        held = self._held.get(lease)
        if held is None:
            return False
        self._held[lease] = (held[0], time.time() + LEASE_S)
        return True

    async def release(self, lease: str) -> None:
        """Give ``lease``'s slot back (nothing if it holds none)."""
        held = self._held.pop(lease, None)
        if held is not None:
            self._grant(held[0], self._caps.get(held[0], 0))
            await self._save()

    def pid(self) -> int:
        import os

        return os.getpid()

    def in_use(self) -> dict[str, int]:
        """Slots held per group."""
        self._lapse()
        return dict(collections.Counter(group for group, _ in self._held.values()))

    def _ensure_sweeper(self) -> None:
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.ensure_future(self._sweep())

    async def _sweep(self) -> None:
        """While requests wait: slots whose holders stopped renewing go to them."""
        while any(self._waiting.values()):
            await asyncio.sleep(LEASE_S / 6)
            if self._lapse():
                for group, queue in list(self._waiting.items()):
                    if queue:
                        self._grant(group, self._caps.get(group, 0))
                await self._save()


LimiterActor = ray.remote(LimiterActorCore)


class _Limiter:
    """A process's handle on the limiter ``name`` (found or made on first use)."""

    _handles: dict[str, Any] = {}

    @classmethod
    async def handle(cls, name: str) -> Any:
        found = cls._handles.get(name)
        if found is None:
            found = await asyncio.to_thread(lambda: LimiterActor.options(
                name=limiter_name(name), namespace=DEFAULT_NAMESPACE, get_if_exists=True,
                **LIMITER_OPTIONS).remote(name))
            cls._handles[name] = found
        return found


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
        limiter = await _Limiter.handle(name)
        lease = uuid.uuid4().hex
        asking = limiter.acquire.remote(lease, group, cap)
        signal = execution.signal
        waits: list[Any] = [asyncio.ensure_future(asyncio.wrap_future(asking.future()))]
        if signal is not None:
            waits.append(asyncio.ensure_future(_aborted(signal)))
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            ray.cancel(asking)
            await _release(limiter, lease)
            raise
        finally:
            for wait in waits[1:]:
                wait.cancel()
        if waits[0] not in done:  # aborted while waiting for a slot
            ray.cancel(asking)
            await _release(limiter, lease)
            raise AbortError(signal.reason if signal is not None else None)
        waits[0].result()
        renewing = asyncio.ensure_future(_renew(limiter, lease))
        try:
            return await call_next()
        finally:
            renewing.cancel()
            await _release(limiter, lease)

    limited.__name__ = f"fleet_limit({', '.join(f'{g}={c}' for g, c in caps.items())})"
    return limited


async def _aborted(signal: Any) -> None:
    await signal


async def _renew(limiter: Any, lease: str) -> None:
    while True:
        await asyncio.sleep(LEASE_S / 3)
        try:
            await limiter.renew.remote(lease)
        except RAY_ERROR:
            pass  # restarting: the next renewal reaches its successor


async def _release(limiter: Any, lease: str) -> None:
    try:
        await within(asyncio.wrap_future(limiter.release.remote(lease).future()), LEASE_S)
    except (asyncio.TimeoutError, RAY_ERROR):
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
