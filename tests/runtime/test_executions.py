"""Executions as Ray tasks: policies (plain and in actors), failure mapping, concurrency."""

import asyncio
import os
import time

import pytest
import ray

from dsh_actors import AbortController, block, deny, text_block
from dsh_actors.runtime import actor_listener

from .fixtures import Policy, Recorder, echo, kill_and_wait, plain_policies, shares_one_host_registry, where_am_i

pytestmark = shares_one_host_registry

T = 60


def ex(target, call_id="c", name="echo", **args):
    return target.execute(call_id=call_id, name=name, arguments=args).result(T)


def wait_for(predicate, timeout=20.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    return predicate()


def install(registry, kind, recorder):
    """The scenario's policies, as plain callables or as methods of one policy actor."""
    if kind == "plain":
        p = plain_policies(recorder)
        listeners = p
    else:
        actor = Policy.remote(recorder)
        listeners = {m: actor_listener(actor, m) for m in ("gate", "redact", "stamp", "no_writes", "observe")}
    registry.on("tools/pre-execute", listeners["gate"]).result(T)
    registry.on("tools/execute", listeners["stamp"]).result(T)
    registry.on("tools/post-execute", listeners["redact"]).result(T)
    registry.guard(listeners["no_writes"]).result(T)
    registry.on("tools/result", listeners["observe"]).result(T)


@pytest.mark.parametrize("kind", ["plain", "actor"])
def test_the_same_scenario_gives_the_same_results_with_plain_and_actor_policies(registry, kind):
    for tool in ("echo", "secret", "write"):
        registry.register(echo(tool)).result(T)
    recorder = Recorder.remote()
    install(registry, kind, recorder)
    scope = registry.scope("agent")
    results = [
        ex(scope, "1", "echo", text="hello"),
        ex(scope, "2", "secret", text="x"),
        ex(scope, "3", "write", text="x"),
        ex(scope, "4", "echo", text="my password"),
        ex(scope, "5", "ghost"),
    ]
    assert [r.text for r in results] == [
        "hello [stamped]",
        "Error: secrets are off limits",
        "Error: writes are disabled",
        "output withheld: it contained a secret",
        'Error: unknown tool "ghost" [stamped]',
    ]
    assert [r.is_error for r in results] == [False, True, True, True, True]
    seen = wait_for(lambda: sorted(ray.get(recorder.all.remote(), timeout=T)) if len(ray.get(recorder.all.remote(), timeout=T)) == 5 else None)
    assert seen == [("1", False), ("2", True), ("3", True), ("4", True), ("5", True)]


def test_a_policy_actor_holds_state_shared_by_every_execution(registry):
    registry.register(echo()).result(T)
    policy = Policy.remote()
    registry.on("tools/pre-execute", actor_listener(policy, "gate")).result(T)
    for i in range(4):
        ex(registry.scope(f"agent-{i % 2}"), str(i))
    assert ray.get(policy.count.remote(), timeout=T) == 4


def test_continue_after_lets_a_policy_actor_see_and_replace_the_outcome(registry):
    registry.register(echo()).result(T)
    policy = Policy.remote()
    registry.on("tools/execute", actor_listener(policy, "stamp")).result(T)
    registry.on("tools/pre-execute", actor_listener(policy, "gate_around")).result(T)
    assert ex(registry, text="t").text == "t [stamped]"


def _body_marker(recorder):
    def body(args, ctx):
        recorder.add.remote("body ran")
        return [text_block("ran")]
    return body


@pytest.mark.parametrize("failure", ["dead", "hung", "raising"])
def test_a_failed_policy_actor_fails_closed_before_the_body_runs(registry, failure):
    recorder = Recorder.remote()
    registry.register(echo(execute=_body_marker(recorder))).result(T)
    policy = Policy.remote()
    ray.get(policy.count.remote(), timeout=T)  # up: the 1 s answer deadline must not count its start
    method = {"dead": "gate", "hung": "hang", "raising": "explode"}[failure]
    registry.on("tools/pre-execute", actor_listener(policy, method, timeout_s=1.0)).result(T)
    if failure == "dead":
        kill_and_wait(policy)
    result = ex(registry.scope("a1"))
    assert result.is_error
    if failure == "raising":
        assert result.text == "Error: policy exploded"
    else:
        assert result.error == {"name": "PolicyUnavailableError", "code": "POLICY_UNAVAILABLE"}
    assert ray.get(recorder.all.remote(), timeout=T) == []


def test_a_dead_policy_actor_guard_fails_closed(registry):
    registry.register(echo()).result(T)
    policy = Policy.remote()
    registry.guard(actor_listener(policy, "no_writes")).result(T)
    assert ex(registry, text="ok").text == "ok"
    kill_and_wait(policy)
    assert ex(registry).error["code"] == "POLICY_UNAVAILABLE"


@pytest.mark.own_registry  # it kills a part of its registry
def test_a_worker_crash_in_the_tool_body_is_one_error_result_and_observers_hear_it_once(registry):
    recorder = Recorder.remote()
    registry.register(echo("crash", execute=lambda a, c: os._exit(1))).result(T)
    registry.on("tools/result", actor_listener(Policy.remote(recorder), "observe")).result(T)
    result = ex(registry.scope("a1"), "boom", "crash")
    assert result.is_error and result.error == {"name": "WorkerCrashedError", "code": "WORKER_CRASHED"}
    assert result.text.startswith('Error: the worker running tool call "crash" (boom) died')
    assert "ray" not in result.text.lower().split("died")[0]
    assert wait_for(lambda: ray.get(recorder.all.remote(), timeout=T)) == [("boom", True)]
    time.sleep(0.5)
    assert ray.get(recorder.all.remote(), timeout=T) == [("boom", True)]


def test_cancelling_a_call_gives_one_cancelled_result(registry):
    def slow(args, ctx):
        time.sleep(30)
        return [text_block("too late")]

    registry.register(echo("slow", execute=slow)).result(T)
    response = registry.execute(call_id="s", name="slow", arguments={})

    async def scenario():
        task = asyncio.ensure_future(response)
        await asyncio.sleep(1.0)
        response.cancel()
        return await asyncio.wait_for(task, T)

    result = asyncio.run(scenario())
    assert result.error == {"name": "ExecutionCancelledError", "code": "CANCELLED"} and result.call_id == "s"


def test_a_callers_abort_reaches_the_tool_body_in_its_worker_with_the_reason(registry):
    async def cooperative(args, ctx):
        reason = await ctx.signal  # the signal aborts in this worker when the caller's does
        return [text_block(f"stopped in pid {os.getpid()}: {reason}")]

    registry.register(echo("slow", execute=cooperative)).result(T)
    controller = AbortController()

    async def scenario():
        call = asyncio.ensure_future(registry.execute(call_id="s", name="slow", arguments={},
                                                      signal=controller.signal))
        await asyncio.sleep(1.0)
        controller.abort("user pressed stop")
        start = time.monotonic()
        result = await asyncio.wait_for(call, T)
        return result, time.monotonic() - start

    result, waited = asyncio.run(scenario())
    assert not result.is_error and result.text.endswith(": user pressed stop")
    assert int(result.text.split()[3].rstrip(":")) != os.getpid() and waited < 5


def test_an_already_aborted_signal_reaches_the_tool_aborted(registry):
    registry.register(echo("check", execute=lambda a, ctx: [text_block(
        f"{ctx.signal.aborted} {ctx.signal.reason}")])).result(T)
    controller = AbortController()
    controller.abort("before the call")
    result = registry.execute(call_id="a", name="check", arguments={}, signal=controller.signal).result(T)
    assert result.text == "True before the call"


@pytest.mark.own_registry  # it kills a part of its registry
def test_a_force_stoppable_tool_that_ignores_its_deadline_is_stopped_for_real(registry):
    recorder = Recorder.remote()
    registry.register(echo("stubborn", timeout_ms=300, extras={"force_stop": True, "force_stop_grace_ms": 100},
                           execute=lambda a, c: time.sleep(60) or [])).result(T)
    registry.on("tools/result", actor_listener(Policy.remote(recorder), "observe")).result(T)
    start = time.monotonic()
    result = ex(registry.scope("a1"), "stuck", "stubborn")
    assert time.monotonic() - start < 10
    assert result.error == {"name": "ToolTimeoutError", "code": "TOOL_TIMEOUT"}
    assert result.text == "Error: tool call timed out after 300ms"
    assert wait_for(lambda: ray.get(recorder.all.remote(), timeout=T)) == [("stuck", True)]


def test_force_stop_needs_a_budget(registry):
    from dsh_actors import DefinitionError

    with pytest.raises(DefinitionError, match="force_stop without timeout_ms"):
        registry.register(echo("nobudget", extras={"force_stop": True})).result(T)


@pytest.mark.own_registry  # it kills a part of its registry
def test_a_force_stoppable_tool_that_ignores_its_callers_abort_is_killed_after_the_grace(registry):
    registry.register(echo("stubborn", timeout_ms=60_000, extras={"force_stop": True, "force_stop_grace_ms": 200},
                           execute=lambda a, c: time.sleep(60) or [])).result(T)
    controller = AbortController()

    async def scenario():
        call = asyncio.ensure_future(registry.execute(call_id="s", name="stubborn", arguments={},
                                                      signal=controller.signal))
        await asyncio.sleep(1.0)
        controller.abort("stop now")
        return await asyncio.wait_for(call, T)

    assert asyncio.run(scenario()).error["code"] == "CANCELLED"


def test_observer_failures_are_contained(registry):
    registry.register(echo()).result(T)
    registry.on("tools/result", lambda e, r: 1 / 0).result(T)
    registry.on("tools/result", actor_listener(Policy.remote(), "explode")).result(T)
    assert ex(registry, text="fine").text == "fine"


def test_the_skip_post_execute_table_holds_on_ray(registry):
    recorder = Recorder.remote()
    registry.register(echo()).result(T)
    registry.register(echo("raises", execute=lambda a, c: 1 / 0)).result(T)

    async def pre(e, call_next):
        if e.arguments.get("text") == "deny":
            return deny("denied")
        if e.arguments.get("text") == "pre-raise":
            raise RuntimeError("pre raised")
        if e.arguments.get("text") == "malformed":
            return {"kind": "nope"}
        return await call_next()

    def post(e, result, call_next):
        recorder.add.remote(e.call_id)
        return call_next()

    registry.on("tools/pre-execute", pre).result(T)
    registry.on("tools/post-execute", post).result(T)
    cases = {"deny": True, "pre-raise": False, "malformed": False, "ok": True}
    for text in cases:
        ex(registry, text, text=text)
    ex(registry, "body-raise", "raises")
    ex(registry, "unknown", "ghost")
    registry.execute(call_id="tuple-args", name="echo", arguments={"t": (1, 2)}).result(T)
    expected = [text for text, goes_through in cases.items() if goes_through] + ["body-raise", "unknown"]
    # The listener's adds are sent from the executor, unordered with this process's reads:
    # wait for them (the recorder may still be starting), then a moment for any extra one.
    wait_for(lambda: len(ray.get(recorder.all.remote(), timeout=T)) >= len(expected), timeout=T)
    time.sleep(0.5)
    through = sorted(ray.get(recorder.all.remote(), timeout=T))
    assert through == sorted(expected)  # tuple-args, pre-raise and malformed skipped it


def test_non_json_arguments_get_the_reference_error_on_ray(registry):
    registry.register(echo()).result(T)
    result = registry.execute(call_id="a", name="echo", arguments={"when": {1, 2}}).result(T)
    assert result.text == "Error: tool execution arguments must be losslessly JSON-serializable"
    assert result.error["code"] == "INVALID_INPUT"


def test_many_calls_from_many_agents_at_once_each_get_their_own_result(registry):
    registry.register(echo(execute=lambda a, c: [text_block(f"{c.agent}:{a['n']}")])).result(T)
    for i in range(4):
        registry.scope(f"agent-{i}").register(
            echo("whoami", execute=lambda a, c: [text_block(f"scoped {c.agent}")])).result(T)

    async def scenario():
        calls = [registry.scope(f"agent-{i % 4}").execute(call_id=f"c{i}", name="echo", arguments={"n": i})
                 for i in range(64)]
        calls += [registry.scope(f"agent-{i}").execute(call_id=f"w{i}", name="whoami", arguments={})
                  for i in range(4)]
        return await asyncio.gather(*calls)

    results = asyncio.run(scenario())
    assert [r.text for r in results[:64]] == [f"agent-{i % 4}:{i}" for i in range(64)]
    assert [r.call_id for r in results[:64]] == [f"c{i}" for i in range(64)]
    assert [r.text for r in results[64:]] == [f"scoped agent-{i}" for i in range(4)]


def test_a_change_during_an_in_flight_call_never_mixes_two_views(registry):
    gate, started = Recorder.remote(), Recorder.remote()

    async def slow(args, ctx):
        started.add.remote("body")
        deadline = time.monotonic() + 20
        while not await gate.all.remote() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return [text_block("old view")]

    registry.register(echo(execute=slow)).result(T)
    registry.on("tools/post-execute", lambda e, r, n: n()).result(T)

    async def scenario():
        call = asyncio.ensure_future(registry.execute(call_id="in-flight", name="echo", arguments={}))
        deadline = time.monotonic() + 60
        while not await started.all.remote() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)  # the call is in flight: its body is running
        await registry.on("tools/post-execute", lambda e, r, n: block("new view"))
        await registry.guard(lambda e: "guarded now")
        gate.add.remote("go")
        return await asyncio.wait_for(call, T)

    in_flight = asyncio.run(scenario())
    assert in_flight.text == "old view" and not in_flight.is_error
    assert ex(registry).text == "new view"


