"""What this process keeps for the runtime, in one place.

A process that uses the runtime (a driver, an executor, a runner, a scope host) fills a few
caches as it works: the actors it saw die for good, its owner of each registry it calls
(links, plans, routes, transports), its handles on each node's environment host and session
writer, its session batchers per event loop, its Code Mode runtimes per configuration, and
the anchor actor that dies with it. They are per process by nature (a handle or a loop does
not travel), so they live here, in :func:`current`'s :class:`ProcessState` — where a reader
finds them and a test can empty them (:func:`reset`) to start as a fresh process would.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = ["ProcessState", "current", "reset"]


@dataclass(eq=False)
class ProcessState:
    """This process's runtime caches (see the module docs); the lock guards making an entry."""

    dead_actors: set[str] = field(default_factory=set)
    """Ids (hex) of actors this process saw die for good: a client holding one of them
    re-resolves its actor by name instead of reusing a dead handle."""
    owners: dict[tuple[str, str], Any] = field(default_factory=dict)
    """(namespace, registry) -> its :class:`~.caller.owner.RegistryOwner`."""
    env_hosts: dict[tuple[str, str], Any] = field(default_factory=dict)
    """(namespace, node) -> the handle of that node's environment host."""
    session_writers: dict[tuple[str, str], Any] = field(default_factory=dict)
    """(namespace, node) -> the handle of that node's session writer."""
    session_batchers: "weakref.WeakKeyDictionary[Any, dict[str, Any]]" = field(
        default_factory=weakref.WeakKeyDictionary)
    """event loop -> (writer id -> the batcher that sends that loop's session ops to it)."""
    code_runtimes: dict[Any, Any] = field(default_factory=dict)
    """A Code Mode runtime config -> the runtime made for it here (made once, on a thread)."""
    anchor: Any = None
    """The anchor actor that dies with this process (its plugins are disposed then)."""
    lock: threading.Lock = field(default_factory=threading.Lock)


_CURRENT = ProcessState()


def current() -> ProcessState:
    """This process's state."""
    return _CURRENT


def reset() -> None:
    """Empty every cache of this process (in place: a module that holds one still sees the
    emptied one), as a fresh process starts. For tests."""
    for entry in fields(_CURRENT):
        value = getattr(_CURRENT, entry.name)
        if hasattr(value, "clear"):
            value.clear()
    _CURRENT.anchor = None
