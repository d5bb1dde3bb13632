"""The registry version: one counter per registry, kept in the cluster's KV store.

The registry actor is its only writer: every change (global, or reported by a scope
actor) bumps it *after* the change is applied and before the change's call returns.
An executor reads it once (≈0.3 ms) and runs only a plan of that version, so no
call ever runs against a view older than the last change that returned.
"""

from __future__ import annotations

from ray.experimental import internal_kv

__all__ = ["VersionStore", "read_version", "version_key", "write_version"]

_NAMESPACE = "dsh_actors"


def version_key(namespace: str, registry: str) -> bytes:
    return f"registry-version/{namespace}/{registry}".encode()


def read_version(key: bytes) -> int:
    raw = internal_kv._internal_kv_get(key, namespace=_NAMESPACE)
    return int(raw) if raw else 0


def write_version(key: bytes, version: int) -> None:
    internal_kv._internal_kv_put(key, str(version).encode(), overwrite=True, namespace=_NAMESPACE)


class VersionStore:
    """One registry's version in the cluster's KV store (what a registry actor publishes to)."""

    def __init__(self, namespace: str, registry: str) -> None:
        self.key = version_key(namespace, registry)

    def read(self) -> int:
        return read_version(self.key)

    def write(self, version: int) -> None:
        write_version(self.key, version)
