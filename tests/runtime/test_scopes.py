"""Registry and agent scopes on Ray: registration, shadowing, restrictions, guards, views.

Where the hosting changes the path (a scope's actor made, found, released), a scenario runs
under both scope hostings (an actor per agent, and agents sharing host actors); the rest run
under shared hosting (the batch job's), since every other Ray test file drives dedicated
hosting (the default) and both hostings serve a scope with the same host code."""

import asyncio
import time

import pytest
import ray

from dsh_actors import DefinitionError
from dsh_actors.runtime import Disposer, Response

from .fixtures import echo, pid_of, registry_for

pytestmark = pytest.mark.shares_registry

T = 60

_counter = iter(range(10**6))


@pytest.fixture
def registry(ray_cluster, request):
    yield from registry_for(request, scope_hosting=getattr(request, "param", "shared"))


both_hostings = pytest.mark.parametrize("registry", ["dedicated", "shared"], indirect=True)


def names(definitions):
    return [d.name for d in definitions]


def ex(target, call_id="c", name="echo", **args):
    return target.execute(call_id=call_id, name=name, arguments=args).result(T)


def test_a_registration_answers_a_disposer_and_ray_options_misuse_fails_at_registration(registry):
    """(What both registries share is the behaviour table's, tests/behaviours.py.)"""
    assert isinstance(registry.register(echo()).result(T), Disposer)
    with pytest.raises(DefinitionError, match="max_retries without"):
        registry.register(echo("risky", extras={"ray_options": {"max_retries": 2}})).result(T)


@both_hostings
def test_closing_a_scope_disposes_its_tools_restrictions_guards_and_listeners(registry):
    registry.register(echo()).result(T)
    scope = registry.scope("a1")
    scope.register(echo(execute=lambda a, c: [{"type": "text", "text": "shadow"}])).result(T)
    scope.restrict(deny=["echo"]).result(T)
    scope.guard(lambda e: "no").result(T)
    scope.on("tools/pre-execute", lambda e, n: {"kind": "deny", "reason": "listener"}).result(T)
    assert ex(scope).text == "Error: listener"
    handle = asyncio.run(registry._scope_handle("a1"))
    assert ray.get(handle.agents.remote(), timeout=T) == ["a1"]
    assert ray.get(registry._handle().scopes.remote(), timeout=T) == ["a1"]  # the registry's list of live scopes
    scope.close().result(T)
    assert ray.get(registry._handle().scopes.remote(), timeout=T) == []
    # The closed scope is released (its own actor, or its place in a shared host) and the
    # id serves a new, empty scope.
    if ray.get(registry._handle().config.remote(), timeout=T)["scope_hosting"] == "dedicated":
        with pytest.raises(ray.exceptions.RayActorError):
            ray.get(handle.ping.remote(), timeout=T)
    else:
        assert ray.get(handle.agents.remote(), timeout=T) == []
    assert ex(scope, text="plain").text == "plain"
    scope.register(echo("again")).result(T)
    assert names(scope.visible().result(T)) == ["echo", "again"]


def test_scoped_and_global_listeners_run_in_one_registration_order(registry):
    """Prepends before appends (the latest prepend first), appends in registration order —
    across the registry and the scope actor, as in one process; other agents hear only
    the global listeners."""
    from .fixtures import Recorder

    heard = Recorder.remote()
    registry.register(echo()).result(T)

    def listener(tag):
        def hear(e, n):
            heard.add.remote(f"{e.agent}:{tag}")
            return n()
        return hear

    scope = registry.scope("ordered")
    registry.on("tools/pre-execute", listener("global-1")).result(T)
    scope.on("tools/pre-execute", listener("scoped-2")).result(T)
    registry.on("tools/pre-execute", listener("global-3"), prepend=True).result(T)
    scope.on("tools/pre-execute", listener("scoped-4"), prepend=True).result(T)
    registry.on("tools/pre-execute", listener("global-5")).result(T)
    ex(scope, call_id="1", text="x")
    ex(registry.scope("other"), call_id="2", text="x")
    expected = ["ordered:scoped-4", "ordered:global-3", "ordered:global-1", "ordered:scoped-2", "ordered:global-5",
                "other:global-3", "other:global-1", "other:global-5"]
    deadline = time.monotonic() + T
    while len(ray.get(heard.all.remote(), timeout=T)) < len(expected) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ray.get(heard.all.remote(), timeout=T) == expected


