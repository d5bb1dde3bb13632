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
from dsh_actors.runtime.limits import LimiterActor, fleet_limit, parse_fleet_limit
from dsh_actors.runtime.wire import limiter_name

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


# --- the limiter under its own faults ---------------------------------------------------------

def _core(name):
    from dsh_actors.runtime.limits import LimiterActorCore

    return LimiterActorCore(name)


def test_a_restarted_limiter_keeps_slots_held_past_their_first_lease_and_lets_dead_ones_lapse(ray_cluster):
    """Renewals are not written: a limiter restarted while calls older than a lease hold
    slots must keep them (it used to lapse them, and 4 calls ran under a cap of 2)."""
    import msgpack
    from ray.experimental import internal_kv

    from dsh_actors.runtime import limits

    name = f"restart-{os.getpid()}-{time.monotonic_ns()}"

    async def scenario():
        first = _core(name)
        assert await first.acquire("old-1", "bash", 2) and await first.acquire("old-2", "bash", 2)
        # As the KV store holds them after the calls ran long: their written expiry passed.
        record = msgpack.unpackb(internal_kv._internal_kv_get(f"limits:{name}".encode(), namespace="dsh_actors"))
        record["held"] = {lease: [group, time.time() - 60] for lease, (group, _) in record["held"].items()}
        internal_kv._internal_kv_put(f"limits:{name}".encode(), msgpack.packb(record), True, namespace="dsh_actors")
        successor = _core(name)  # as Ray restarts it
        third = asyncio.ensure_future(successor.acquire("new", "bash", 2))
        await asyncio.sleep(0.2)
        waited = not third.done()
        renewed = await successor.renew("old-1")  # a live holder's renewal reaches the successor
        await successor.release("old-1")
        await asyncio.wait_for(third, 10)
        return waited, renewed, successor.in_use()

    waited, renewed, in_use = asyncio.run(scenario())
    assert waited and renewed and in_use == {"bash": 2}
    assert limits.LEASE_S > limits.CONFIRM_S


def test_a_group_has_one_cap_while_it_is_in_use(ray_cluster):
    from dsh_actors.runtime.limits import FleetLimitConflictError

    name = f"caps-{os.getpid()}-{time.monotonic_ns()}"

    async def scenario():
        core = _core(name)
        await core.acquire("a", "bash", 1)
        with pytest.raises(FleetLimitConflictError, match="cap of 1 calls in flight; this call asked for 8"):
            await core.acquire("b", "bash", 8)
        await core.release("a")
        return await core.acquire("c", "bash", 8)  # idle: a later fleet may choose another cap

    assert asyncio.run(scenario())


def test_episodes_giving_a_group_two_caps_are_refused_before_anything_runs():
    turns = [{"calls": [{"name": "bash", "arguments": {"command": "true"}}]}]
    bad = [{"id": "one", "policies": ["fleet-limit:bash=1"], "turns": turns},
           {"id": "eight", "policies": ["fleet-limit:bash=8"], "turns": turns}]
    with pytest.raises(ValueError, match=r"episodes 'one' and 'eight' give the fleet limit 'bash' two caps \(1 and 8\)"):
        collect(run_episodes(bad))


@ray.remote(num_cpus=0)
class Doomed:
    """A process whose calls wait for slots, then dies (as a dead job's executor)."""

    def alive(self):
        from dsh_actors.runtime.wire import PROCESS_INCARNATION

        return PROCESS_INCARNATION

    async def wait_for_slots(self, name, leases):
        from dsh_actors.runtime.limits import LimiterActor, LIMITER_OPTIONS
        from dsh_actors.runtime.wire import limiter_name
        from dsh_actors.runtime.requester import requester

        limiter = LimiterActor.options(name=limiter_name(name), namespace="dsh-actors", get_if_exists=True,
                                       **LIMITER_OPTIONS).remote(name)
        await asyncio.gather(*[limiter.acquire.remote(lease, "bash", 1, requester()) for lease in leases])


