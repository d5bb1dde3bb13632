"""A breaker over a tool's calls, in one process: consecutive infrastructure failures open
it, open it fails calls at once (coded, never sending them), a probe after the pause closes
it — or opens it again; a tool that answers an error is no failure of its dependency."""

import asyncio

import pytest

from dsh_actors import HarnessError, InMemoryRegistry, define_tool, text_block
from dsh_actors.policies import Breaker, breaker_policy

pytestmark = pytest.mark.timeout(30)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_a_breaker_opens_past_its_threshold_lets_one_probe_through_and_closes_on_its_success():
    clock, changes = Clock(), []
    breaker = Breaker("srv", threshold=3, pause_s=10, clock=clock, on_change=lambda n, s, at: changes.append((n, s)))
    for _ in range(2):
        assert breaker.admit()
        breaker.failed()
    assert breaker.state == "closed"
    breaker.failed()
    assert breaker.state == "open" and not breaker.admit() and changes == [("srv", "open")]
    clock.now += 10
    assert breaker.admit() and not breaker.admit()  # one probe at a time
    breaker.failed()  # the probe failed: open again, for another pause
    assert breaker.state == "open" and changes == [("srv", "open")]
    clock.now += 10
    assert breaker.admit()
    breaker.succeeded()
    assert breaker.state == "closed" and breaker.admit() and changes == [("srv", "open"), ("srv", "closed")]
    with pytest.raises(ValueError, match="at least 1"):
        Breaker("x", threshold=0)


def test_a_tools_breaker_counts_only_infrastructure_failures_and_fails_fast_while_open():
    ran = []

    def body(args, ctx):
        ran.append(args["mode"])
        if args["mode"] == "lost":
            raise HarnessError("the server went away", "WORKER_CRASHED")
        if args["mode"] == "answered":
            raise ValueError("no such file")  # the tool answered an error: its server is fine
        return [text_block("ok")]

    registry = InMemoryRegistry()
    registry.register(define_tool(name="srv", description="d", parameters={"mode": {"type": "string"}}, execute=body))
    registry.on("tools/execute", breaker_policy(threshold=3, pause_s=0.3))

    async def call(mode):
        return await registry.execute({"call_id": "c", "name": "srv", "arguments": {"mode": mode}})

    async def scenario():
        answered = [await call("answered") for _ in range(5)]
        lost = [await call("lost") for _ in range(3)]
        fast = await call("fine")  # open: not sent at all
        await asyncio.sleep(0.35)
        probe = await call("fine")
        after = await call("fine")
        return answered, lost, fast, probe, after

    answered, lost, fast, probe, after = asyncio.run(scenario())
    assert all(r.is_error and "error" not in r for r in answered)
    assert [r.error["code"] for r in lost] == ["WORKER_CRASHED"] * 3
    assert fast.error == {"name": "BreakerOpenError", "code": "BREAKER_OPEN"} and "breaker is open" in fast.text
    assert probe.text == "ok" and after.text == "ok"
    assert ran == ["answered"] * 5 + ["lost"] * 3 + ["fine", "fine"]  # the fast failure never reached the tool