def test_a_change_listener_runs_in_the_registry_and_can_refuse_a_registration(registry):
    def refuse_bad_names():
        import ray as _ray
        names_now = _ray.get_runtime_context().get_actor_name()
        assert names_now  # runs inside the registry actor
    registry.on_change(refuse_bad_names).result(T)
    registry.register(echo()).result(T)

    def refuse():
        raise RuntimeError("changes are frozen")
    registry.on_change(refuse).result(T)
    with pytest.raises(RuntimeError, match="changes are frozen"):
        registry.register(echo("other")).result(T)
    assert names(registry.visible().result(T)) == ["echo"]


def test_responses_can_be_awaited_and_refuse_to_block_inside_an_event_loop(registry):
    async def scenario():
        dispose = await registry.register(echo())
        result = await registry.scope("async-agent").execute(call_id="x", name="echo", arguments={"text": "a"})
        with pytest.raises(RuntimeError, match="use `await response`"):
            registry.visible().result(T)
        await dispose()
        return result

    assert asyncio.run(scenario()).text == "a"
    assert Response.of(3).result() == 3


@ray.remote(num_cpus=0)
class Agent:
    """An actor that receives clients by pickling and uses them (async)."""

    async def run(self, registry, scope):
        await registry.register(echo("from-actor"))
        result = await scope.execute(call_id="in-actor", name="from-actor", arguments={"text": "hello"})
        return result.text, [d.name for d in await scope.visible()]


@both_hostings
@pytest.mark.own_registry  # the actor's client registers under no owner of the test's
def test_clients_pickle_and_work_inside_another_actor(registry):
    text, visible = ray.get(Agent.remote().run.remote(registry, registry.scope("remote-agent")), timeout=T)
    assert text == "hello" and visible == ["from-actor"]


def test_result_with_a_timeout_raises_timeout_error_and_the_call_can_still_be_awaited(registry):
    import time as _time

    registry.register(echo("slow", execute=lambda a, c: _time.sleep(2) or [{"type": "text", "text": "done"}])).result(T)
    response = registry.execute(call_id="s", name="slow", arguments={})
    with pytest.raises(TimeoutError, match="may still be running"):
        response.result(timeout_s=0.2)
    assert response.result(T).text == "done"


@pytest.mark.parametrize("kill", ["ray.kill", "SIGKILL"])
def test_a_killed_shared_host_brings_every_agent_on_it_back_from_the_journals(ray_cluster, kill):
    import os
    import signal

    from dsh_actors.runtime import ToolRegistry

    registry = ToolRegistry.connect(f"shared-kill-{next(_counter)}", scope_hosting="shared", scope_hosts=1)
    try:
        for tool in ("echo", "rm"):
            registry.register(echo(tool)).result(T)
        careful, shadowed, closed = registry.scope("careful"), registry.scope("shadowed"), registry.scope("closed")
        careful.restrict(deny=["rm"]).result(T)
        shadowed.register(echo("echo", execute=lambda a, c: [{"type": "text", "text": "shadow"}])).result(T)
        closed.restrict(allow=["echo"]).result(T)
        closed.close().result(T)
        handle = asyncio.run(registry._scope_handle("careful"))
        assert handle._actor_id == asyncio.run(registry._scope_handle("shadowed"))._actor_id  # one host
        if kill == "ray.kill":
            ray.kill(handle)
        else:
            os.kill(pid_of(handle, T), signal.SIGKILL)
        time.sleep(0.5)
        first = ex(careful, "a1", "rm")  # may fail while the host is found dead; never runs rm
        assert first.is_error
        assert ex(careful, "a2", "rm").error["code"] == "UNKNOWN_TOOL"
        assert ex(shadowed, "b", text="x").text == "shadow"
        assert names(closed.visible().result(T)) == ["echo", "rm"]  # a closed scope stays closed: new and empty
        fresh = asyncio.run(registry._scope_handle("careful"))
        assert fresh._actor_id != handle._actor_id
        # the closed scope's journal is not brought back, and reading it made nothing there
        assert sorted(ray.get(fresh.agents.remote(), timeout=T)) == ["careful", "shadowed"]
    finally:
        registry.shutdown()


