"""Plugin handles: disposed together, explicitly or when the owning driver dies."""

import subprocess
import sys
import textwrap
import time

import pytest
import ray

from dsh_actors import CONTINUE

from .fixtures import echo, pid_of, process_alive, shares_one_host_registry, wait_gone

pytestmark = shares_one_host_registry

T = 60

DRIVER = textwrap.dedent("""
    import sys
    import ray
    from dsh_actors import define_tool
    from dsh_actors.runtime import ToolRegistry

    ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
    registry = ToolRegistry.connect(sys.argv[2])
    tool = lambda name: define_tool(name=name, description=name, parameters={}, execute=lambda a, c: [])
    plugin = registry.plugin("short-lived")
    plugin.register(tool("from-plugin")).result(60)
    plugin.on("tools/pre-execute", lambda e, n: n()).result(60)
    registry.register(tool("direct")).result(60)
    print("registered", flush=True)
""")


def names(registry):
    return [d.name for d in registry.visible().result(T)]


def test_a_plugin_disposes_all_its_registrations_together(registry):
    plugin = registry.plugin("fs")
    plugin.register(echo("read")).result(T)
    plugin.register(echo("write")).result(T)
    registry.register(echo("kept")).result(T)
    assert names(registry) == ["read", "write", "kept"]
    assert plugin.dispose().result(T) == 2
    assert names(registry) == ["kept"]


@pytest.mark.own_registry  # it kills or ends a part of its registry, or counts its calls
def test_a_plugins_registrations_go_away_when_the_driver_that_made_it_dies(registry, ray_cluster):
    out = subprocess.run(
        [sys.executable, "-c", DRIVER, ray_cluster["cluster"].address, registry.name],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "registered" in out.stdout
    deadline = time.monotonic() + 30
    while "from-plugin" in names(registry) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert names(registry) == ["direct"]
    chains = registry._handle()
    import ray
    _, plan, _ = ray.get(chains.base_plan.remote(), timeout=T)
    assert plan.pre_execute == ()


DETACHED = textwrap.dedent("""
    import sys
    import ray
    from dsh_actors import define_tool
    from dsh_actors.runtime import ToolRegistry

    ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
    registry = ToolRegistry.connect(sys.argv[2], detached=True)
    registry.register(define_tool(name="long-lived", description="d", parameters={},
                                  execute=lambda a, c: [{"type": "text", "text": "still here"}])).result(60)
    print("registered", flush=True)
""")


def test_a_detached_registry_outlives_the_driver_that_created_it(ray_cluster):
    from dsh_actors.runtime import ToolRegistry

    name = f"detached-{time.monotonic_ns()}"
    out = subprocess.run([sys.executable, "-c", DETACHED, ray_cluster["cluster"].address, name],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    registry = ToolRegistry.connect(name)
    try:
        result = registry.execute(call_id="1", name="long-lived", arguments={}).result(T)
        assert result.text == "still here"
    finally:
        registry.shutdown()


@ray.remote(num_cpus=0)
class _Gate:
    def gate(self, execution):
        return CONTINUE


def test_a_policy_actor_given_only_to_a_registry_ends_when_the_registry_is_shut_down(ray_cluster):
    """The driver's handle on a policy actor goes into a listener and is dropped; the call
    that ran through it made this process fetch a plan naming it. Shutting the registry
    down here drops that too, so the actor's process ends with the registry (it lived as
    long as the driver: one such set per registry a long-lived driver ever made)."""
    from dsh_actors.runtime import ToolRegistry, actor_listener

    registry = ToolRegistry.connect(f"ends-{time.monotonic_ns()}", executors=1)
    registry.register(echo()).result(T)
    gate = _Gate.remote()
    pid = pid_of(gate)
    registry.on("tools/pre-execute", actor_listener(gate, "gate")).result(T)
    del gate
    assert not registry.scope("agent").execute(call_id="1", name="echo", arguments={"text": "x"}).result(T).is_error
    assert process_alive(pid)  # the registry holds it
    registry.shutdown()
    wait_gone([pid], T)  # else the policy actor outlived its registry