def test_a_dead_callers_waiting_requests_are_dropped_and_never_granted(ray_cluster):
    """Waiters of a process that died (a job whose driver died, its executors with it)
    used to be granted the slot in turn, each held 30 s by nobody."""
    from dsh_actors.runtime.limits import LIMITER_OPTIONS
    from dsh_actors.runtime.wire import limiter_name

    name = f"dead-{os.getpid()}-{time.monotonic_ns()}"
    limiter = LimiterActor.options(name=limiter_name(name), namespace="dsh-actors", get_if_exists=True,
                                   **LIMITER_OPTIONS).remote(name)
    try:
        assert ray.get(limiter.acquire.remote("holder", "bash", 1), timeout=60)
        doomed = Doomed.remote()
        doomed.wait_for_slots.remote(name, [f"dead-{i}" for i in range(8)])
        deadline = time.monotonic() + 60
        while ray.get(limiter.waiting.remote(), timeout=60) != {"bash": 8} and time.monotonic() < deadline:
            time.sleep(0.05)
        ray.kill(doomed)
        while ray.get(limiter.waiting.remote(), timeout=60) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert ray.get(limiter.waiting.remote(), timeout=60) == {}  # dropped, not queued for slots
        ray.get(limiter.release.remote("holder"), timeout=60)
        assert ray.get(limiter.acquire.remote("live", "bash", 1), timeout=60)  # the slot is free at once
        assert not any(ray.get([limiter.renew.remote(f"dead-{i}") for i in range(8)], timeout=60))
    finally:
        ray.kill(limiter)


@pytest.mark.own_registry  # it kills its limiter (a named actor of its own)
def test_a_limiter_killed_for_good_is_made_again_and_every_call_runs_under_the_cap(registry, tmp_path):
    """ray.kill of the limiter while calls hold and wait: none is lost or denied (10 of 20
    used to end as policy denials, and every later limited call failed: the dead handle
    was cached), the cap holds, and a later call runs."""
    name = f"killed-{os.getpid()}-{time.monotonic_ns()}"
    marks = tmp_path / "marks"
    marks.mkdir()
    registry.register(slow_tool(marks, sleep_s=0.5)).result(60)
    registry.on("tools/execute", fleet_limit({"slow": 2}, name=name)).result(60)

    def kill_limiter():
        ray.kill(ray.get_actor(limiter_name(name), namespace="dsh-actors"))

    killer = WhenMarked(marks, 4, kill_limiter)

    async def calls():
        return await asyncio.gather(*[registry.scope(f"k{i % 5}").execute(call_id=f"k{i}", name="slow",
                                                                           arguments={"n": i}) for i in range(20)])

    results = asyncio.run(calls())
    assert killer.join() is not None
    assert [r.text for r in results] == ["done"] * 20, {r.text for r in results if r.is_error}
    assert len(list(marks.iterdir())) == 20 and most_at_once(marks) <= 2
    assert registry.execute(call_id="later", name="slow", arguments={"n": 99}).result(60).text == "done"
    ray.kill(ray.get_actor(limiter_name(name), namespace="dsh-actors"))


@pytest.mark.own_registry
def test_a_call_that_times_out_waiting_for_a_slot_is_a_coded_timeout_not_a_denial(registry, tmp_path):
    from dsh_actors.policies import deadline_policy

    name = f"timeout-{os.getpid()}-{time.monotonic_ns()}"
    registry.register(slow_tool(tmp_path, sleep_s=4)).result(60)
    registry.on("tools/execute", deadline_policy(30)).result(60)
    registry.scope("waiter").on("tools/execute", fleet_limit({"slow": 1}, name=name)).result(60)
    registry.scope("holder").on("tools/execute", fleet_limit({"slow": 1}, name=name)).result(60)

    async def scenario():
        holding = asyncio.ensure_future(registry.scope("holder").execute(call_id="h", name="slow", arguments={}))
        await asyncio.sleep(1.0)
        from dsh_actors import AbortController
        from dsh_actors.core.signal import TimeoutReason

        controller = AbortController()
        waiting = asyncio.ensure_future(registry.scope("waiter").execute(call_id="w", name="slow", arguments={},
                                                                         signal=controller.signal))
        await asyncio.sleep(0.5)
        controller.abort(TimeoutReason("TOOL_TIMEOUT", 500))
        return await holding, await waiting

    held, waited = asyncio.run(scenario())
    assert held.text == "done"
    assert waited.error == {"name": "ToolTimeoutError", "code": "TOOL_TIMEOUT"}, waited
    ray.kill(ray.get_actor(limiter_name(name), namespace="dsh-actors"))
