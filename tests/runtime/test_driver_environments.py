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

pytestmark = pytest.mark.timeout(180)


def _processes_named(marker: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if marker.encode() in Path(entry.path, "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def test_a_driver_runs_its_agents_calls_in_an_environment_that_ends_with_its_block(ray_cluster, tmp_path):
    root = tmp_path / "workspaces"
    for agent in ("a1", "a2"):
        (root / agent).mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    marker = f"dsh-driver-env-{uuid.uuid4().hex[:8]}"
    registry = ToolRegistry.connect(f"driver-env-{os.getpid()}-{time.monotonic_ns()}", executors=1)
    for definition in reference_tools(AgentEnvironments(AgentWorkspaces(root))):
        registry.register(definition).result(timeout_s=60)
    a1, a2 = registry.scope("a1"), registry.scope("a2")

    def bash(scope, command, call_id):
        return scope.execute(call_id=call_id, name="bash", arguments={"command": command})

    async def episode():
        async with agent_environment(registry, "a1", EnvSpec(workspace=str(root / "a1"))) as env_id:
            inside = await bash(a1, f"id -u; echo hi > inside.txt; echo x > {outside} 2>/dev/null; "
                                    f"(setsid bash -c 'exec -a {marker} sleep 300' &); echo started", "c1")
            alive = _processes_named(marker)  # from outside, while the environment holds it
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
        while _processes_named(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _processes_named(marker) == []  # gone with the block, `setsid` and all
        assert stranger.is_error and stranger.error["code"] == "ENV_GONE", stranger
        assert after.is_error and after.error["code"] == "ENV_GONE", after
        assert env_id
    finally:
        registry.shutdown()
