"""Response: await or block, run once, share the outcome."""

import asyncio

import pytest

from dsh_actors.runtime import Response


def test_a_response_runs_its_work_once_however_often_it_is_awaited():
    runs = []

    async def work():
        runs.append(1)
        await asyncio.sleep(0.01)
        return "value"

    response = Response(work)

    async def scenario():
        return await asyncio.gather(response, response, response)

    assert asyncio.run(scenario()) == ["value"] * 3 and runs == [1]


def test_a_failure_reaches_every_awaiter_and_blocking_callers():
    async def fail():
        raise ValueError("nope")

    response = Response(fail)

    async def scenario():
        return await asyncio.gather(response, response, return_exceptions=True)

    outcomes = asyncio.run(scenario())
    assert [type(o) for o in outcomes] == [ValueError, ValueError]
    with pytest.raises(ValueError, match="nope"):
        Response(fail).result(timeout_s=5)


def test_result_blocks_from_a_plain_thread_and_refuses_inside_a_loop():
    async def work():
        return 7

    assert Response(work).result(timeout_s=5) == 7

    async def inside():
        with pytest.raises(RuntimeError, match="use `await response`"):
            Response(work).result()

    asyncio.run(inside())
