"""Fleet-wide limits: a cap on calls in flight per tool across agents on several nodes, held
in one actor that keeps its slots across a restart. What ran when is read from files the
tool writes (start, end, node), not from the limiter's view of itself."""

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
import ray

from dsh_actors import define_tool, text_block
from dsh_actors.eval.job import run_episodes
from dsh_actors.runtime.limits import LimiterActor, fleet_limit, limiter_name, parse_fleet_limit

from .fixtures import WhenMarked, shares_one_host_registry

pytestmark = [pytest.mark.timeout(300), shares_one_host_registry]


def slow_tool(folder, sleep_s=0.4):
    folder = str(folder)

    def body(args, ctx):
        start = time.time()
        time.sleep(sleep_s)
        node = ray.get_runtime_context().get_node_id()
        Path(folder, f"{ctx.agent}.{args.get('n', 0)}.{time.monotonic_ns()}").write_text(f"{start} {time.time()} {node}")
        return [text_block("done")]
    return define_tool(name="slow", description="sleep, then mark", parameters={"n": {"type": "number"}},
                       execute=body)


def most_at_once(folder):
    edges = []
    for path in Path(folder).iterdir():
        start, end, _ = path.read_text().split()
        edges += [(float(start), 1), (float(end), -1)]
    level = peak = 0
    for _, step in sorted(edges, key=lambda e: (e[0], e[1])):  # an end before a start at the same instant
        level += step
        peak = max(peak, level)
    return peak


def nodes_used(folder):
    return {p.read_text().split()[2] for p in Path(folder).iterdir()}


def episodes(count, calls, cap):
    return [{"id": f"lim-{i}", "policies": [f"fleet-limit:slow={cap}"],
             "turns": [{"calls": [{"name": "slow", "arguments": {"n": n}}]} for n in range(calls)]}
            for i in range(count)]


def collect(stream):
    async def run():
        return [r async for r in stream]
    return asyncio.run(run())


def test_a_fleet_limit_caps_calls_in_flight_across_agents_on_every_node(ray_cluster, tmp_path):
    reports = collect(run_episodes(episodes(10, 2, 2), tools=[slow_tool(tmp_path)], reference_tools=False,
                                   in_flight=10))
    assert all(r.status == "ok" and r.ok == 2 for r in reports), [(r.id, r.message) for r in reports]
    assert len(list(tmp_path.iterdir())) == 20
    assert most_at_once(tmp_path) == 2  # never more, and the cap is used (not one at a time)
    assert len(nodes_used(tmp_path)) == 2  # the agents' calls ran on both nodes


def test_the_limit_holds_while_its_actor_is_killed_and_restarted(ray_cluster, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()

    def kill_limiter():
        limiter = ray.get_actor(limiter_name("default"), namespace="dsh-actors")
        os.kill(ray.get(limiter.pid.remote()), signal.SIGKILL)

    killer = WhenMarked(marks, 4, kill_limiter)
    reports = collect(run_episodes(episodes(12, 2, 3), tools=[slow_tool(marks, 0.3)], reference_tools=False,
                                   in_flight=12))
    killed = [killer.join()]
    assert killed[0] is not None
    assert all(r.status == "ok" and r.ok == 2 for r in reports), [(r.id, r.message) for r in reports]
    assert len(list(marks.iterdir())) == 24 and most_at_once(marks) <= 3
    assert any(float(p.read_text().split()[0]) > killed[0] for p in marks.iterdir())  # calls went on after it


@pytest.mark.own_registry  # it kills or ends a part of its registry, or counts its calls
def test_a_call_waiting_for_a_slot_can_be_cancelled_and_leaves_no_slot_taken(registry, tmp_path):
    name = f"cancel-{os.getpid()}-{time.monotonic_ns()}"
    registry.register(slow_tool(tmp_path, sleep_s=1.5)).result(60)
    registry.on("tools/execute", fleet_limit({"slow": 1}, name=name)).result(60)
    holding = registry.execute(call_id="a", name="slow", arguments={"n": 1})
    time.sleep(0.5)
    waiting = registry.execute(call_id="b", name="slow", arguments={"n": 2})
    time.sleep(0.3)
    waiting.cancel()
    assert waiting.result(60).is_error  # aborted while it waited
    assert not holding.result(60).is_error
    limiter = ray.get_actor(limiter_name(name), namespace="dsh-actors")
    deadline = time.monotonic() + 30
    while ray.get(limiter.in_use.remote()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ray.get(limiter.in_use.remote()) == {}
    assert len(list(tmp_path.iterdir())) == 1  # the cancelled call's body never ran
    third = registry.execute(call_id="c", name="slow", arguments={"n": 3}).result(60)
    assert not third.is_error  # its slot came back
    ray.kill(limiter)


def test_fleet_limits_say_what_is_wrong_with_them():
    assert parse_fleet_limit("bash=4,read_file+write_file=8") == {("bash",): 4, ("read_file", "write_file"): 8}
    for bad, says in [("bash", "is not tool=N"), ("bash=0", "is not tool=N"), ("bash=4,bash=2", "in two"),
                      ("=3", "is not tool=N"), ("a b=1", "is not tool=N")]:
        with pytest.raises(ValueError, match=says):
            parse_fleet_limit(bad)
    with pytest.raises(ValueError, match="at least 1"):
        fleet_limit({"bash": 0})
    assert LimiterActor is not None
