"""Awaiting with a time limit, without ever losing a cancel.

Python 3.11's ``asyncio.wait_for`` returns the awaited value when that value arrives in
the same turn of the loop as a cancel of the waiting task: the cancel is swallowed and
the task goes on as if nobody had asked it to stop. ``asyncio.run`` ends by cancelling
each task once, so a task that swallowed its cancel and then waited for something that
only a cancel ends (a channel kept open, a reply nobody will send) kept ``asyncio.run``
from ever returning. :func:`within` uses ``asyncio.timeout``, which counts cancels and
re-raises one that came from outside. The package never calls ``wait_for``; a test
scans for it.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, TypeVar

__all__ = ["within"]

T = TypeVar("T")


async def within(awaitable: Awaitable[T], seconds: float | None) -> T:
    """``await awaitable``, or :class:`TimeoutError` after ``seconds`` (``None``: no
    limit); the awaited work is cancelled with the wait, as with ``wait_for`` (same
    arguments, in the same order)."""
    async with asyncio.timeout(seconds):
        return await awaitable
