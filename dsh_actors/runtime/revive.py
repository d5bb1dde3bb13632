"""Named actors that may be dead: get or create one, and make sure it answers.

Ray can hand back a dead named actor for a while after its process was SIGKILLed
(``get_if_exists`` finds the name, the actor behind it is gone). :func:`live_actor` asks
the actor a cheap question; if it is dead it kills the handle (which releases the name)
and creates it again, so a caller never caches a dead handle from the start.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

import ray

from ..core.errors import HarnessError
from ..core.within import within
from .backoff import WHILE_RESTARTING
from .errors import ACTOR_GONE, DEAD_ACTORS, RayRuntimeError, translate

__all__ = ["kept_actor_async", "live_actor", "live_actor_async", "release"]

_REVIVAL = WHILE_RESTARTING.within(10.0)  # a named actor made again answers within seconds, or never


def release(handle: Any) -> None:
    """Kill ``handle``'s actor for good; one already dead or gone is fine."""
    try:
        ray.kill(handle, no_restart=True)
    except Exception:
        pass  # already released


def live_actor(create: Callable[[], Any], probe: Callable[[Any], Any], *, what: str,
               unavailable: type[HarnessError]) -> tuple[Any, Any]:
    """``(handle, probe's answer)`` from a named actor that answered (blocking)."""
    for pause in _REVIVAL.pauses():
        handle = create()
        try:
            return handle, ray.get(probe(handle), timeout=120)
        except ACTOR_GONE as exc:
            if pause is None:
                raise translate(exc, actor=unavailable, what=what) from None
            release(handle)
            time.sleep(pause)
    raise AssertionError("unreachable")


async def live_actor_async(create: Callable[[], Any], probe: Callable[[Any], Any], *, what: str,
                           unavailable: type[HarnessError]) -> tuple[Any, Any]:
    """The same for async code (an actor's method)."""
    for pause in _REVIVAL.pauses():
        handle = create()
        try:
            return handle, await within(probe(handle), 120)
        except ACTOR_GONE as exc:
            if pause is None:
                raise translate(exc, actor=unavailable, what=what) from None
            release(handle)
            await asyncio.sleep(pause)
    raise AssertionError("unreachable")


def _held(cache: dict[Any, Any], key: Any) -> Any:
    handle = cache.get(key)
    return None if handle is None or handle._actor_id.hex() in DEAD_ACTORS else handle


async def kept_actor_async(cache: dict[Any, Any], key: Any, create: Callable[[], Any], *, what: str) -> Any:
    """The handle ``cache`` keeps under ``key`` (a process's handle of a node's named actor),
    made (or found) by ``create`` and asked to answer its ``ping`` when none is kept or the
    kept one was seen dead for good (nothing blocks the event loop meanwhile)."""
    handle = _held(cache, key)
    if handle is None:
        handle, _ = await live_actor_async(create, lambda h: h.ping.remote(), what=what, unavailable=RayRuntimeError)
        cache[key] = handle
    return handle
