"""Plain bodies' threads shared out by agent, without Ray: one agent's stuck bodies hold
its own share of the pool, never another agent's threads; a thread comes back to its
agent only when its body has really returned."""

import asyncio
import threading

import pytest

from dsh_actors.runtime.executor.thread_shares import ThreadShares

pytestmark = pytest.mark.timeout(60)


def test_one_agents_stuck_bodies_hold_only_its_share_and_another_agent_runs_at_once():
    release = threading.Event()
    running = {"stuck": 0}
    lock = threading.Lock()

    def stuck():
        with lock:
            running["stuck"] += 1
        release.wait(30)  # ignores every deadline
        return "stuck"

    async def scenario():
        shares = ThreadShares(threads=8, share=2)
        stuck_calls = [asyncio.ensure_future(shares.run("bad", stuck)) for _ in range(10)]
        await asyncio.sleep(0.2)
        # Their calls time out (as a deadline policy ends them): the bodies go on.
        for call in stuck_calls:
            call.cancel()
        others = await asyncio.wait_for(asyncio.gather(*[shares.run(f"good-{i}", lambda i=i: i) for i in range(6)]), 10)
        held_while_stuck = shares.held("bad")
        release.set()
        for _ in range(100):  # the stuck bodies return: their threads go back
            if shares.held("bad") == 0:
                break
            await asyncio.sleep(0.02)
        after = await asyncio.wait_for(shares.run("bad", lambda: "again"), 10)
        return others, held_while_stuck, running["stuck"], shares.held("bad"), after

    others, held_while_stuck, ran, held_after, after = asyncio.run(scenario())
    assert others == list(range(6))  # never waited behind the stuck agent
    assert held_while_stuck == 2 and ran == 2  # the 8 others waited for its share and, cancelled, never ran
    assert held_after == 0 and after == "again"


def test_a_wait_for_a_share_cancelled_as_it_is_handed_a_thread_passes_the_thread_on():
    async def scenario():
        shares = ThreadShares(threads=2, share=1)
        gate = threading.Event()
        first = asyncio.ensure_future(shares.run("a", lambda: gate.wait(10)))
        await asyncio.sleep(0.05)
        second = asyncio.ensure_future(shares.run("a", lambda: "second"))
        third = asyncio.ensure_future(shares.run("a", lambda: "third"))
        await asyncio.sleep(0.05)
        gate.set()
        await first
        second.cancel()  # in the same turn it is handed the thread
        return await asyncio.wait_for(third, 10), shares

    third, shares = asyncio.run(scenario())
    assert third == "third" and shares.held("a") == 0
