"""Monty's workers: one capped pool per process, bounded in memory, closed before exit."""

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from dsh_actors.codemode.contract import CodeRuntimeConfig
from dsh_actors.codemode.monty import MontyRuntime, _children_running, _Workers


def workers_now():
    return _children_running(_Workers.get(8).binary)


def test_the_worker_cap_holds_across_runtimes_event_loops_and_threads():
    cap = _Workers.get(8).max_workers
    runtimes = [MontyRuntime(CodeRuntimeConfig(backend="monty", max_workers=cap)) for _ in range(2)]
    busy = "x = 0\nfor i in range(400000):\n    x += i\nreturn x"
    peak, stop = [0], threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], len(workers_now()))
            time.sleep(0.01)

    def burst(runtime):
        async def many():
            return await asyncio.gather(*[runtime.run(busy, {}) for _ in range(12)])
        return asyncio.run(many())

    sampler = threading.Thread(target=sample)
    sampler.start()
    outcomes = []
    threads = [threading.Thread(target=lambda rt=rt: outcomes.append(burst(rt))) for rt in runtimes for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    stop.set()
    sampler.join()
    for runtime in runtimes:
        runtime.close()
    assert sum(len(o) for o in outcomes) == 48 and all(r.value == str(sum(range(400000))) for o in outcomes for r in o)
    assert 0 < peak[0] <= cap, (peak[0], cap)  # 48 runs at once from 4 loops and 2 runtimes


def test_every_worker_has_an_address_space_backstop_over_its_heap_budget():
    runtime = MontyRuntime(CodeRuntimeConfig(backend="monty", max_memory_mb=128))
    assert asyncio.run(runtime.run("return 1", {})).value == "1"
    runtime.close()
    limits = {}
    for pid in workers_now():
        line = next(l for l in Path(f"/proc/{pid}/limits").read_text().splitlines() if l.startswith("Max address space"))
        limits[pid] = line.split()[3]
    assert limits and all(value != "unlimited" for value in limits.values()), limits


EXITS = """
import asyncio
from dsh_actors.codemode.contract import CodeRuntimeConfig
from dsh_actors.codemode.monty import MontyRuntime
rt = MontyRuntime(CodeRuntimeConfig(backend="monty", retry_unsupported=False, compute_ms=500))
async def echo(args):
    return "e"
async def main():
    programs = ["return await tools.echo()", "import heapq", "def g():\\n    yield 1", "while True:\\n    pass",
                "print('x' * 100)\\nreturn [1] * 1000"] * 6
    return await asyncio.gather(*[rt.run(p, {"echo": echo}) for p in programs])
asyncio.run(main())
print("ran")
"""


@pytest.mark.timeout(300)
def test_a_process_that_ran_monty_exits_cleanly_even_under_load():
    burner = subprocess.Popen([sys.executable, "-c", "while True:\n    pass"])
    try:
        codes = []
        for _ in range(8):
            done = subprocess.run([sys.executable, "-c", EXITS],
                                  capture_output=True, text=True, timeout=120, cwd=os.getcwd())
            codes.append((done.returncode, done.stdout.strip()))
    finally:
        burner.kill()
        burner.wait()
    assert codes == [(0, "ran")] * 8, codes  # without the exit hook about one in ten aborted (134)
