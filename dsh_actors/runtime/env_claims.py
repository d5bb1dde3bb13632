"""Which node starts an environment that processes on several nodes may want at once.

Processes that start an agent's environment on first use (the MCP gateway's replicas)
claim it in the cluster's KV store first; only the claimant's node starts it, and the
others wait for it to run there. Under a claim's key (``<key>/``):

- ``node`` holds ``"<node id> <time>"``: the claimant, and when it claimed (wall clock: a
  claim older than a start takes is one whose environment is no longer coming);
- ``over/<node>`` marks a takeover from ``<node>`` (gone, or it never started it): the
  first process to write it is the new claimant, so two that take over at once agree;
- ``beat`` changes every few seconds while a claimant starts the environment (its
  heartbeat): a waiter that sees it still for long takes the claimant for one that died, or
  one whose environment died after it started — and compares only what it read itself, on
  its own clock, so no two nodes' clocks are compared.

The environment's host deletes the claim (:func:`release`) when the environment ends, if
the claim still names its node, and the next first call claims afresh. Blocking calls to
the cluster's KV store (run them off an event loop).
"""

from __future__ import annotations

import os
import time

from ray.experimental import internal_kv

from .local import this_node

__all__ = ["EnvClaim", "KV_NAMESPACE", "release"]

KV_NAMESPACE = "dsh_actors"
"""The cluster KV store's namespace of this package's keys."""


def _read(value: bytes | None) -> tuple[str, float] | None:
    if not value:
        return None
    node, _, since = value.decode().partition(" ")
    try:
        return node, float(since)
    except ValueError:
        return node, 0.0


class EnvClaim:
    """One environment's claim, under ``key`` (unique to the environment and its owner)."""

    def __init__(self, key: str) -> None:
        self.key = key.encode()

    def _put(self, name: bytes, value: bytes, overwrite: bool) -> bool:
        """Whether ``name`` was there already."""
        return internal_kv._internal_kv_put(self.key + b"/" + name, value, overwrite, namespace=KV_NAMESPACE)

    def _get(self, name: bytes) -> tuple[str, float] | None:
        return _read(internal_kv._internal_kv_get(self.key + b"/" + name, namespace=KV_NAMESPACE))

    def take(self, over: str | None = None) -> tuple[str, float]:
        """Claim it for this node — in place of claimant ``over``, if given — and answer the
        claimant now (this node, or the one that was first) and when it claimed."""
        here, now = this_node() or "", time.time()
        mine = f"{here} {now}".encode()
        if over is not None:
            if not self._put(b"over/" + over.encode(), mine, overwrite=False):
                self._put(b"node", mine, overwrite=True)
                return here, now
            return self._get(b"over/" + over.encode()) or (here, now)
        if not self._put(b"node", mine, overwrite=False):
            return here, now
        return self._get(b"node") or (here, now)

    def beat(self) -> None:
        """Say this process is still starting the environment (see the module docs)."""
        self._put(b"beat", f"{this_node()} {os.getpid()} {time.monotonic_ns()}".encode(), overwrite=True)

    def heartbeat(self) -> bytes | None:
        """The latest beat (``None`` before any): compare it with one read before."""
        return internal_kv._internal_kv_get(self.key + b"/beat", namespace=KV_NAMESPACE)  # type: ignore[no-any-return]

    def drop(self) -> None:
        """Give up this node's claim (it could not start the environment)."""
        release(self.key, this_node() or "")


def release(key: bytes, node: str) -> None:
    """Delete claim ``key`` (with its takeover marks) if it names ``node``."""
    held = _read(internal_kv._internal_kv_get(key + b"/node", namespace=KV_NAMESPACE))
    if held is not None and held[0] == node:
        internal_kv._internal_kv_del(key + b"/", del_by_prefix=True, namespace=KV_NAMESPACE)
