"""Version leases, without Ray: a change returns only after every live subscriber heard it."""

import asyncio
import time

from dsh_actors.runtime.registry.leases import Leases


def test_a_change_waits_for_each_live_subscriber_to_acknowledge_it_and_no_longer():
    async def scenario():
        version = [1]
        leases = Leases(lambda: version[0], lease_s=5.0, heartbeat_s=0.2)
        assert await leases.poll("client", 0) == 1  # newer than known: at once
        waiting_poll = asyncio.ensure_future(leases.poll("client", 1))
        await asyncio.sleep(0.05)
        version[0] = 2
        change = asyncio.ensure_future(leases.settled())
        assert await asyncio.wait_for(waiting_poll, 1) == 2  # the change woke the poll
        await asyncio.sleep(0.1)
        assert not change.done()  # heard, but not yet acknowledged
        acked_poll = asyncio.ensure_future(leases.poll("client", 2))  # the next poll knows 2
        await asyncio.wait_for(change, 1)
        acked_poll.cancel()

    asyncio.run(scenario())


def test_a_subscriber_that_stops_polling_holds_a_change_only_until_its_lease_runs_out():
    async def scenario():
        version = [1]
        leases = Leases(lambda: version[0], lease_s=0.4, heartbeat_s=0.1)
        await leases.poll("gone", 1)  # polls once, then never again
        version[0] = 2
        start = time.monotonic()
        await asyncio.wait_for(leases.settled(), 5)
        waited = time.monotonic() - start
        assert waited > 0.2 and len(leases) == 0  # it waited for the lease, then forgot the subscriber
        version[0] = 3
        await asyncio.wait_for(leases.settled(), 0.5)  # nobody left to wait for

    asyncio.run(scenario())
