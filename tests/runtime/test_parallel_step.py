"""Parallel native calls on Ray: a step runs consecutive parallel calls at once, each
exclusive call alone, and records one result per call id in call order."""

import asyncio
import time

import ray

from dsh_actors import AbortController, define_tool, text_block
from dsh_actors.runtime.session.client import SessionLog
from dsh_actors.runtime.step import agent_step

from .fixtures import Recorder, shares_one_host_registry

pytestmark = shares_one_host_registry

T = 120


def timed(name, recorder, *, parallel, fail=False, wait_s=0.3):
    """A tool whose body reports when it started and ended (read from outside)."""
    async def run(args, ctx):
        recorder.add.remote((args["id"], "start", time.monotonic()))
        if ctx.signal is None:
            await asyncio.sleep(wait_s)
        else:
            try:
                await asyncio.wait_for(ctx.signal.wait(), wait_s)
            except asyncio.TimeoutError:
                pass
        recorder.add.remote((args["id"], "end", time.monotonic()))
        if ctx.signal is not None and ctx.signal.aborted:
            return [text_block(f"stopped {args['id']}")]
        if fail:
            raise RuntimeError(f"{args['id']} failed")
        return [text_block(f"done {args['id']}")]

    return define_tool(name=name, description=name, parameters={"id": {"type": "string", "required": True}},
                       execute=run, is_concurrency_safe=(lambda a: True) if parallel else None)


def spans(recorder, count):
    deadline = time.monotonic() + T
    while len(events := ray.get(recorder.all.remote(), timeout=T)) < 2 * count:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    out = {}
    for call_id, edge, at in events:
        out.setdefault(call_id, {})[edge] = at
    return out


def overlap(a, b):
    return a["start"] < b["end"] and b["start"] < a["end"]


def test_parallel_runs_overlap_exclusive_calls_run_alone_and_the_log_keeps_call_order(registry, tmp_path):
    recorder = Recorder.remote()
    registry.register(timed("read", recorder, parallel=True)).result(T)
    registry.register(timed("write", recorder, parallel=False)).result(T)
    scope = registry.scope("stepper")
    session = SessionLog.open(f"par-{time.monotonic_ns()}", str(tmp_path / "s.log"))
    order = ["r1", "r2", "r3", "w4", "r5", "r6"]
    calls = [{"call_id": i, "name": "read" if i[0] == "r" else "write", "arguments": {"id": i}} for i in order]
    reported = []
    results = agent_step(scope, session, calls, on_result=lambda c, r, s: reported.append(c["call_id"])).result(T)
    assert [r.text for r in results] == [f"done {i}" for i in order]
    assert reported == order
    assert [e["call_id"] for e in session.events().result(T)] == order
    s = spans(recorder, len(order))
    assert overlap(s["r1"], s["r2"]) and overlap(s["r2"], s["r3"]) and overlap(s["r5"], s["r6"])
    assert all(s[r]["end"] <= s["w4"]["start"] for r in ("r1", "r2", "r3"))  # the write waited for the reads
    assert all(s["w4"]["end"] <= s[r]["start"] for r in ("r5", "r6"))  # and the next reads for the write
    session.close().result(T)


def test_a_failing_call_in_a_parallel_group_fails_alone(registry, tmp_path):
    recorder = Recorder.remote()
    registry.register(timed("read", recorder, parallel=True)).result(T)
    registry.register(timed("flaky", recorder, parallel=True, fail=True)).result(T)
    scope = registry.scope("stepper")
    session = SessionLog.open(f"fail-{time.monotonic_ns()}", str(tmp_path / "s.log"))
    calls = [{"call_id": "a", "name": "read", "arguments": {"id": "a"}},
             {"call_id": "b", "name": "flaky", "arguments": {"id": "b"}},
             {"call_id": "c", "name": "read", "arguments": {"id": "c"}}]
    results = agent_step(scope, session, calls).result(T)
    assert [r.is_error for r in results] == [False, True, False]
    assert results[1].text == "Error: b failed"
    events = session.events().result(T)
    assert [e["call_id"] for e in events] == ["a", "b", "c"] and [e["type"] for e in events] == ["tool/result"] * 3
    s = spans(recorder, 3)
    assert overlap(s["a"], s["b"]) and overlap(s["b"], s["c"])
    session.close().result(T)


def test_an_abort_mid_group_reaches_every_call_and_each_still_has_one_result(registry, tmp_path):
    recorder = Recorder.remote()
    registry.register(timed("read", recorder, parallel=True, wait_s=60)).result(T)
    scope = registry.scope("stepper")
    session = SessionLog.open(f"abort-{time.monotonic_ns()}", str(tmp_path / "s.log"))
    controller = AbortController()
    calls = [{"call_id": i, "name": "read", "arguments": {"id": i}, "signal": controller.signal}
             for i in ("x", "y", "z")]

    async def scenario():
        step = asyncio.ensure_future(agent_step(scope, session, calls))
        deadline = time.monotonic() + T
        while len(await recorder.all.remote()) < 3:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        controller.abort("the user pressed stop")
        return await asyncio.wait_for(step, T)

    results = asyncio.run(scenario())
    assert [r.text for r in results] == ["stopped x", "stopped y", "stopped z"]
    assert [e["call_id"] for e in session.events().result(T)] == ["x", "y", "z"]
    session.close().result(T)
