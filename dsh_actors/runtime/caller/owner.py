"""One owner per registry per process: everything this process keeps of one registry.

A :class:`RegistryOwner` holds, for one registry (by namespace and name):

- ``link``: the handles of the registry's actors, re-resolved when seen dead;
- ``plans``: the plan tickets per scope, the version subscription, the plans fetched here;
- ``routes``: which executor a call goes to (the caller's node first);
- ``remote`` and ``local``: the two sides of the transport seam — actor tasks on an
  executor, or the executor serving this very event loop (set by that executor when it
  starts serving, so the caller never needs the executor module to know it runs in one).

Clients, calls, scope hosts, Code Mode queues and executors of the registry in a process
all share its owner, so what one of them learns (a dead handle, a new version, a
restarting executor) holds for all.
"""

from __future__ import annotations


from .link import RegistryLink
from .plans import PlanCache
from .routes import ExecutorRoutes
from .transport import LocalTransport, RemoteTransport
from ..process import current
from ..version import version_key

__all__ = ["RegistryOwner", "forget", "owner"]


class RegistryOwner:
    """This process's state of one registry (see the module docs)."""

    def __init__(self, name: str, namespace: str) -> None:
        self.name, self.namespace = name, namespace
        self.link = RegistryLink(name, namespace)
        self.plans = PlanCache(self.link)
        self.routes = ExecutorRoutes(self.link)
        self.remote = RemoteTransport()
        self.local: LocalTransport | None = None
        self.version_key = version_key(namespace, name)

    def local_here(self) -> LocalTransport | None:
        """The local side when the running loop is this registry's executor's, else ``None``."""
        local = self.local
        return local if local is not None and local.serves_running_loop() else None


def owner(name: str, namespace: str) -> RegistryOwner:
    """This process's owner of registry ``name`` in ``namespace`` (made on first use, kept
    in :attr:`.process.ProcessState.owners`)."""
    state, key = current(), (namespace, name)
    found = state.owners.get(key)
    if found is None:
        with state.lock:
            found = state.owners.get(key)
            if found is None:
                found = state.owners[key] = RegistryOwner(name, namespace)
    return found  # type: ignore[no-any-return]


def forget(name: str, namespace: str) -> None:
    """Drop this process's owner of registry ``name`` in ``namespace``: its registry was
    ended here. What the owner kept goes with it — the plans it fetched hold the handles
    of the policy actors they name, which then never died, one set per registry a
    long-lived driver ever made. A later ``connect`` to that name makes a new owner."""
    state = current()
    with state.lock:
        gone = state.owners.pop((namespace, name), None)
    if gone is not None:
        gone.plans.clear()  # (a client of the ended registry may still hold its owner)
