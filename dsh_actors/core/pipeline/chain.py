"""The one chain runner: an ordered ``await call_next()`` waterfall (pluggy's ``_multicall``).

Listeners run in the order of the tuple; the first is the outermost. Each receives the
stage's arguments plus ``call_next``; awaiting ``call_next()`` runs the rest of the chain
(and finally ``base``) and returns its value. A listener that never calls it cuts off
every later listener and the base. ``call_next`` may be awaited more than once (a retry
wrapper does), and a listener may be a plain function returning a value or an awaitable.
"""

from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable, Generator, Sequence

__all__ = ["run_chain", "settle"]


async def settle(value: Any) -> Any:
    """Await ``value`` if it is awaitable, else return it."""
    if inspect.isawaitable(value):
        return await value
    return value


class _Pending:
    """What ``call_next()`` returns: starts the rest of the chain only when awaited,
    so a listener that calls but never awaits it leaves no dangling coroutine."""

    __slots__ = ("_start",)

    def __init__(self, start: Callable[[], Awaitable[Any]]) -> None:
        self._start = start

    def __await__(self) -> Generator[Any, None, Any]:
        return self._start().__await__()


async def run_chain(
    listeners: Sequence[Callable[..., Any]],
    args: tuple[Any, ...],
    base: Callable[[], Awaitable[Any]],
) -> Any:
    """Run ``listeners`` as a waterfall around ``base`` and return the outermost value."""
    count = len(listeners)

    async def step(index: int) -> Any:
        if index == count:
            return await base()
        following = index + 1
        value = listeners[index](*args, lambda: _Pending(lambda: step(following)))
        if inspect.isawaitable(value):
            value = await value
        return value

    return await step(0)
