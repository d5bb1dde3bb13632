"""Whatever user code raises ends as one coded result, and the process serving it goes on.

A body, a listener, a guard or an observer may raise any ``BaseException``; only the
call's own cancellation propagates. Schemas nested past the limits are refused with
their coded errors instead of exhausting the stack.
"""

import asyncio
import concurrent.futures

import pytest

from dsh_actors import define_tool, text_block
from dsh_actors.core.body import BODY_RUNNER
from dsh_actors.core.errors import DefinitionError, OutputSchemaError
from dsh_actors.core.output_schema import assert_supported_output_schema
from dsh_actors.core.schema import MAX_SCHEMA_DEPTH

from .helpers import call, echo, registry_with

RAISED = [KeyboardInterrupt("stop"), SystemExit(3), GeneratorExit(), asyncio.CancelledError()]


def raising(thrown, name="boom", asynchronous=False):
    def body(args, ctx):
        raise thrown

    async def async_body(args, ctx):
        raise thrown

    return define_tool(name=name, description="raises", parameters={}, execute=async_body if asynchronous else body)


def run_all(registry, *calls):
    async def go():
        return [await registry.execute(c) for c in calls]

    return asyncio.run(go())


@pytest.mark.parametrize("asynchronous", [False, True], ids=["plain", "async"])
@pytest.mark.parametrize("thrown", RAISED, ids=lambda e: type(e).__name__)
def test_a_body_raising_any_base_exception_gives_one_coded_result_and_the_next_call_runs(thrown, asynchronous):
    registry = registry_with(raising(thrown, asynchronous=asynchronous), echo())
    heard = []
    registry.on("tools/result", lambda e, r: heard.append(e.call_id))
    failed, after = run_all(registry, call("c1", "boom", {}), call("c2"))
    expected = "CANCELLED" if isinstance(thrown, asyncio.CancelledError) else "PROCESS_CONTROL"
    assert failed.is_error and failed.error["code"] == expected, failed
    assert after.text == "hi" and not after.is_error
    assert heard == ["c1", "c2"]  # each call heard once


@pytest.mark.parametrize("thrown", RAISED[:3], ids=lambda e: type(e).__name__)
def test_a_body_in_a_thread_pool_raising_a_base_exception_is_contained(thrown):
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)

    async def go():
        BODY_RUNNER.set(lambda fn: asyncio.get_running_loop().run_in_executor(pool, fn))
        registry = registry_with(raising(thrown), echo())
        return [await registry.execute(call("c1", "boom", {})), await registry.execute(call("c2"))]

    try:
        failed, after = asyncio.run(go())
    finally:
        pool.shutdown()
    assert failed.error["code"] == "PROCESS_CONTROL" and type(thrown).__name__ in failed.text
    assert after.text == "hi"


@pytest.mark.parametrize("stage", ["tools/pre-execute", "tools/execute", "tools/post-execute"])
@pytest.mark.parametrize("thrown", RAISED[:3], ids=lambda e: type(e).__name__)
def test_a_listener_raising_a_base_exception_fails_closed_with_a_code(stage, thrown):
    ran = []
    registry = registry_with(echo(execute=lambda a, c: ran.append(1) or [text_block("ran")]))

    def listener(*args):
        raise thrown

    registry.on(stage, listener)
    result, = run_all(registry, call())
    assert result.is_error and result.error["code"] == "PROCESS_CONTROL", result
    assert ran == ([1] if stage == "tools/post-execute" else [])  # a wrapper that raises never calls on


def test_a_guard_and_an_observer_raising_keyboard_interrupt_are_contained():
    registry = registry_with(echo())

    def guard(execution):
        raise KeyboardInterrupt

    undo = registry.guard(guard)
    result, = run_all(registry, call())
    assert result.error["code"] == "PROCESS_CONTROL"
    undo()

    def observer(execution, result):
        raise SystemExit(1)

    registry.on("tools/result", observer)
    result, = run_all(registry, call())
    assert result.text == "hi" and not result.is_error  # an observer's failure is logged, never raised


def test_the_calls_own_cancellation_still_propagates():
    async def slow(args, ctx):
        await asyncio.sleep(30)
        return [text_block("never")]

    registry = registry_with(define_tool(name="slow", description="", parameters={}, execute=slow))

    async def go():
        task = asyncio.ensure_future(registry.execute(call("c1", "slow", {})))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())


def nested(depth, leaf, wrap):
    node = leaf
    for _ in range(depth):
        node = wrap(node)
    return node


@pytest.mark.parametrize("wrap", [lambda p: {"type": "object", "properties": {"x": p}},
                                  lambda p: {"type": "array", "items": p}], ids=["properties", "items"])
def test_a_parameter_schema_nested_5000_deep_is_a_definition_error(wrap):
    with pytest.raises(DefinitionError, match=f"nested deeper than {MAX_SCHEMA_DEPTH} levels") as caught:
        define_tool(name="deep", description="", parameters={"x": nested(5000, {"type": "string"}, wrap)},
                    execute=lambda a, c: [])
    assert caught.value.code == "INVALID_DEFINITION"
    define_tool(name="deep", description="", parameters={"x": nested(MAX_SCHEMA_DEPTH - 1, {"type": "string"}, wrap)},
                execute=lambda a, c: [])  # the limit itself is allowed


def test_an_output_schema_nested_10000_deep_is_an_output_schema_error():
    schema = nested(10_000, {"type": "string"}, lambda p: {"type": "object", "properties": {"x": p}})
    with pytest.raises(OutputSchemaError, match=f"nested deeper than {MAX_SCHEMA_DEPTH} levels") as caught:
        assert_supported_output_schema(schema)
    assert caught.value.code == "UNSUPPORTED_SCHEMA"
    assert_supported_output_schema(nested(MAX_SCHEMA_DEPTH - 1, {"type": "string"},
                                          lambda p: {"type": "object", "properties": {"x": p}}))
