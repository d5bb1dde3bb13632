"""Waiting with a time limit never loses a cancel (:mod:`dsh_actors.core.within`)."""

import asyncio
import pathlib

import pytest

import dsh_actors
from dsh_actors.core.within import within

pytestmark = pytest.mark.timeout(30)


def test_a_cancel_that_arrives_with_the_value_still_cancels_the_waiter():
    async def scenario():
        value = asyncio.get_running_loop().create_future()
        waiter = asyncio.ensure_future(within(asyncio.shield(value), 10))
        await asyncio.sleep(0)  # the waiter is waiting
        value.set_result("late")  # in the same turn of the loop as the cancel
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(scenario())


def test_it_answers_the_value_or_times_out_cancelling_what_it_waited_for():
    async def scenario():
        assert await within(asyncio.sleep(0, "v"), 1) == "v"
        assert await within(asyncio.sleep(0, "v"), None) == "v"
        slow = asyncio.ensure_future(asyncio.sleep(10))
        with pytest.raises(TimeoutError):
            await within(slow, 0.01)
        assert slow.cancelled()

    asyncio.run(scenario())


def test_the_package_never_calls_wait_for():
    # asyncio.wait_for (Python 3.11) returns a value that arrives with a cancel and drops
    # the cancel: a task asyncio.run cancelled at its end then kept it from returning.
    root = pathlib.Path(dsh_actors.__file__).parent
    callers = [str(path.relative_to(root)) for path in root.rglob("*.py") if "wait_for(" in path.read_text()]
    assert callers == [], f"use dsh_actors.core.within.within instead of asyncio.wait_for in {callers}"
