"""A job's breakers, as its summary tells them: when each opened and closed, and where.

Breakers live where their dependency is used — a tool's in each executor
(:func:`~dsh_actors.policies.breaker_policy`), an endpoint's in each runner's model client
— so each change is written to Ray's KV store by whichever process made it
(:class:`BreakerRecorder`, one key per change: nothing is shared to write), and the driver
reads the job's at its end (:func:`breaker_history`).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

__all__ = ["BreakerRecorder", "breaker_history"]

_NAMESPACE = "dsh_actors"


def _prefix(job: str) -> str:
    return f"breakers:{job}:"


class BreakerRecorder:
    """A breaker's ``on_change`` for job ``job``: ``kind`` is ``tool`` or ``endpoint``.
    Picklable (it travels to the executors in the job's policy)."""

    def __init__(self, job: str, kind: str) -> None:
        self.job, self.kind = job, kind

    def __call__(self, name: str, state: str, at: float) -> None:
        from ray.experimental import internal_kv

        from ..tools.workspace import node_folder

        change = {"kind": self.kind, "name": name, "state": state, "at": at, "node": node_folder()}
        internal_kv._internal_kv_put(f"{_prefix(self.job)}{uuid.uuid4().hex}", json.dumps(change).encode(),
                                     True, namespace=_NAMESPACE)


def breaker_history(job: str) -> list[dict[str, Any]]:
    """Job ``job``'s breakers, each ``{kind, name, node, opened_at, closed_at}`` (``closed_at``
    ``None``: still open at the end), in the order they opened; its records are removed."""
    from ray.experimental import internal_kv

    keys = internal_kv._internal_kv_list(_prefix(job), namespace=_NAMESPACE)
    changes = []
    for key in keys:
        raw = internal_kv._internal_kv_get(key, namespace=_NAMESPACE)
        if raw:
            changes.append(json.loads(raw))
        internal_kv._internal_kv_del(key, namespace=_NAMESPACE)
    spans: list[dict[str, Any]] = []
    open_now: dict[tuple[str, str, str], dict[str, Any]] = {}
    for change in sorted(changes, key=lambda c: c["at"]):
        key = (change["kind"], change["name"], change["node"])
        if change["state"] == "open" and key not in open_now:
            open_now[key] = {"kind": key[0], "name": key[1], "node": key[2], "opened_at": change["at"],
                             "closed_at": None}
            spans.append(open_now[key])
        elif change["state"] == "closed" and key in open_now:
            open_now.pop(key)["closed_at"] = change["at"]
    return spans
