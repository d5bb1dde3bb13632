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
