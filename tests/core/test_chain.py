import asyncio

from dsh_actors.core.pipeline import run_chain


def test_the_chain_runs_outermost_first_and_unwinds_in_reverse():
    log = []

    def listener(name):
        async def run(value, call_next):
            log.append(f"{name}:in")
            out = await call_next()
            log.append(f"{name}:out")
            return out + [name]
        return run

    async def base():
        log.append("base")
        return []

    out = asyncio.run(run_chain((listener("a"), listener("b")), ("v",), base))
    assert log == ["a:in", "b:in", "base", "b:out", "a:out"] and out == ["b", "a"]


def test_a_sync_listener_may_return_call_next_or_a_value_and_an_unawaited_next_leaves_nothing_dangling():
    async def base():
        return "base"

    assert asyncio.run(run_chain((lambda call_next: call_next(),), (), base)) == "base"
    assert asyncio.run(run_chain((lambda call_next: (call_next(), "own")[1],), (), base)) == "own"


def test_an_empty_chain_is_the_base():
    async def base():
        return 7

    assert asyncio.run(run_chain((), (), base)) == 7
