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
from .errors import ACTOR_GONE, translate

__all__ = ["live_actor", "live_actor_async", "release"]

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
