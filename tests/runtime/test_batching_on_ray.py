"""Calls in flight together share actor tasks on real Ray: each still gets its own result,
exactly once; a call that waits never holds the ones batched beside it; a cancel stops only
its call; an executor killed with a batch in flight costs each call one coded result."""

import asyncio
import os
import signal
import time

import pytest
import ray

from dsh_actors import ask, define_tool, text_block
from dsh_actors.runtime import ToolRegistry

from .fixtures import Recorder, call_ids_into, echo, hanging_registry, shares_one_host_registry

pytestmark = shares_one_host_registry

T = 120


def test_hundreds_of_calls_in_flight_each_get_their_own_result_and_are_observed_once(registry):
    registry.register(echo()).result(T)
    observed = Recorder.remote()
    registry.on("tools/result", call_ids_into(observed)).result(T)
    scope = registry.scope("busy")

    async def scenario():
        calls = [scope.execute(call_id=f"c{i}", name="echo", arguments={"text": f"text {i}"}) for i in range(300)]
        return await asyncio.wait_for(asyncio.gather(*calls), T)

    results = asyncio.run(scenario())
    assert [(r.call_id, r.text) for r in results] == [(f"c{i}", f"text {i}") for i in range(300)]
    deadline = time.monotonic() + 30
    while len(ray.get(observed.all.remote(), timeout=T)) < 300 and time.monotonic() < deadline:
        time.sleep(0.1)
    heard = ray.get(observed.all.remote(), timeout=T)
    assert sorted(heard) == sorted(f"c{i}" for i in range(300))  # each once, none twice


def test_a_call_waiting_for_approval_never_holds_the_calls_sent_beside_it(registry):
    registry.register(echo()).result(T)
    registry.register(echo("risky")).result(T)
    registry.on("tools/pre-execute", lambda e, n: ask("check") if e.name == "risky" else n()).result(T)
    queue = registry.approvals(policy="ask").result(T)
    scope = registry.scope("mixed")

    async def scenario():
        # One loop turn: the first call goes alone, the rest travel together.
        first = asyncio.ensure_future(scope.execute(call_id="first", name="echo", arguments={"text": "first"}))
        risky = asyncio.ensure_future(scope.execute(call_id="risky", name="risky", arguments={}))
        plain = [asyncio.ensure_future(scope.execute(call_id=f"p{i}", name="echo", arguments={"text": f"p{i}"}))
                 for i in range(10)]
        done = await asyncio.wait_for(asyncio.gather(first, *plain), T)  # while the ask is pending
        still_waiting = not risky.done()
        deadline = time.monotonic() + 60
        while not await queue.pending() and time.monotonic() < deadline:  # the ask may reach the queue last
            await asyncio.sleep(0.05)
        for request in await queue.pending():
            await queue.reject(request["id"])
        return done, still_waiting, await asyncio.wait_for(risky, T)

    done, still_waiting, risky = asyncio.run(scenario())
    assert [r.text for r in done] == ["first", *(f"p{i}" for i in range(10))]
    assert still_waiting and risky.is_error and risky.call_id == "risky"


def test_cancelling_one_call_of_many_in_flight_stops_that_call_alone(registry):
    started = Recorder.remote()

    async def waits(args, ctx):
        started.add.remote(int(args["n"]))
        await asyncio.sleep(float(args["s"]))
        return [text_block(f"finished {int(args['n'])}")]

    registry.register(define_tool(name="waits", description="x", execute=waits, parameters={
        "n": {"type": "number", "required": True}, "s": {"type": "number", "required": True}})).result(T)

    async def scenario():
        responses = [registry.execute(call_id=f"w{n}", name="waits", arguments={"n": n, "s": 600 if n == 5 else 3})
                     for n in range(10)]
        waiting = [asyncio.ensure_future(r) for r in responses]
        deadline = time.monotonic() + 60
        while len(await started.all.remote()) < 10 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        responses[5].cancel()
        cancelled = await asyncio.wait_for(waiting[5], T)
        others_running = sum(not w.done() for w in waiting)
        return cancelled, others_running, await asyncio.wait_for(asyncio.gather(*waiting[:5], *waiting[6:]), T)

    cancelled, others_running, others = asyncio.run(scenario())
    assert cancelled.error == {"name": "ExecutionCancelledError", "code": "CANCELLED"} and cancelled.call_id == "w5"
    assert others_running == 9  # cancelled while the others still ran (each sleeps 3 s)
    assert [r.text for r in others] == [f"finished {n}" for n in range(10) if n != 5]


@pytest.mark.parametrize("kill", ["ray.kill", "SIGKILL"])
def test_an_executor_killed_with_many_calls_in_flight_gives_each_one_coded_result(ray_cluster, kill):
    registry = ToolRegistry.connect(f"one-executor-kill-{kill}-{time.monotonic_ns()}", executors=1)
    try:
        started, observed = hanging_registry(registry)

        async def scenario():
            calls = [asyncio.ensure_future(registry.execute(call_id=f"v{i}", name="hangs", arguments={}))
                     for i in range(20)]
            deadline = time.monotonic() + 60
            while len(await started.all.remote()) < 20 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            [victim] = await registry._handle().executors.remote()
            if kill == "ray.kill":
                ray.kill(victim)
            else:
                os.kill((await started.all.remote())[0], signal.SIGKILL)
            results = await asyncio.wait_for(asyncio.gather(*calls), T)
            # At once, while Ray is still restarting the only executor: these wait for it.
            after = await asyncio.wait_for(asyncio.gather(*(
                registry.execute(call_id=f"after-{i}", name="echo", arguments={"text": "ok"}) for i in range(3))), T)
            return results, after

        results, after = asyncio.run(scenario())
        assert [r.call_id for r in results] == [f"v{i}" for i in range(20)]
        assert all(r.error == {"name": "WorkerCrashedError", "code": "WORKER_CRASHED"} for r in results), \
            {r.text for r in results}
        assert [r.text for r in after] == ["ok"] * 3, [r.text for r in after]  # the pool serves again
        deadline = time.monotonic() + 20
        while len(ray.get(observed.all.remote(), timeout=T)) < 23 and time.monotonic() < deadline:
            time.sleep(0.1)
        heard = ray.get(observed.all.remote(), timeout=T)
        assert sorted(h for h in heard if h.startswith("v")) == sorted(f"v{i}" for i in range(20))  # once each
    finally:
        registry.shutdown()
