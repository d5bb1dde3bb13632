"""On Ray, a body or listener raising any ``BaseException`` costs its call one coded result,
and the same executor process serves the next calls (asserted by its pid)."""

import asyncio
import os
import time

import pytest

from dsh_actors import define_tool, text_block
from dsh_actors.runtime import ToolRegistry

T = 120
THROWN = {"KeyboardInterrupt": KeyboardInterrupt, "SystemExit": SystemExit, "GeneratorExit": GeneratorExit}


def pid_tool(name="pid"):
    return define_tool(name=name, description="its process id", parameters={},
                       execute=lambda a, c: [text_block(str(os.getpid()))])


def raising_tool(kind, asynchronous):
    thrown = THROWN[kind]

    def body(args, ctx):
        raise thrown()

    async def async_body(args, ctx):
        raise thrown()

    return define_tool(name=f"{kind}-{'async' if asynchronous else 'plain'}", description="raises", parameters={},
                       execute=async_body if asynchronous else body)


@pytest.fixture(scope="module")
def one_executor(ray_cluster):
    registry = ToolRegistry.connect(f"contain-{os.getpid()}-{time.monotonic_ns()}", executors=1)
    registry.register(pid_tool()).result(T)
    for kind in THROWN:
        for asynchronous in (False, True):
            registry.register(raising_tool(kind, asynchronous)).result(T)
    yield registry
    registry.shutdown()


def test_every_base_exception_from_a_body_is_one_coded_result_and_the_executor_serves_on(one_executor):
    registry = one_executor

    async def scenario():
        before = await asyncio.wait_for(registry.execute(call_id="p0", name="pid", arguments={}), T)
        outcomes = []
        for kind in THROWN:
            for mode in ("plain", "async"):
                result = await asyncio.wait_for(
                    registry.execute(call_id=f"{kind}-{mode}", name=f"{kind}-{mode}", arguments={}), T)
                after = await asyncio.wait_for(registry.execute(call_id=f"after-{kind}-{mode}", name="pid",
                                                                arguments={}), T)
                outcomes.append((kind, mode, result, after))
        # calls in flight together while bodies raise: every one answers
        many = await asyncio.wait_for(asyncio.gather(*(
            registry.execute(call_id=f"m{i}", name="KeyboardInterrupt-plain" if i % 2 else "pid", arguments={})
            for i in range(40))), T)
        return before, outcomes, many

    before, outcomes, many = asyncio.run(scenario())
    for kind, mode, result, after in outcomes:
        assert result.is_error and result.error == {"name": "ProcessControlError", "code": "PROCESS_CONTROL"}, result
        assert kind in result.text
        assert after.text == before.text, f"{kind}/{mode}: the executor process changed"
    assert len(many) == 40
    assert all(r.error["code"] == "PROCESS_CONTROL" for r in many[1::2])
    assert {r.text for r in many[0::2]} == {before.text}


def test_a_listener_raising_keyboard_interrupt_fails_its_call_closed_and_later_calls_run(ray_cluster):
    registry = ToolRegistry.connect(f"contain-listener-{os.getpid()}-{time.monotonic_ns()}", executors=1)
    try:
        registry.register(pid_tool()).result(T)

        def interrupting(execution, call_next):
            if execution.call_id.startswith("stop"):
                raise KeyboardInterrupt
            return call_next()

        registry.on("tools/pre-execute", interrupting).result(T)

        async def scenario():
            stopped = await asyncio.wait_for(registry.execute(call_id="stop-1", name="pid", arguments={}), T)
            fine = await asyncio.wait_for(registry.execute(call_id="go-1", name="pid", arguments={}), T)
            return stopped, fine

        stopped, fine = asyncio.run(scenario())
        assert stopped.error["code"] == "PROCESS_CONTROL" and "KeyboardInterrupt" in stopped.text
        assert not fine.is_error and fine.text.isdigit()
    finally:
        registry.shutdown()
