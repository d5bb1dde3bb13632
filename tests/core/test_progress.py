"""A body's progress reaches the sink its caller set, from a coroutine or a worker thread,
and nobody else's; without a sink the body is told nobody listens."""

import asyncio
import concurrent.futures
import threading

import pytest

from dsh_actors import InMemoryRegistry, define_tool
from dsh_actors.core.body import BODY_RUNNER
from dsh_actors.core.progress import Reports, progress_to, relay, report_progress

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


def test_reports_from_other_threads_are_read_in_order_while_the_work_runs_and_none_is_lost_at_its_end():
    """``Reports.during``: each report as it comes (the reader sees the first before the work
    ends), then those made just before the work ended; ``None`` while idle, when asked;
    nothing after ``close``."""
    async def run():
        reports, heard = Reports(), []
        first_heard = asyncio.Event()
        loop = asyncio.get_running_loop()

        def body():  # on a thread: one report, wait for it to be read, then a burst and the end at once
            reports.sink(1, 3, "one")
            asyncio.run_coroutine_threadsafe(first_heard.wait(), loop).result(5)
            for k in (2, 3):
                reports.sink(k, 3, None)
            loop.call_soon_threadsafe(work.set_result, None)

        work = loop.create_future()
        threading.Thread(target=body).start()
        async for report in reports.during(work):
            heard.append((report, work.done()))
            first_heard.set()

        idle, pinged = Reports(), []
        nap = asyncio.ensure_future(asyncio.sleep(0.25))
        async for report in idle.during(nap, idle_s=0.05):
            pinged.append(report)
        idle.close()
        idle.sink(9, None, "late")
        late = [r async for r in idle.during(nap)]
        return heard, pinged, late

    heard, pinged, late = asyncio.run(run())
    assert heard[0][1] is False  # heard while the work ran
    assert [r for r, _ in heard] == [(1, 3, "one"), (2, 3, None), (3, 3, None)]
    assert pinged and set(pinged) == {None}
    assert late == []


def test_relay_hands_each_report_to_the_sink_and_answers_the_first_other_item():
    async def stream(*items):
        for item in items:
            yield asyncio.sleep(0, item)

    def deaf(*report):
        heard.append(report)
        raise RuntimeError("a listener that fails never stops the call")

    heard = []
    assert asyncio.run(relay(stream((1, None, "a"), (2, 2, None), b"outcome", (3, 3, "after")), deaf)) == b"outcome"
    assert heard == [(1, None, "a"), (2, 2, None)]
    assert asyncio.run(relay(stream((1, None, None)), lambda *report: None)) is None  # ended without one
