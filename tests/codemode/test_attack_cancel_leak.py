"""Attack: a run cancelled while its sandbox is being forked leaves that sandbox running
(found by a security review; triggered by the caller's cancellation, e.g. a timeout around
``run``, not by the program).

``_fresh`` asks the fork server from an executor thread; a cancellation that lands on that
``await`` leaves the answer future without a waiter, the sandbox the server then hands
over is set as its result and never discarded: its processes (and cgroups, pipes, pidfd)
stay until the runtime is closed. Judged from outside: processes of the sandbox's outside
uid after the cancelled runs have returned.
"""

import asyncio

import pytest

from dsh_actors.codemode.contract import CodeRuntimeConfig
from dsh_actors.codemode.sandbox import SubprocessRuntime

from .watch import processes_of

IDS = (65529, 65529)


def sandbox_processes():
    return [int(entry.name) for entry in processes_of(IDS[0])]


@pytest.fixture(scope="module")
def runtime():
    rt = SubprocessRuntime(CodeRuntimeConfig(backend="cpython", compute_ms=3000, max_wall_ms=20_000),
                           warm_spare=False, outside_ids=IDS)
    yield rt
    rt.close()


def test_a_run_cancelled_while_its_sandbox_starts_leaves_nothing_running(runtime):
    async def scenario():
        assert (await runtime.run("return 1", {})).value == "1"  # the server is up
        for _ in range(3):
            task = asyncio.ensure_future(runtime.run("return 2", {}))
            await asyncio.sleep(0)  # the run now waits on the fork server's answer
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        await asyncio.sleep(2)
        return sandbox_processes()

    left = asyncio.run(scenario())
    assert left == [], f"sandbox processes left running after the cancelled runs returned: {left}"
