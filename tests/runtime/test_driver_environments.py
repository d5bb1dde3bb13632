"""A Python driver's agents in episode environments: ``agent_environment`` around the calls
of an agent whose registry was built with ``AgentEnvironments`` — what the batch job does for
its episodes, from a plain driver. Asserted from outside: files on the host, the process table."""

import asyncio
import os
import time
import uuid
from pathlib import Path

import pytest

from dsh_actors.envs import EnvSpec
from dsh_actors.runtime import AgentEnvironments, ToolRegistry, agent_environment
from dsh_actors.tools import reference_tools
from dsh_actors.tools.workspace import AgentWorkspaces

from ..envs.host import processes_with

pytestmark = pytest.mark.timeout(180)


def test_a_driver_runs_its_agents_calls_in_an_environment_that_ends_with_its_block(ray_cluster, tmp_path):
    root = tmp_path / "workspaces"
    for agent in ("a1", "a2"):
        (root / agent).mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    marker = f"dsh-driver-env-{uuid.uuid4().hex[:8]}"
    # The default pool: an executor on every node, so one on the driver's (where its environments are).
    registry = ToolRegistry.connect(f"driver-env-{os.getpid()}-{time.monotonic_ns()}")
    for definition in reference_tools(AgentEnvironments(AgentWorkspaces(root))):
        registry.register(definition).result(timeout_s=60)
    a1, a2 = registry.scope("a1"), registry.scope("a2")

    def bash(scope, command, call_id):
        return scope.execute(call_id=call_id, name="bash", arguments={"command": command})

    async def episode():
        async with agent_environment(registry, "a1", EnvSpec(workspace=str(root / "a1"))) as env_id:
            inside = await bash(a1, f"id -u; echo hi > inside.txt; echo x > {outside} 2>/dev/null; "
                                    f"(setsid bash -c 'exec -a {marker} sleep 300' &); echo started", "c1")
            alive = processes_with(marker.encode())  # from outside, while the environment holds it
            stranger = await bash(a2, "echo no environment", "c2")  # a2's environment was never started
        after = await bash(a1, "echo too late", "c3")
        return env_id, inside, alive, stranger, after

    try:
        env_id, inside, alive, stranger, after = asyncio.run(episode())
        assert not inside.is_error and "started" in inside.text, inside.text
        assert inside.text.split()[0] != "0"  # an unprivileged user inside
        assert (root / "a1" / "inside.txt").read_text() == "hi\n" and not outside.exists()
        assert alive, "the detached sleeper should have been running inside the environment"
        deadline = time.monotonic() + 10
        while processes_with(marker.encode()) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes_with(marker.encode()) == []  # gone with the block, `setsid` and all
        assert stranger.is_error and stranger.error["code"] == "ENV_GONE", stranger
        assert after.is_error and after.error["code"] == "ENV_GONE", after
        assert env_id
    finally:
        registry.shutdown()


