"""Hard bounds on the host side of a run, on both backends, asserted from outside.

Each test is an attack a hostile (or careless) program makes on the process that hosts its
run — on Ray, the node's executor, which every agent there shares. The assertions look at
that process from outside the run: its RSS and CPU sampled from ``/proc`` while the run
goes, the longest its event loop was kept from its other work (a step's CPU, or a system
call that is not its wait for work), counts of what the tools really ran,
and the coded refusals the program saw. The thresholds are far from the measured failure
(RSS in gigabytes, stalls of seconds) so a noisy machine does not trip them.
"""

import asyncio
import json
import time

import pytest

from dsh_actors.codemode.contract import CodeRuntimeConfig
from dsh_actors.codemode.monty import MontyRuntime
from dsh_actors.codemode.sandbox import SubprocessRuntime

from .watch import watched

MB = 1 << 20
TIGHT = dict(compute_ms=2000, max_wall_ms=20_000, max_log_bytes=1024, max_value_bytes=4096, max_memory_mb=256,
             max_arg_bytes=256 * 1024, max_result_bytes=256 * 1024, max_calls_in_flight=16, max_bytes_in_flight=MB)
STALL_S = 0.5  # the longest the host's loop may be kept from its other work (attacks measured 1.75-8.5 s before)
RSS_MB = 200  # host growth allowed (attacks measured 1.5-3 GB before)


@pytest.fixture(scope="module", params=["cpython", "monty"])
def runtime(request):
    config = CodeRuntimeConfig(backend=request.param, retry_unsupported=False, **TIGHT)
    rt = SubprocessRuntime(config) if request.param == "cpython" else MontyRuntime(config)
    yield rt
    rt.close()


def backend(runtime):
    return "cpython" if isinstance(runtime, SubprocessRuntime) else "monty"


class Tools:
    """Bindings that count what really ran."""

    def __init__(self):
        self.ran = 0
        self.running = 0
        self.most_at_once = 0

    async def echo(self, args):
        self.ran += 1
        return f"len {len(json.dumps(args))}"

    async def slow(self, args):
        self.ran += 1
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        await asyncio.sleep(0.05)
        self.running -= 1
        return "slow"

    async def huge(self, args):
        self.ran += 1
        return "r" * (3 * MB)

    def bindings(self):
        return {"echo": self.echo, "slow": self.slow, "huge": self.huge}


def attack(runtime, program, tools=None, **watch):
    tools = tools or Tools()
    result, w = asyncio.run(watched(runtime, program, tools.bindings(), **watch))
    return result, w, tools


def refusals(result, code):
    return (result.value or "").count(f"[{code}]")


CATCH_ALL = """
import asyncio
async def attempt(**kwargs):
    try:
        return await tools.{tool}(**kwargs)
    except RuntimeError as exc:
        return str(exc)
"""


def test_one_argument_of_tens_of_megabytes_fails_alone_before_the_host_copies_it(runtime):
    program = CATCH_ALL.format(tool="echo") + (
        "big = 'x' * (40 * 1024 * 1024)\n"
        "first = await attempt(text=big)\n"
        "second = await attempt(text='small')\n"
        "return first + ' | ' + second")
    result, w, tools = attack(runtime, program)
    assert result.error is None, result
    assert refusals(result, "ARGS_TOO_LARGE") == 1 and result.value.endswith("| len 17"), result.value[:300]
    assert tools.ran == 1  # only the small call reached a tool
    assert w.peak_rss_growth < RSS_MB * MB and w.stall_s < STALL_S


def test_many_gathered_calls_sharing_one_large_string_are_bounded_by_bytes_in_flight(runtime):
    program = CATCH_ALL.format(tool="slow") + (
        "shared = 'y' * (200 * 1024)\n"  # under the argument cap; 200 of them would be 40 MB
        "answers = await asyncio.gather(*[attempt(text=shared) for _ in range(200)])\n"
        "return [sum(a == 'slow' for a in answers), sum('[TOO_MANY_BYTES]' in a for a in answers)]")
    result, w, tools = attack(runtime, program)
    assert result.error is None, result
    admitted, refused = json.loads(result.value)
    assert admitted == tools.ran and admitted + refused == 200 and refused > 0
    assert 1 <= tools.most_at_once <= 5  # 1 MiB in flight / 200 KiB each
    assert w.peak_rss_growth < RSS_MB * MB and w.stall_s < STALL_S


def test_calls_in_flight_are_capped_and_the_rest_fail_alone(runtime):
    program = CATCH_ALL.format(tool="slow") + (
        "answers = await asyncio.gather(*[attempt(n=i) for i in range(100)])\n"
        "return [sum(a == 'slow' for a in answers), sum('[TOO_MANY_CALLS]' in a for a in answers)]")
    result, w, tools = attack(runtime, program)
    assert result.error is None, result
    admitted, refused = json.loads(result.value)
    assert admitted == tools.ran and admitted + refused == 100 and refused > 0
    assert tools.most_at_once <= 16


def test_a_result_over_the_cap_fails_that_call_alone(runtime):
    program = CATCH_ALL.format(tool="huge") + "return await attempt()"
    result, w, tools = attack(runtime, program)
    assert tools.ran == 1 and refusals(result, "RESULT_TOO_LARGE") == 1, result


