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

import ray

from ..core import pipeline
from ..core.pipeline import ExecutionPlan
from ..core.types import ExecutionToken, ToolExecutionResult
from .version import read_version

__all__ = ["STALE", "run_execution"]

STALE = "dsh-actors:stale-plan"
"""A task's answer when its plan is older than the registry: nothing ran."""

_PLAN_CACHE: "OrderedDict[str, ExecutionPlan]" = OrderedDict()
_PLAN_CACHE_SIZE = 256
_loop: asyncio.AbstractEventLoop | None = None


def _plan(plan_box: list[Any]) -> ExecutionPlan:
    ref = plan_box[0]
    key = ref.hex()
    plan = _PLAN_CACHE.get(key)
    if plan is None:
        plan = ray.get(ref)
        _PLAN_CACHE[key] = plan
        if len(_PLAN_CACHE) > _PLAN_CACHE_SIZE:
            _PLAN_CACHE.popitem(last=False)
    else:
        _PLAN_CACHE.move_to_end(key)
    return plan


def _event_loop() -> asyncio.AbstractEventLoop:
    global _loop
    if _loop is None or _loop.is_closed():
        _loop = asyncio.new_event_loop()
    return _loop


@ray.remote(max_retries=0)
def run_execution(
    token: ExecutionToken, fields: dict[str, Any], version: int | None, plan_box: list[Any], key: bytes,
) -> ToolExecutionResult | str:
    """Run one call through the pipeline against the plan in ``plan_box``.

    ``version=None`` skips the freshness check (the client's last attempt, with a plan it
    fetched after the newest change it saw).
    """
    if version is not None and read_version(key) != version:
        return STALE
    try:
        plan = _plan(plan_box)
    except ray.exceptions.ObjectLostError:
        return STALE  # its scope actor went away; the client refetches (and reports it)
    loop = _event_loop()
    try:
        return loop.run_until_complete(pipeline.execute(fields, lambda agent: plan, token=token))
    except BaseException:
        # Cancellation interrupted the loop mid-call: never reuse a loop in that state.
        loop.close()
        raise