def test_after_a_change_returns_the_next_call_never_runs_the_old_plan(registry):
    registry.register(echo()).result(T)
    scope = registry.scope("a1")
    assert ex(scope, text="warm").text == "warm"  # the client now caches a plan
    other = registry.scope("a1")  # another client object; same agent
    other.restrict(deny=["echo"]).result(T)
    assert ex(scope).error["code"] == "UNKNOWN_TOOL"
    registry.guard(lambda e: "stop").result(T)
    assert ex(registry.scope("a2"), text="x").text == "Error: stop"


def test_a_tool_with_ray_options_runs_on_the_node_that_has_its_resources(registry, ray_cluster):
    registry.register(where_am_i("special", extras={"ray_options": {"resources": {"dsh_special": 1}, "num_cpus": 0}})).result(T)
    registry.register(where_am_i("anywhere")).result(T)
    special_node = ray_cluster["special_node"].node_id
    node, _ = ex(registry, "1", "special").text.split()
    assert node == special_node
    scope = registry.scope("gpu-agent")
    scope.register(where_am_i("special", extras={"ray_options": {"num_cpus": 0}})).result(T)
    assert ex(scope, "2", "anywhere").error is None


@pytest.mark.own_registry  # it kills a part of its registry
def test_a_scope_actor_that_died_is_replaced_and_the_next_call_is_served(registry):
    registry.register(echo()).result(T)
    scope = registry.scope("doomed")
    assert ex(scope, text="hi").text == "hi"
    handle = ray.get(registry._handle().ensure_scope.remote("doomed"), timeout=T)
    ray.kill(handle)
    registry.register(echo("bump")).result(T)  # a change makes the cached plan stale
    result = ex(scope, text="again")
    assert result.text == "again" and not result.is_error  # a successor scope, from the journal