def test_empty_lines_cost_a_byte_each_so_the_log_budget_bounds_lines_too(runtime):
    result, w, _ = attack(runtime, "print('\\n' * 200_000)\nreturn 'done'")
    assert result.value == "done"
    assert len(result.logs) <= 1024 + 1 and result.logs[-1].endswith("truncated at 1024 bytes")
    assert sum(len(line) + 1 for line in result.logs[:-1]) <= 1024


def test_a_16_mb_printed_line_costs_the_host_little_and_is_cut(runtime):
    program = "line = 'z' * (16 * 1024 * 1024)\nfor _ in range(4):\n    print(line, end='')\nprint()\nreturn 'done'"
    result, w, _ = attack(runtime, program)
    assert result.value == "done" and result.logs == ["[dsh-code-runtime] log capture truncated at 1024 bytes"]
    assert w.cpu_s < 2.0 and w.stall_s < STALL_S  # the host's CPU for a 64 MB line, against a 2 s budget
    assert w.peak_rss_growth < RSS_MB * MB


def test_returning_millions_of_items_never_stalls_the_host_and_comes_back_cut(runtime):
    result, w, _ = attack(runtime, "return list(range(3_000_000))")
    assert w.stall_s < STALL_S and w.peak_rss_growth < RSS_MB * MB
    assert result.error is None or result.error.kind == "timeout", result  # the rendering is the run's own work
    if result.error is None:
        assert result.value.startswith("[0, 1, 2") and result.value.endswith("… [truncated]")
        assert len(result.value.encode()) <= 4096 + len("… [truncated]".encode())


def test_a_value_that_cannot_be_rendered_is_a_value_not_an_exception(runtime):
    result, w, _ = attack(runtime, "return 10 ** 5000")
    assert result.error is None and "cannot be shown" in result.value, result


def test_a_flood_of_tiny_frames_or_prints_is_charged_to_the_runs_compute_budget(runtime):
    if backend(runtime) == "cpython":  # frames the host must decode and drop, written straight to the channel
        program = ("import os, sys, msgpack, struct\n"
                   "body = msgpack.packb({'t': 'noise'})\n"
                   "chunk = (struct.pack('>I', len(body)) + body) * 4096\n"
                   "fd = sys.modules['_child']._out[0]\n"
                   "while True:\n    os.write(fd, chunk)")
    else:  # print callbacks the host must run
        program = "while True:\n    print('')"
    started = time.monotonic()
    result, w, _ = attack(runtime, program)
    assert result.error is not None and result.error.kind == "timeout", result
    assert "compute budget exhausted" in result.error.message
    assert time.monotonic() - started < 10  # the 2 s budget ended it, not the 20 s wall ceiling
    assert w.cpu_s < 4.0 and w.stall_s < STALL_S


def test_forged_call_frames_resent_from_one_payload_are_bounded(runtime):
    if backend(runtime) == "monty":  # the external function itself, called without the prelude
        program = ("import asyncio\n"
                   "payload = 'p' * (8 * 1024 * 1024)\n"
                   "async def forge():\n"
                   "    try:\n        return await __dsh_call__('echo', payload, 0)\n"
                   "    except Exception as exc:\n        return str(exc)\n"
                   "answers = await asyncio.gather(*[forge() for _ in range(50)])\n"
                   "return sum('[ARGS_TOO_LARGE]' in a for a in answers)")
        result, w, tools = attack(runtime, program)
        assert result.value == "50" and tools.ran == 0, result
    else:  # raw frames on the channel, every one carrying the same big payload
        program = ("import os, sys, json\n"
                   "child = sys.modules['_child']\n"
                   "payload = json.dumps({'text': 'p' * (200 * 1024)})\n"
                   "for i in range(1000, 1400):\n"
                   "    child._send({'t': 'call', 'id': i, 'name': 'slow', 'json': payload})\n"
                   "import time\ntime.sleep(1)\nreturn 'sent'")
        result, w, tools = attack(runtime, program)
        assert result.value == "sent" and tools.most_at_once <= 5, (result, tools.most_at_once)  # 1 MiB in flight
    assert w.peak_rss_growth < RSS_MB * MB and w.stall_s < STALL_S


def test_an_attacking_run_leaves_concurrent_runs_their_results(runtime):
    """One run floods the host while eight others do ordinary work: each of the eight
    gets its own result, and the loop they share keeps ticking."""
    tools = Tools()
    flood = "while True:\n    print('x' * 1000)"
    ordinary = "total = 0\nfor i in range(5):\n    total += len(await tools.echo(n=i))\nreturn total"

    async def scenario():
        from .watch import HostWatch

        async with HostWatch() as w:
            results = await asyncio.gather(runtime.run(flood, tools.bindings()),
                                           *[runtime.run(ordinary, tools.bindings()) for _ in range(8)])
        return results, w

    results, w = asyncio.run(scenario())
    assert results[0].error is not None and results[0].error.kind == "timeout"
    assert [r.value for r in results[1:]] == ["25"] * 8, results[1:]
    assert tools.ran == 40 and w.stall_s < STALL_S
