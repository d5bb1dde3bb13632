"""Executions as Ray tasks: each call runs the whole pipeline in one task.

The client submits :func:`run_execution` with the tool's Ray options (so the body runs
where its resources are), the token it minted, the call's fields, and the plan ticket it
holds. The task first reads the registry version (one KV read): a ticket older than the
last change that returned is refused with :data:`STALE` before anything runs, and the
client resubmits with a fresh plan. Plans are fetched from the object store only on a
cache miss and kept per worker, so a call pays neither for shipping callbacks nor for
unpickling them again.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any

import msgpack
import ray

from ..core import pipeline
from ..core.pipeline import ExecutionPlan
from ..core.jsonvalue import thaw
from ..core.signal import AbortController
from ..core.types import ExecutionToken, token_from_bytes
from .signals import link_remote_signal
from .version import read_version

__all__ = ["NEED_PLAN", "STALE", "in_execution_task", "pack_call", "run_execution"]

STALE = "dsh-actors:stale-plan"
"""A task's answer when its plan is older than the registry: nothing ran."""
NEED_PLAN = "dsh-actors:need-plan"
"""A task's answer when its worker has not cached the plan yet: resubmit with the ref."""

_in_task = False


def in_execution_task() -> bool:
    """True while this process runs an execution task's pipeline (its loop runs one call)."""
    return _in_task

_PLAN_CACHE: "OrderedDict[str, ExecutionPlan]" = OrderedDict()
_PLAN_CACHE_SIZE = 256
_loop: asyncio.AbstractEventLoop | None = None


def _plan(plan_id: str, plan_box: list[Any] | None) -> ExecutionPlan | None:
    plan = _PLAN_CACHE.get(plan_id)
    if plan is not None:
        _PLAN_CACHE.move_to_end(plan_id)
        return plan
    if plan_box is None:
        return None
    plan = ray.get(plan_box[0])
    _PLAN_CACHE[plan_id] = plan
    if len(_PLAN_CACHE) > _PLAN_CACHE_SIZE:
        _PLAN_CACHE.popitem(last=False)
    return plan


def _event_loop() -> asyncio.AbstractEventLoop:
    global _loop
    if _loop is None or _loop.is_closed():
        _loop = asyncio.new_event_loop()
    return _loop


def pack_call(token: ExecutionToken, execution_fields: dict[str, Any], version: int | None,
              plan_id: str, key: bytes, signal_id: str | None = None, aborted: bytes | None = None) -> bytes:
    """One msgpack envelope per call: a single bytes argument is the cheapest thing Ray
    ships (several pickled arguments cost ~0.08 ms more per call, measured)."""
    parent = execution_fields.get("parent")
    return msgpack.packb({
        "token": token.__reduce__()[1][0],
        "call_id": execution_fields["call_id"],
        "name": execution_fields["name"],
        "arguments": execution_fields["arguments"],
        "agent": execution_fields.get("agent"),
        "parent": None if parent is None else parent.__reduce__()[1][0],
        "version": version,
        "plan": plan_id,
        "key": key,
        "signal": signal_id,
        "aborted": aborted,
    })


async def _run(call: dict[str, Any], plan: ExecutionPlan, hub: Any) -> Any:
    fields = {
        "call_id": call["call_id"], "name": call["name"], "arguments": call["arguments"],
        "agent": call["agent"], "parent": None if call["parent"] is None else token_from_bytes(call["parent"]),
    }
    stop = None
    if call["aborted"] is not None:  # the caller's signal had already aborted
        controller = AbortController()
        controller.abort(ray.cloudpickle.loads(call["aborted"]))
        fields["signal"] = controller.signal
    elif call["signal"] is not None:
        fields["signal"], stop = link_remote_signal(hub, call["signal"])
    try:
        return await pipeline.execute(fields, lambda agent: plan, token=token_from_bytes(call["token"]))
    finally:
        if stop is not None:
            stop()


@ray.remote(max_retries=0)
def run_execution(envelope: bytes, plan_box: list[Any] | None, hub: Any = None) -> dict[str, Any] | str:
    """Run one call through the pipeline; returns the result as plain data (cheaper to
    pickle; the client freezes it again), or :data:`STALE` / :data:`NEED_PLAN` when
    nothing ran.

    ``plan_box`` carries the plan's ref only after this worker answered
    :data:`NEED_PLAN` (a boxed ref costs ~0.2 ms per call in Ray's borrowing protocol).
    ``version`` is ``None`` when the client knows its plan is current (its subscription
    lease is live) or on its last attempt; otherwise the task reads the registry version.
    ``hub`` (the registry's signal hub) comes with calls whose caller passed a signal:
    the tool body's ``ctx.signal`` then aborts when the caller's does.
    """
    global _in_task
    call = msgpack.unpackb(envelope)
    if call["version"] is not None and read_version(call["key"]) != call["version"]:
        return STALE
    try:
        plan = _plan(call["plan"], plan_box)
    except ray.exceptions.ObjectLostError:
        return STALE  # its scope actor went away; the client refetches (and reports it)
    if plan is None:
        return NEED_PLAN
    loop = _event_loop()
    _in_task = True
    try:
        return thaw(loop.run_until_complete(_run(call, plan, hub)))
    except BaseException:
        # Cancellation interrupted the loop mid-call: never reuse a loop in that state.
        loop.close()
        raise
    finally:
        _in_task = False
