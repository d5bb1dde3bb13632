"""Starting many environments at once queues them (max_starting at a time); a start that
cannot happen fails with a coded error and leaves nothing behind."""

import asyncio
import os
import uuid

import pytest

from dsh_actors.envs import EnvironmentStartError, EnvSpec
from dsh_actors.envs.native import NativeBackend

from .host import processes_of

pytestmark = pytest.mark.timeout(120)


def test_many_starts_at_once_queue_and_all_become_ready(loop, tmp_path):
    backend = NativeBackend(max_starting=3)
    busy = {"now": 0, "most": 0}
    parent_start = None

    async def many():
        nonlocal parent_start
        first = tmp_path / "first"
        first.mkdir()
        await backend.start("first", EnvSpec(workspace=str(first)))  # makes the warm parent
        parent_start = backend._parent.start

        async def counted(env):
            busy["now"] += 1
            busy["most"] = max(busy["most"], busy["now"])
            try:
                return await parent_start(env)
            finally:
                busy["now"] -= 1

        backend._parent.start = counted
        for i in range(60):
            (tmp_path / f"w{i}").mkdir()
        return await asyncio.gather(*(backend.start(f"many-{i}", EnvSpec(workspace=str(tmp_path / f"w{i}")))
                                      for i in range(60)))

    started = loop.run(many())
    assert len(started) == 60 and busy["most"] <= 3
    assert len({env.uid for env in started}) == 60
    async def everywhere():
        return await asyncio.gather(*(env.run("echo ok", timeout_s=20) for env in started))

    results = loop.run(everywhere())
    assert all(r.output == b"ok\n" for r in results)
    loop.run(backend.close())
    assert all(processes_of(env.uid) == [] for env in started)


def test_a_start_that_cannot_happen_fails_coded_and_leaves_nothing(loop, backend, tmp_path):
    before = set(os.listdir("/sys/fs/cgroup/pids"))
    for workspace in (str(tmp_path / "missing"), "/usr/lib", "/", "/tmp/../tmp/x", "/proc/self"):
        with pytest.raises(EnvironmentStartError):
            loop.run(backend.start(f"bad-{uuid.uuid4().hex[:6]}", EnvSpec(workspace=workspace)))
    assert set(os.listdir("/sys/fs/cgroup/pids")) <= before | {p for p in os.listdir("/sys/fs/cgroup/pids")
                                                               if p.startswith("dsh-envs-")}
    with pytest.raises(ValueError):
        loop.run(backend.start("", EnvSpec(workspace=str(tmp_path))))