def test_the_reference_policies_run_inside_execution_tasks(registry):
    from dsh_actors.policies import metrics_policy, retry_policy, timeout_policy

    attempts = Recorder.remote()

    async def flaky(args, ctx):
        await attempts.add.remote(1)
        if len(await attempts.all.remote()) < 2:
            raise RuntimeError("first attempt fails")
        return [text_block("second attempt")]

    registry.register(echo("flaky", execute=flaky, extras={"idempotent": True})).result(T)
    registry.register(echo("slow", timeout_ms=100, execute=lambda a, c: time.sleep(0.5) or [])).result(T)
    registry.on("tools/execute", metrics_policy()).result(T)  # Ray's metrics API, in the worker
    registry.on("tools/execute", timeout_policy).result(T)
    registry.on("tools/execute", retry_policy(3, backoff_s=0)).result(T)
    assert ex(registry, "1", "flaky").text == "second attempt"
    assert ex(registry, "2", "slow").error["code"] == "TOOL_TIMEOUT"


@pytest.mark.parametrize("home", ["in process", "in a policy actor"])
def test_one_listener_function_works_in_process_and_as_a_policy_actor_method(registry, home):
    from dsh_actors.runtime import actor_listener

    from .fixtures import SharedPolicy, gate_fn, redact_fn

    for tool in ("echo", "secret"):
        registry.register(echo(tool)).result(T)
    if home == "in process":
        gate, redact = gate_fn, redact_fn
    else:
        policy = SharedPolicy.remote()
        gate, redact = actor_listener(policy, "gate"), actor_listener(policy, "redact")
    registry.on("tools/pre-execute", gate).result(T)
    registry.on("tools/post-execute", redact).result(T)
    scope = registry.scope("agent")
    assert [ex(scope, "1", "echo", text="hello").text, ex(scope, "2", "secret", text="x").text,
            ex(scope, "3", "echo", text="my password").text] == [
        "hello", "Error: secrets are off limits", "output withheld: it contained a secret"]


