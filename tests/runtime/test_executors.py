"""Executor actors: a call that waits holds no CPU, plain bodies never stall the loop, and a
dead executor costs one coded result and is replaced."""

import asyncio
import os
import signal
import time

import pytest
import ray

from dsh_actors import ask, define_tool, text_block
from dsh_actors.runtime import ToolRegistry

from .fixtures import Recorder, echo, hanging_registry, pid_of, shares_one_host_registry

pytestmark = shares_one_host_registry

T = 120


def executor_pids(registry):
    handles = ray.get(registry._handle().executors.remote(), timeout=T)
    return [pid_of(h, T) for h in handles]


def test_pending_asks_beyond_the_cluster_cpus_never_stall_another_agents_call(registry):
    """More unanswered asks than the cluster has CPUs: each is a coroutine, so a plain call
    from a third agent still completes (with a task per call it never did)."""
    cpus = int(ray.cluster_resources()["CPU"])
    registry.register(echo()).result(T)
    registry.register(echo("risky")).result(T)
    registry.on("tools/pre-execute", lambda e, n: ask("check") if e.name == "risky" else n()).result(T)
    queue = registry.approvals(policy="ask").result(T)
    asks = [registry.scope(f"asker-{i}").execute(call_id=f"a{i}", name="risky", arguments={}) for i in range(cpus + 3)]

    async def scenario():
        waiting = [asyncio.ensure_future(r) for r in asks]
        deadline = time.monotonic() + 60
        while len(await queue.pending()) < len(asks) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        pending = len(await queue.pending())
        plain = await asyncio.wait_for(registry.scope("third").execute(call_id="p", name="echo",
                                                                        arguments={"text": "through"}), T)
        for request in await queue.pending():
            await queue.reject(request["id"])
        return pending, plain, await asyncio.gather(*waiting)

    pending, plain, rejected = asyncio.run(scenario())
    assert pending == cpus + 3
    assert plain.text == "through" and not plain.is_error
    assert all(r.is_error for r in rejected) and len(rejected) == cpus + 3


def test_a_plain_body_runs_off_the_loop_so_other_calls_on_the_same_executor_go_on(ray_cluster):
    registry = ToolRegistry.connect(f"one-executor-{time.monotonic_ns()}", executors=1)
    try:
        registry.register(define_tool(name="blocking", description="sleeps 3 s in plain code", parameters={},
                                      execute=lambda a, c: (time.sleep(3), [text_block("slept")])[1])).result(T)

        async def quick(args, ctx):
            await asyncio.sleep(0.01)
            return [text_block("quick")]

        registry.register(define_tool(name="quick", description="async", parameters={}, execute=quick)).result(T)
        registry.execute(call_id="warm", name="quick", arguments={}).result(T)

        async def scenario():
            order = []

            async def run(name):
                result = await registry.execute(call_id=name, name=name, arguments={})
                order.append(result.text)

            slow = asyncio.ensure_future(run("blocking"))
            await asyncio.sleep(0.5)  # the plain body is sleeping in the executor's thread pool
            await run("quick")
            await slow
            return order

        assert asyncio.run(scenario()) == ["quick", "slept"]
        assert len(executor_pids(registry)) == 1  # both ran on the one executor
    finally:
        registry.shutdown()


@pytest.mark.own_registry  # it kills or ends a part of its registry, or counts its calls
@pytest.mark.two_executors
@pytest.mark.parametrize("kill", ["ray.kill", "SIGKILL"])
def test_an_executor_killed_mid_call_gives_one_coded_result_and_the_pool_heals(registry, kill):
    started, observed = hanging_registry(registry)

    async def scenario():
        call = asyncio.ensure_future(registry.execute(call_id="victim", name="hangs", arguments={}))
        deadline = time.monotonic() + 60
        while not await started.all.remote() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        pid = (await started.all.remote())[0]
        handles = await registry._handle().executors.remote()
        pids = [await h.__ray_call__.remote(lambda self: os.getpid()) for h in handles]
        victim = handles[pids.index(pid)]
        if kill == "ray.kill":
            ray.kill(victim)
        else:
            os.kill(pid, signal.SIGKILL)
        return await asyncio.wait_for(call, T)

    result = asyncio.run(scenario())
    assert result.is_error and result.error == {"name": "WorkerCrashedError", "code": "WORKER_CRASHED"}
    assert "died before it finished" in result.text
    after = [registry.execute(call_id=f"after-{i}", name="echo", arguments={"text": "ok"}).result(T) for i in range(4)]
    assert [r.text for r in after] == ["ok"] * 4  # every executor of the pool serves again
    deadline = time.monotonic() + 20
    while "victim" not in ray.get(observed.all.remote(), timeout=T) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ray.get(observed.all.remote(), timeout=T).count("victim") == 1  # observers heard it once


