"""A body's progress reaches the sink its caller set, from a coroutine or a worker thread,
and nobody else's; without a sink the body is told nobody listens."""

import asyncio
import concurrent.futures
import threading

import pytest

from dsh_actors import InMemoryRegistry, define_tool
from dsh_actors.core.body import BODY_RUNNER
from dsh_actors.core.progress import progress_to, report_progress

pytestmark = pytest.mark.timeout(30)


def _registry():
    async def steps(args, ctx):
        return [{"type": "text", "text": repr([ctx.report_progress(k, 2, f"step {k}") for k in (1, 2)])}]

    def plain(args, ctx):
        return [{"type": "text", "text": repr((threading.current_thread().name, ctx.report_progress(0.5)))}]

    registry = InMemoryRegistry()
    registry.register(define_tool(name="steps", description="s", parameters={}, execute=steps))
    registry.register(define_tool(name="plain", description="p", parameters={}, execute=plain))
    return registry


def test_a_sink_hears_the_reports_of_the_calls_made_inside_its_block_only():
    registry, heard = _registry(), []

    async def run():
        with progress_to(lambda *report: heard.append(report)):
            inside = await registry.execute(call_id="a", name="steps", arguments={})
        outside = await registry.execute(call_id="b", name="steps", arguments={})
        return inside, outside

    inside, outside = asyncio.run(run())
    assert heard == [(1.0, 2.0, "step 1"), (2.0, 2.0, "step 2")]
    assert inside.content[0]["text"] == "[True, True]" and outside.content[0]["text"] == "[False, False]"


def test_a_plain_body_on_a_worker_thread_reports_to_its_callers_sink_and_leaves_none_behind():
    registry, heard = _registry(), []
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="body")

    async def run():
        loop = asyncio.get_running_loop()
        BODY_RUNNER.set(lambda fn: loop.run_in_executor(pool, fn))  # as an executor runs plain bodies
        with progress_to(lambda *report: heard.append(report)):
            heard_call = await registry.execute(call_id="a", name="plain", arguments={})
        after = await registry.execute(call_id="b", name="plain", arguments={})  # the same thread, no sink
        return heard_call, after

    try:
        heard_call, after = asyncio.run(run())
    finally:
        pool.shutdown()
    assert heard == [(0.5, None, None)]
    assert "body" in heard_call.content[0]["text"] and heard_call.content[0]["text"].endswith("True)")
    assert after.content[0]["text"].endswith("False)")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), True, "1", None])
def test_progress_must_be_a_finite_number(bad):
    with pytest.raises(ValueError, match="progress must be a finite number"):
        report_progress(bad)


def test_a_message_must_be_text():
    with pytest.raises(TypeError, match="message must be a str"):
        report_progress(1, message=3)