@pytest.mark.own_registry  # its stuck bodies hold threads of its executor for seconds after it
def test_one_agents_plain_bodies_that_ignore_their_deadline_never_take_another_agents_threads(registry):
    """40 plain bodies of one agent that sleep through their 0.3 s deadline (each call ends
    TOOL_TIMEOUT; each thread stays taken until its body returns), then ten other agents'
    plain calls: all answered, none waits for a thread of the stuck agent's."""
    from dsh_actors.policies import deadline_policy

    registry.register(echo("stuck", timeout_ms=300, execute=lambda a, c: time.sleep(15) or [text_block("late")])).result(T)
    registry.register(echo("quick", timeout_ms=3000, execute=lambda a, c: [text_block("quick")])).result(T)
    registry.on("tools/execute", deadline_policy(3.0, grace_s=0.5)).result(T)  # as the batch job's: hard

    async def scenario():
        stuck = await asyncio.gather(*[registry.scope("hog").execute(call_id=f"s{i}", name="stuck", arguments={})
                                       for i in range(40)])  # each ended at its deadline; its body sleeps on
        quick = await asyncio.gather(*[registry.scope(f"agent-{i}").execute(call_id=f"q{i}", name="quick",
                                                                            arguments={}) for i in range(10)])
        return stuck, quick

    stuck, quick = asyncio.run(scenario())
    assert {r.error["code"] for r in stuck} == {"TOOL_TIMEOUT"}
    assert [r.text for r in quick] == ["quick"] * 10, [r.text for r in quick if r.is_error]
