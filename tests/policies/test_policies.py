import asyncio
import time

import pytest

from dsh_actors import AbortController, InMemoryRegistry, define_tool, text_block
from dsh_actors.policies import TOOL_TIMEOUT, metrics_policy, retry_policy, timed_out, timeout_policy


def tool(name="t", body=None, **extra):
    async def default(args, ctx):
        return [text_block("done")]
    return define_tool(name=name, description=name, parameters={}, execute=body or default, **extra)


def run(registry, **call):
    return asyncio.run(registry.execute({"call_id": "c", "name": "t", "arguments": {}, **call}))


def registry_with(*tools, policies=()):
    registry = InMemoryRegistry()
    for t in tools:
        registry.register(t)
    for p in policies:
        registry.on("tools/execute", p)
    return registry


def test_without_a_budget_the_tool_sees_the_callers_own_signal():
    seen = []
    caller = AbortController().signal
    registry = registry_with(tool(body=lambda a, ctx: seen.append(ctx.signal) or []), policies=[timeout_policy])
    run(registry, signal=caller)
    assert seen == [caller]


def test_a_budget_fuses_a_deadline_and_a_cooperative_tool_stops_with_tool_timeout():
    async def cooperative(args, ctx):
        reason = await ctx.signal
        return [text_block(f"stopped: {reason}")]

    registry = registry_with(tool(body=cooperative, timeout_ms=50), policies=[timeout_policy])
    start = time.monotonic()
    result = run(registry)
    assert time.monotonic() - start < 5
    assert result == {"call_id": "c", "content": [text_block("Error: tool call timed out after 50ms")],
                      "is_error": True, "error": {"name": "ToolTimeoutError", "code": "TOOL_TIMEOUT"}}


def test_the_timeout_replaces_the_result_even_when_the_tool_returned_successfully():
    async def ignores_signal(args, ctx):
        await asyncio.sleep(0.1)
        return [text_block("finished late")]

    registry = registry_with(tool(body=ignores_signal, timeout_ms=20), policies=[timeout_policy])
    assert run(registry).error["code"] == TOOL_TIMEOUT


def test_a_fast_tool_keeps_its_result_and_post_execute_sees_the_callers_signal_again():
    caller = AbortController().signal
    seen = {}

    def body(args, ctx):
        seen["tool"] = ctx.signal
        return [text_block("quick")]

    registry = registry_with(tool(body=body, timeout_ms=5_000), policies=[timeout_policy])
    registry.on("tools/post-execute", lambda e, r, n: seen.setdefault("post", e.signal) and n())
    assert run(registry, signal=caller).text == "quick"
    assert seen["tool"] is not caller and seen["post"] is caller


def test_when_the_caller_aborts_first_the_tools_own_result_passes_through():
    controller = AbortController()

    async def cooperative(args, ctx):
        controller.abort("user stop")
        await ctx.signal
        return [text_block("stopped cooperatively")]

    registry = registry_with(tool(body=cooperative, timeout_ms=5_000), policies=[timeout_policy])
    assert run(registry, signal=controller.signal).text == "stopped cooperatively"


def test_the_scoped_definitions_budget_wins():
    async def waits(args, ctx):
        await asyncio.sleep(0.2)
        return [text_block("ok")]

    registry = registry_with(tool(body=waits), policies=[timeout_policy])
    registry.scope("hurried").register(tool(body=waits, timeout_ms=10))
    assert run(registry).text == "ok"
    assert run(registry, agent="hurried").error["code"] == TOOL_TIMEOUT


def test_timed_out_reads_a_signal_or_a_reason():
    assert timed_out("user stop") is None


def flaky(fails):
    attempts = []

    async def body(args, ctx):
        attempts.append(time.monotonic())
        if len(attempts) <= fails:
            raise RuntimeError("flaky")
        return [text_block(f"attempt {len(attempts)}")]
    return body, attempts


def test_retry_runs_an_idempotent_tool_again_until_it_succeeds():
    body, attempts = flaky(2)
    registry = registry_with(tool(body=body, extras={"idempotent": True}), policies=[retry_policy(5, backoff_s=0)])
    assert run(registry).text == "attempt 3" and len(attempts) == 3


def test_retry_never_reruns_a_tool_that_is_not_idempotent():
    body, attempts = flaky(1)
    registry = registry_with(tool(body=body), policies=[retry_policy(5, backoff_s=0)])
    assert run(registry).is_error and len(attempts) == 1


def slow_idempotent():
    attempts = []

    async def body(args, ctx):
        attempts.append(1)
        try:
            await asyncio.wait_for(ctx.signal.wait(), 0.08) if ctx.signal else await asyncio.sleep(0.08)
        except asyncio.TimeoutError:
            pass
        raise RuntimeError("failed slowly")
    return tool(body=body, timeout_ms=100, extras={"idempotent": True}), attempts


def test_a_timeout_registered_outside_retry_bounds_the_whole_sequence():
    definition, attempts = slow_idempotent()
    registry = registry_with(definition, policies=[timeout_policy, retry_policy(10, backoff_s=0)])
    result = run(registry)
    assert result.error["code"] == TOOL_TIMEOUT and len(attempts) == 2


def test_a_timeout_registered_inside_retry_bounds_each_attempt():
    definition, attempts = slow_idempotent()
    registry = registry_with(definition, policies=[retry_policy(3, backoff_s=0), timeout_policy])
    result = run(registry)
    # each 80 ms attempt had its own fresh 100 ms deadline, so none timed out
    assert result.text == "Error: failed slowly" and "error" not in result
    assert len(attempts) == 3


def test_retry_rejects_a_nonsense_configuration():
    with pytest.raises(ValueError):
        retry_policy(0)


def test_metrics_record_each_outcome_and_never_change_a_result():
    recorded = []

    class Sink:
        def record(self, tool, outcome, code, seconds):
            recorded.append((tool, outcome, code))

    class Broken:
        def record(self, *args):
            raise RuntimeError("sink down")

    registry = registry_with(tool(), tool("bad", body=lambda a, c: 1 / 0),
                             policies=[metrics_policy(Sink()), metrics_policy(Broken())])
    assert run(registry).text == "done"
    run(registry, name="bad")
    run(registry, name="ghost")
    assert recorded == [("t", "ok", ""), ("bad", "error", ""), ("ghost", "error", "UNKNOWN_TOOL")]
