"""Attack: arguments within every cap that the host parses into 20-30x their size (found by
a security review), sent through ``run_code`` as production sends them.

The caps bound a call's arguments as JSON *text* (``max_arg_bytes``, ``max_bytes_in_flight``),
and the contract says the host then holds at most about ``max_log_bytes +
max_bytes_in_flight + max_arg_bytes + max_result_bytes`` (~10 MB by default) for a run. But
the host parses each admitted argument with ``json.loads`` and keeps the parsed value for
as long as the tool runs: ``[{}, {}, ...]`` costs 4 bytes of text per item and ~88 bytes of
host memory (an empty dict and its pointer). The fix: a queued call holds only its JSON text;
the bridge parses it when the call's turn comes (one sub-call of a run at a time). Judged
from outside: the host's RSS while two runs each keep 8 MB of such arguments in flight to a
slow tool.
"""

import asyncio

import pytest

from dsh_actors import InMemoryRegistry, define_tool, text_block
from dsh_actors.codemode.contract import CodeRuntimeConfig
from dsh_actors.codemode.sandbox import SubprocessRuntime

from .watch import HostWatch

MB = 1 << 20
RSS_MB = 200  # the host growth test_host_bounds.py allows for any attack


@pytest.fixture(scope="module")
def runtime():
    rt = SubprocessRuntime(CodeRuntimeConfig(backend="cpython", compute_ms=20_000, max_wall_ms=30_000))
    yield rt
    rt.close()


PROGRAM = """
import asyncio, json
items = [{}] * 262000            # one shared dict here; 1,048,011 bytes as JSON: under the 1 MiB cap
async def one():
    try:
        return await tools.slow(items=items)
    except RuntimeError as exc:
        return str(exc)[:60]
return await asyncio.gather(*[one() for _ in range(8)])   # 8 MiB in flight: exactly the cap
"""


def test_arguments_within_the_caps_do_not_cost_the_host_many_times_their_size(runtime):
    async def slow(args, ctx):
        await asyncio.sleep(0.3)
        return [text_block(f"ok {len(args['items'])}")]

    registry = InMemoryRegistry(mode="code", code_runtime=runtime)
    registry.register(define_tool(name="slow", description="slow", parameters={"items": {"type": "array"}},
                                  execute=slow))

    async def scenario():
        async with HostWatch() as watch:
            results = await asyncio.gather(*[registry.execute(call_id=f"r{i}", name="run_code",
                                                              arguments={"code": PROGRAM}) for i in range(2)])
        return results, watch

    results, watch = asyncio.run(scenario())
    for result in results:
        assert not result.is_error and result.text.count("ok 262000") == 8, result  # every call was admitted
    assert watch.peak_rss_growth < RSS_MB * MB, f"host RSS grew {watch.peak_rss_growth / MB:.0f} MB for 16 MiB in flight"