def test_shared_hosting_spreads_agents_over_its_hosts_and_a_mismatched_connect_is_refused(ray_cluster):
    from dsh_actors.runtime import ToolRegistry

    name = f"shared-spread-{next(_counter)}"
    registry = ToolRegistry.connect(name, scope_hosting="shared", scope_hosts=3)
    try:
        registry.register(echo()).result(T)
        for i in range(30):  # a scope exists on a host once it changes something
            scope = registry.scope(f"agent-{i}")
            scope.register(echo(f"own-{i}")).result(T)
            assert ex(scope, f"c{i}", text=str(i)).text == str(i)
        hosts = ray.get(registry._handle().scope_hosts.remote(), timeout=T)
        per_host = [len(ray.get(h.agents.remote(), timeout=T)) for h in hosts]
        assert len(hosts) == 3 and sum(per_host) == 30 and min(per_host) >= 3
        assert sorted(ray.get(registry._handle().scopes.remote(), timeout=T)) == sorted(f"agent-{i}" for i in range(30))
        with pytest.raises(DefinitionError, match='hosts its scopes "shared", not "dedicated"'):
            ToolRegistry.connect(name)
    finally:
        registry.shutdown()


@pytest.mark.own_registry  # it kills or ends a part of its registry, or counts its calls
def test_a_scope_that_changes_nothing_exists_nowhere_and_closes_without_asking_the_registry(registry):
    import os
    import signal

    registry.register(echo()).result(T)
    quiet = registry.scope("quiet")
    assert ex(quiet, "q1", text="hi").text == "hi"
    assert "echo" in names(quiet.visible().result(T)) and "echo" in quiet.known_names().result(T)
    hosts = ray.get(registry._handle().scope_hosts.remote(), timeout=T)
    assert not any("quiet" in ray.get(h.agents.remote(), timeout=T) for h in hosts)  # calls and views make none
    plans = registry._owner_state.plans
    deadline = time.monotonic() + T
    while not (plans.cached("quiet") and plans.current(plans.cached("quiet"))) and time.monotonic() < deadline:
        ex(quiet, "q2", text="again")  # until this process's version lease vouches for its plan
    pid = pid_of(registry._handle(), T)
    os.kill(pid, signal.SIGSTOP)  # the registry answers nothing now
    try:
        # what a prompt reads is read from the plan this process holds: no actor is asked
        assert quiet.known_names().result(1.0) == ["echo"] and names(quiet.visible().result(1.0)) == ["echo"]
        quiet.close().result(1.0)  # nothing to close: no registry call (it would wait for the registry)
    finally:
        os.kill(pid, signal.SIGCONT)
    again = registry.scope("quiet")  # the id serves a scope again, and one that changed is closed for real
    again.register(echo("own")).result(T)
    assert "own" in names(again.visible().result(T))
    assert any("quiet" in ray.get(h.agents.remote(), timeout=T) for h in hosts)
    again.close().result(T)
    assert "own" not in names(registry.scope("quiet").visible().result(T))
    assert not any("quiet" in ray.get(h.agents.remote(), timeout=T) for h in hosts)


@pytest.mark.own_registry  # it kills or ends a part of its registry, or counts its calls
def test_a_new_agent_that_changes_nothing_asks_no_host_and_one_another_process_restricted_is_asked(registry):
    """The version subscription says which agents have a scope of their own: any other
    agent's plan is the base plan this process already holds, so a fleet's new agents cost
    their hosts nothing — while an agent restricted elsewhere is never run with it."""
    import os
    import signal

    registry.register(echo()).result(T)
    assert ex(registry.scope("warm"), "w", text="hi").text == "hi"
    subscription = registry._owner_state.plans.subscription
    deadline = time.monotonic() + T
    while not (registry._link.shares_hosts and subscription.vouched() is not None
               and subscription.quiet("fresh", subscription.vouched())) and time.monotonic() < deadline:
        ex(registry.scope("warm"), "w", text="again")
    assert ray.get(registry._handle().scope_host_nodes.remote(), timeout=T) == []  # no host was made for it
    hosts = ray.get(registry._handle().scope_hosts.remote(), timeout=T)  # made now
    pids = [pid_of(h, T) for h in hosts]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)  # no host answers now
    try:
        fresh = registry.scope("fresh")
        assert fresh.execute(call_id="f1", name="echo", arguments={"text": "mine"}).result(5).text == "mine"
        assert names(fresh.visible().result(5)) == ["echo"]
        fresh.close().result(5)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)

    @ray.remote(num_cpus=0)
    def restrict_elsewhere(name):
        from dsh_actors.runtime import ToolRegistry
        ToolRegistry.connect(name, scope_hosting="shared").scope("watched").restrict(deny=["echo"]).result(T)

    ray.get(restrict_elsewhere.remote(registry.name), timeout=T)
    assert ex(registry.scope("watched"), "x1").error["code"] == "UNKNOWN_TOOL"
    assert any("watched" in ray.get(h.agents.remote(), timeout=T) for h in hosts)