@pytest.mark.parametrize("death", ["ray.kill", "SIGKILL"])
def test_an_environment_ends_when_the_actor_that_started_it_dies(ray_cluster, tmp_path, death):
    """Whatever actor started it (here one with no methods but its own, as an episode runner
    is): the node's host sees it gone and ends its environment, every process in it."""
    import ray

    from dsh_actors.runtime.envhost import start_environment

    marker = f"dsh-starter-{uuid.uuid4().hex[:8]}"
    (tmp_path / "ws").mkdir()

    @ray.remote(num_cpus=0, max_restarts=0)
    class Starter:
        async def start(self, workspace, command):
            import types

            await start_environment(f"starter-{marker}", EnvSpec(workspace=workspace))
            places = AgentEnvironments(AgentWorkspaces(Path(workspace).parent))
            done = await places.run(types.SimpleNamespace(agent=f"starter-{marker}"), command, timeout_s=20)
            return os.getpid(), done.exit_code

    starter = Starter.remote()
    pid, code = ray.get(starter.start.remote(str(tmp_path / "ws"), f"(setsid bash -c 'exec -a {marker} sleep 300' &)"),
                        timeout=60)
    deadline = time.monotonic() + 10  # (its birth may still be on its way on a loaded machine)
    while not processes_with(marker.encode()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert code == 0 and processes_with(marker.encode()), "the sleeper should run in the environment"
    if death == "ray.kill":
        ray.kill(starter, no_restart=True)
    else:
        os.kill(pid, 9)
    deadline = time.monotonic() + 20  # the host checks every 2 s
    while processes_with(marker.encode()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_with(marker.encode()) == [], "the environment of a dead starter is still running"


@pytest.mark.parametrize("death", ["ray.kill", "SIGKILL"])
def test_a_killed_environment_host_takes_its_environments_and_the_next_one_starts_on_a_new_host(ray_cluster, tmp_path,
                                                                                              death):
    """The node's host killed while it holds an environment: every process in it ends; the
    agent's next call answers ENV_GONE; the next environment starts (on a host made again for
    good, or the one Ray restarted) and runs commands."""
    import ray
    from dsh_actors.runtime.local import this_node
    from dsh_actors.runtime.wire import DEFAULT_NAMESPACE, env_host_name

    root = tmp_path / "workspaces"
    (root / "a1").mkdir(parents=True)
    marker = f"dsh-host-{uuid.uuid4().hex[:8]}"
    registry = ToolRegistry.connect(f"host-kill-{os.getpid()}-{time.monotonic_ns()}")
    for definition in reference_tools(AgentEnvironments(AgentWorkspaces(root))):
        registry.register(definition).result(timeout_s=60)
    a1 = registry.scope("a1")
    spec = EnvSpec(workspace=str(root / "a1"))

    def bash(command, call_id):
        return a1.execute(call_id=call_id, name="bash", arguments={"command": command})

    async def first():
        async with agent_environment(registry, "a1", spec):
            started = await bash(f"(setsid bash -c 'exec -a {marker} sleep 300' &); echo started", "c1")
            host = ray.get_actor(env_host_name(this_node()), namespace=DEFAULT_NAMESPACE)
            deadline = time.monotonic() + 10
            while not processes_with(marker.encode()) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert processes_with(marker.encode()), "the sleeper should run in the environment"
            if death == "ray.kill":
                ray.kill(host, no_restart=True)
            else:
                os.kill(ray.get(host.__ray_call__.remote(lambda self: os.getpid()), timeout=30), 9)
            deadline = time.monotonic() + 20
            while processes_with(marker.encode()) and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            left = processes_with(marker.encode())
            lost = await bash("echo still here", "c2")
        return started, left, lost

    async def second():
        async with agent_environment(registry, "a1", spec):
            return await bash("echo again", "c3")

    try:
        started, left, lost = asyncio.run(first())
        assert not started.is_error and "started" in started.text
        assert left == [], "an environment outlived its host"
        assert lost.is_error and (lost.error or {}).get("code") == "ENV_GONE", (lost.text, lost.error)
        again = asyncio.run(second())
        assert not again.is_error and again.text.strip().endswith("again"), again.text
    finally:
        registry.shutdown()



def test_an_environment_on_a_node_that_is_gone_answers_env_gone(ray_cluster):
    """A process that used an environment on another node, when that node is gone (its host
    can be made nowhere): each request fails ``ENV_GONE``, never Ray's scheduling error."""
    from dsh_actors.envs.contract import EnvironmentGoneError
    from dsh_actors.runtime.envhost import HostedEnvironment

    gone = HostedEnvironment("ab" * 28, "env-nowhere")  # a node id no node of the cluster has

    async def ask():
        with pytest.raises(EnvironmentGoneError) as failed:
            await asyncio.wait_for(gone.run("true", timeout_s=5), 60)
        return failed.value

    error = asyncio.run(ask())
    assert error.code == "ENV_GONE" and "is gone" in str(error)
