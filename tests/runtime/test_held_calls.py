"""The approval queue's held calls (pure: no Ray): an asked call's result waits for its
collector, and the progress its body reports after the ask reaches a collector that
listens — in order, all of it before the result, the latest kept when there are many."""

import asyncio

import pytest

from dsh_actors.runtime.registry import held
from dsh_actors.runtime.registry.held import HeldCalls

pytestmark = pytest.mark.timeout(10)


def _held(call_id="c1"):
    """A queue whose call ``call_id`` has an ask pending, and its holder told so."""
    return HeldCalls(lambda c: {"id": "ask-1", "call_id": c} if c == call_id else None)


async def _listen(calls, call_id, timeout_s=5.0):
    """Collect like a listening answerer: every report, then the result."""
    heard, count = [], 0
    while True:
        status, value = await calls.collect(call_id, timeout_s, count)
        if status != "progress":
            return heard, (status, value)
        count, reports = value
        heard.extend(reports)


def test_a_listening_collector_hears_each_report_in_order_then_the_result():
    async def scenario():
        calls = _held()
        assert (await calls.ask_of("c1", None))["id"] == "ask-1"
        listening = asyncio.ensure_future(_listen(calls, "c1"))
        await asyncio.sleep(0.01)
        calls.report("c1", (1.0, 3.0, "one"))
        await asyncio.sleep(0.01)
        calls.report("c1", (2.0, 3.0, None))
        calls.report("c1", (3.0, 3.0, "three"))
        calls.deposit("c1", {"content": "done"})  # in the same breath as the last reports
        return await listening, await calls.collect("c1", 1.0)

    (heard, outcome), again = asyncio.run(scenario())
    assert heard == [(1.0, 3.0, "one"), (2.0, 3.0, None), (3.0, 3.0, "three")]
    assert outcome == ("done", {"content": "done"})
    assert again == ("unknown", None)  # collected: nothing is kept


def test_a_collector_that_does_not_listen_gets_the_result_alone():
    async def scenario():
        calls = _held()
        await calls.ask_of("c1", None)
        calls.report("c1", (1.0, None, None))
        collecting = asyncio.ensure_future(calls.collect("c1", 5.0))
        await asyncio.sleep(0.01)
        calls.report("c1", (2.0, None, None))  # wakes it: it goes on waiting
        await asyncio.sleep(0.01)
        assert not collecting.done()
        calls.deposit("c1", "result")
        return await collecting

    assert asyncio.run(scenario()) == ("done", "result")


def test_only_the_latest_reports_are_kept_and_the_count_says_how_many_were_made(monkeypatch):
    monkeypatch.setattr(held, "KEEP_REPORTS", 3)

    async def scenario():
        calls = _held()
        await calls.ask_of("c1", None)
        for k in range(1, 8):
            calls.report("c1", (float(k), None, None))
        first = await calls.collect("c1", 1.0, 0)
        calls.report("c1", (8.0, None, None))
        second = await calls.collect("c1", 1.0, first[1][0])
        late = await calls.collect("c1", 0.05, 8)  # nothing new, no result: its wait ends
        return first, second, late

    first, second, late = asyncio.run(scenario())
    assert first == ("progress", (7, [(5.0, None, None), (6.0, None, None), (7.0, None, None)]))
    assert second == ("progress", (8, [(8.0, None, None)]))
    assert late == ("late", None)


def test_reports_of_a_call_nobody_holds_are_dropped():
    async def scenario():
        calls = _held()
        calls.report("c1", (1.0, None, None))  # before its holder asked: not held yet
        await calls.ask_of("c1", None)
        calls.deposit("c1", "result")
        return await _listen(calls, "c1"), await calls.collect("other", 1.0, 0)

    (heard, outcome), other = asyncio.run(scenario())
    assert heard == [] and outcome == ("done", "result")
    assert other == ("unknown", None)
