"""A fake-actor harness: plain objects called the way actor handles are, in one process.

``FakeActor(obj).method.remote(*args)`` runs ``obj.method`` on the running event loop and
returns an awaitable, as an async actor's handle does; each call is recorded (``calls``),
so a test counts round trips. The plain classes under the actor shells take such handles
where they would hold Ray's."""

from __future__ import annotations

import asyncio
import inspect
import itertools
from typing import Any

_ids = itertools.count(1)


class _Method:
    __slots__ = ("actor", "name")

    def __init__(self, actor: "FakeActor", name: str) -> None:
        self.actor, self.name = actor, name

    def remote(self, *args: Any, **kwargs: Any) -> "asyncio.Future[Any]":
        actor = self.actor
        if actor.dead:
            raise RuntimeError(f"fake actor {actor.id} is dead")
        actor.calls.append(self.name)

        async def run() -> Any:
            result = getattr(actor.obj, self.name)(*args, **kwargs)
            return await result if inspect.isawaitable(result) else result
        return asyncio.ensure_future(run())


class FakeActor:
    """An in-process stand-in for an actor handle over ``obj`` (bound later if ``None``)."""

    def __init__(self, obj: Any = None) -> None:
        self.obj = obj
        self.id = f"fake-{next(_ids)}"
        self.calls: list[str] = []
        self.dead = False
        self.options: dict[str, Any] = {}

    @property
    def _actor_id(self) -> "_ActorId":
        """What a Ray handle's ``_actor_id`` is asked: its ``hex()``."""
        return _ActorId(self.id)

    def __getattr__(self, name: str) -> _Method:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Method(self, name)


class _ActorId:
    __slots__ = ("_id",)

    def __init__(self, actor_id: str) -> None:
        self._id = actor_id

    def hex(self) -> str:
        return self._id


class FakeSpawner:
    """A fleet's spawner for one process: ``makers`` build the plain class of each kind it
    should really run (given the spawn's options and arguments); every other kind gets an
    empty :class:`FakeActor`. Nodes are named; ``spawned`` records everything, in order."""

    def __init__(self, nodes: list[str] | tuple[str, ...] = ("n1", "n2"), here: str = "n1",
                 makers: dict[str, Any] | None = None) -> None:
        self._nodes, self._here = list(nodes), here
        self.makers = dict(makers or {})
        self.spawned: list[tuple[str, FakeActor]] = []
        self._ends: dict[str, asyncio.Event] = {}  # actor id -> set when it ends for good

    def spawn(self, kind: str, options: dict[str, Any], *args: Any, **kwargs: Any) -> FakeActor:
        make = self.makers.get(kind)
        handle = FakeActor(make(*args, **kwargs) if make is not None else None)
        handle.options, handle.kind, handle.args = dict(options), kind, args  # type: ignore[attr-defined]
        self.spawned.append((kind, handle))
        return handle

    def nodes(self) -> list[str]:
        return list(self._nodes)

    def here(self) -> str:
        return self._here

    def actor_id(self, handle: FakeActor) -> str:
        return handle.id

    def release(self, handle: FakeActor) -> None:
        self.kill(handle)

    def kill(self, handle: FakeActor) -> None:
        """End ``handle``'s actor for good (as ``ray.kill``): its watchers hear of it."""
        handle.dead = True
        self._ended(handle).set()

    async def outlived(self, handle: FakeActor) -> None:
        await self._ended(handle).wait()

    def _ended(self, handle: FakeActor) -> asyncio.Event:
        return self._ends.setdefault(handle.id, asyncio.Event())


class MemoryVersions:
    """A registry's version kept in memory (Ray keeps it in its KV store)."""

    def __init__(self, start: int = 0) -> None:
        self.value = start

    def read(self) -> int:
        return self.value

    def write(self, version: int) -> None:
        self.value = version