@pytest.mark.two_executors
def test_executors_hold_no_cpu_and_spread_over_the_nodes(registry, ray_cluster):
    handles = ray.get(registry._handle().executors.remote(), timeout=T)
    nodes = {ray.get(h.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()), timeout=T)
             for h in handles}
    assert len(handles) >= 2 and len(nodes) == 2  # the test cluster has two nodes
    deadline = time.monotonic() + 20  # the resource view lags actor starts a little
    while ray.available_resources().get("CPU") != ray.cluster_resources()["CPU"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ray.available_resources().get("CPU") == ray.cluster_resources()["CPU"]  # the pool reserves no CPU


def test_a_tool_needing_resources_no_node_has_fails_with_a_coded_result_in_bounded_time(registry):
    registry.register(echo("huge", extras={"ray_options": {"resources": {"dsh_absent": 1}},
                                           "placement_timeout_s": 2})).result(T)
    started = time.monotonic()
    result = registry.execute(call_id="h", name="huge", arguments={}).result(T)
    assert result.error == {"name": "PlacementError", "code": "PLACEMENT_FAILED"}
    assert "no node in the cluster has that much" in result.text and time.monotonic() - started < 60


def test_a_body_that_raises_its_own_cancelled_error_gives_a_cancelled_result(registry):
    async def cancels(args, ctx):
        inner = asyncio.ensure_future(asyncio.sleep(10))
        await asyncio.sleep(0)
        inner.cancel()
        await inner  # raises CancelledError into the body

    registry.register(define_tool(name="cancels", description="x", parameters={}, execute=cancels)).result(T)
    result = registry.execute(call_id="c", name="cancels", arguments={}).result(T)
    assert result.error == {"name": "ExecutionCancelledError", "code": "CANCELLED"}
    assert registry.execute(call_id="e", name="cancels", arguments={}).result(T).error["code"] == "CANCELLED"


def test_arguments_nested_past_the_limit_are_invalid_input_not_a_recursion_error(registry):
    registry.register(echo()).result(T)
    deep: dict = {}
    cursor = deep
    for _ in range(5000):
        cursor["a"] = {}
        cursor = cursor["a"]
    result = registry.execute(call_id="d", name="echo", arguments=deep).result(T)
    assert result.error == {"name": "InvalidExecutionInputError", "code": "INVALID_INPUT"}


@pytest.mark.own_registry  # it kills or ends a part of its registry, or counts its calls
@pytest.mark.parametrize("kill", ["ray.kill", "SIGKILL"])
def test_an_abort_still_reaches_the_body_after_the_signal_hub_is_killed(registry, kill):
    """The hub dies while a call waits on its signal: Ray restarts it (SIGKILL) or the
    registry starts a successor (ray.kill); the executor re-opens its wait, the client
    re-sends the abort, and the body sees it. Later calls abort as before."""
    from dsh_actors import AbortController

    started = Recorder.remote()

    async def waits(args, ctx):
        started.add.remote("waiting")
        reason = await ctx.signal
        return [text_block(f"stopped: {reason}")]

    registry.register(define_tool(name="waits", description="x", parameters={}, execute=waits)).result(T)
    hub = ray.get(registry._handle().signal_hub.remote(), timeout=T).handle

    async def aborted_call(call_id, kill_first):
        controller = AbortController()
        call = asyncio.ensure_future(registry.execute(call_id=call_id, name="waits", arguments={},
                                                      signal=controller.signal))
        deadline = time.monotonic() + 60
        while len(await started.all.remote()) < int(call_id) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if kill_first:
            if kill == "ray.kill":
                ray.kill(hub)
            else:
                os.kill(await hub.__ray_call__.remote(lambda self: os.getpid()), signal.SIGKILL)
            await asyncio.sleep(0.5)
        controller.abort(f"user pressed stop {call_id}")
        return await asyncio.wait_for(call, T)

    async def scenario():
        return await aborted_call("1", True), await aborted_call("2", False)

    during, after = asyncio.run(scenario())
    assert during.text == "stopped: user pressed stop 1" and not during.is_error
    assert after.text == "stopped: user pressed stop 2" and not after.is_error


@pytest.mark.parametrize("kill", ["ray.kill", "SIGKILL"])
def test_a_killed_registry_gives_coded_results_and_a_reconnect_serves_old_clients_again(ray_cluster, kill):
    name = f"phoenix-{kill}-{time.monotonic_ns()}"
    old = ToolRegistry.connect(name)
    old.register(echo()).result(T)
    assert old.execute(call_id="1", name="echo", arguments={"text": "before"}).result(T).text == "before"
    handle = old._handle()
    if kill == "ray.kill":
        ray.kill(handle)
    else:
        os.kill(pid_of(handle, T), signal.SIGKILL)
    codes = set()
    deadline = time.monotonic() + 60
    while "REGISTRY_UNAVAILABLE" not in codes and time.monotonic() < deadline:
        result = old.execute(call_id="2", name="echo", arguments={"text": "x"}).result(T)
        # One coded result per call, never a raw error (a call made the moment the registry
        # died may still run on an executor that has not died with it yet).
        assert not result.is_error or result.error is not None
        if result.is_error:
            codes.add(result.error["code"])
        time.sleep(0.2)
    assert "REGISTRY_UNAVAILABLE" in codes and codes <= {"REGISTRY_UNAVAILABLE", "WORKER_CRASHED"}, codes
    fresh = ToolRegistry.connect(name)  # no raw ActorDiedError: a fresh registry
    try:
        fresh.register(echo()).result(T)  # its owners register again: the state was not durable
        again = old.execute(call_id="3", name="echo", arguments={"text": "after"}).result(T)
        assert again.text == "after" and not again.is_error  # the old client re-resolved the name
    finally:
        fresh.shutdown()


@pytest.mark.own_registry  # it kills or ends a part of its registry, or counts its calls
@pytest.mark.parametrize("kill", ["ray.kill", "SIGKILL"])
def test_a_killed_scope_actor_comes_back_from_the_journal_with_every_restriction(registry, kill):
    """The agent must never come back with more than it had: its restriction, shadow and
    guard survive the kill, and a disposer taken before it still disposes after it."""
    registry.register(echo()).result(T)
    registry.register(echo("rm")).result(T)
    scope = registry.scope("fragile")
    scope.restrict(deny=["rm"]).result(T)
    scope.register(echo("echo", execute=lambda a, c: [text_block("shadowed")])).result(T)
    unguard = scope.guard(lambda e: "no secrets" if e.arguments.get("text") == "secret" else None).result(T)
    assert scope.execute(call_id="1", name="echo", arguments={"text": "x"}).result(T).text == "shadowed"
    handle = asyncio.run(registry._scope_handle("fragile"))
    if kill == "ray.kill":
        ray.kill(handle)
    else:
        os.kill(pid_of(handle, T), signal.SIGKILL)
    time.sleep(0.5)
    results = [scope.execute(call_id=f"a{i}", name="rm", arguments={}).result(T) for i in range(2)]
    assert all(r.is_error for r in results)  # never ran: no call after the kill sees rm
    assert results[-1].error["code"] == "UNKNOWN_TOOL"  # the restriction came back from the journal
    assert scope.execute(call_id="b", name="echo", arguments={"text": "x"}).result(T).text == "shadowed"
    assert scope.execute(call_id="c", name="echo", arguments={"text": "secret"}).result(T).text == \
        "Error: no secrets"
    unguard().result(T)  # a disposer from before the kill disposes the replayed guard
    assert scope.execute(call_id="d", name="echo", arguments={"text": "secret"}).result(T).text == "shadowed"
    assert sorted(d.name for d in scope.visible().result(T)) == ["echo"]


@pytest.mark.own_registry  # it kills or ends a part of its registry, or counts its calls
@pytest.mark.parametrize("kill", ["ray.kill", "SIGKILL"])
def test_a_killed_approval_queue_is_mounted_again_and_asks_wait_on_the_new_one(registry, kill):
    registry.register(echo("risky")).result(T)
    registry.on("tools/pre-execute", lambda e, n: ask("check")).result(T)
    queue = registry.approvals(policy="ask").result(T)
    handle = queue._handle()
    if kill == "ray.kill":
        ray.kill(handle)
    else:
        os.kill(pid_of(handle, T), signal.SIGKILL)
    time.sleep(0.5)
    fresh = registry.approvals().result(T)  # no error: a new queue is mounted

    async def scenario():
        call = asyncio.ensure_future(registry.scope("a1").execute(call_id="r", name="risky", arguments={}))
        deadline = time.monotonic() + 60
        while not (pending := await fresh.pending()) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await fresh.allow(pending[0]["id"])
        return await asyncio.wait_for(call, T)

    assert asyncio.run(scenario()).text == ""


def test_a_sigkilled_session_log_is_opened_again_over_its_durable_file(ray_cluster, tmp_path):
    from dsh_actors.runtime.session.client import SessionLog

    path = str(tmp_path / "s.log")
    log = SessionLog.open("revive-me", path)
    log.append({"type": "user/message", "content": "kept"}).result(T)
    os.kill(pid_of(log._writer, T), signal.SIGKILL)
    time.sleep(0.5)
    again = SessionLog.open("revive-me", path)  # not the dead actor: a new one over the same file
    assert [e.get("content") for e in again.events().result(T)] == ["kept"]
    again.append({"type": "user/message", "content": "more"}).result(T)
    assert len(again.events().result(T)) == 2
    again.close().result(T)


@pytest.mark.own_registry  # it kills or ends a part of its registry, or counts its calls
def test_an_executor_is_sent_a_plan_once_not_on_every_call(registry, monkeypatch):
    """The plan's ref goes to the executor that asked for it; later calls find it cached
    (a regression: the ref once went to the next executor in turn, so every call paid
    two round trips)."""
    from collections import Counter

    from dsh_actors.runtime.caller import calls

    kinds = Counter()
    real = calls.Outcome.read

    def read(cls, raw):
        outcome = real(raw)
        kinds[outcome.kind] += 1
        return outcome

    monkeypatch.setattr(calls.Outcome, "read", classmethod(read))
    registry.register(echo()).result(T)
    scope = registry.scope("steady")
    for i in range(40):
        assert scope.execute(call_id=str(i), name="echo", arguments={"text": "x"}).result(T).text == "x"
    executors = len(ray.get(registry._handle().executors.remote(), timeout=T))
    assert kinds["result"] == 40 and kinds["need_plan"] <= executors, kinds
