"""Keeping Python's cyclic garbage collector off what a job holds for its whole run.

A driver validates and keeps thousands of episodes; each collection the collector makes
walks every container object alive, so parsing 10,000 episodes cost more in collections
than in parsing, and a job's loop paid again for every object made before it.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Iterator

__all__ = ["collector_paused", "long_lived"]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic collection inside (for a loop that builds objects and keeps them all:
    none of them is garbage yet); the collector's state is restored after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextlib.contextmanager
def long_lived() -> Iterator[None]:
    """Everything alive on entry is left out of collections until exit (``gc.freeze``):
    a job's episodes and setup live as long as its loop, which makes short-lived objects."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
