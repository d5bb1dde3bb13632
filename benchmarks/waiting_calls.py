"""Calls that wait: I/O-bound tools and pending approvals, side by side with a bare async actor.

Run: ``python benchmarks/waiting_calls.py``. Writes to RESULTS.md:

* 2,000 calls of a tool whose async body awaits 100 ms, at 50, 500 and 2,000 in flight:
  dsh-actors (the full pipeline on the executor pool) vs a bare async Ray actor doing the
  same ``await asyncio.sleep(0.1)`` (goal ≥ 0.8× at every level); the executors' memory
  at the end of the 2,000-in-flight run;
* 1,000 plain calls from other agents with no ask pending vs with 100 asks pending
  (goal ≥ 0.8× the rate).
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import table, write_section  # noqa: E402

import ray  # noqa: E402

from dsh_actors import ask, define_tool, text_block  # noqa: E402
from dsh_actors.runtime import ToolRegistry, ensure_ray  # noqa: E402

from runtime_calls import drive, pss_mb  # noqa: E402


async def waits(args, ctx):
    await asyncio.sleep(0.1)
    return [text_block("done")]


wait_tool = define_tool(name="wait", description="waits 100 ms", parameters={}, execute=waits)
echo = define_tool(name="echo", description="echo", parameters={}, execute=lambda a, c: [text_block("e")])
risky = define_tool(name="risky", description="needs approval", parameters={}, execute=lambda a, c: [text_block("r")])


@ray.remote(num_cpus=0, max_concurrency=10_000)
class BareAsync:
    async def run(self):
        await asyncio.sleep(0.1)
        return [text_block("done")]

    def pid(self):
        import os

        return os.getpid()


async def io_table(total: int) -> str:
    registry = ToolRegistry.connect("bench-waiting")
    await registry.register(wait_tool)
    scope = registry.scope("io-agent")
    bare = BareAsync.remote()
    await bare.run.remote()
    await drive(lambda i: scope.execute(call_id=f"w{i}", name="wait", arguments={}), 100, 50)  # warm
    rows = []
    for in_flight in (50, 500, 2000):
        _, bare_rate = await drive(lambda i: bare.run.remote(), total, in_flight)
        latencies, rate = await drive(lambda i: scope.execute(call_id=f"c{i}", name="wait", arguments={}), total,
                                      in_flight)
        ideal = min(in_flight, total) / 0.1
        rows.append([str(in_flight), f"{bare_rate:.0f}", f"{rate:.0f}", f"{rate / bare_rate:.2f}×",
                     f"{statistics.median(latencies):.0f}", f"{ideal:.0f}"])
    pids = [await e.__ray_call__.remote(lambda self: __import__("os").getpid())
            for e in await registry._handle().executors.remote()]
    memory = sum(pss_mb(pid) for pid in pids)
    registry.shutdown()
    return table(["in flight", "bare async actor calls/s", "dsh-actors calls/s", "ratio", "dsh p50 ms",
                  "ideal calls/s"], rows) + (
        f"\n\n{total} calls each. The executor pool ({len(pids)} actors, `num_cpus=0`) held {memory:.0f} MB PSS "
        "in all after the 2,000-in-flight run.")


async def approval_table(total: int, pending: int) -> str:
    registry = ToolRegistry.connect("bench-approvals")
    for tool in (echo, risky):
        await registry.register(tool)
    await registry.on("tools/pre-execute", lambda e, n: ask("check it") if e.name == "risky" else n())
    await registry.approvals(policy="ask")
    plain = [registry.scope(f"plain-{i}") for i in range(10)]
    askers = [registry.scope(f"asker-{i}") for i in range(10)]
    for scope in askers:  # every scope actor is up before anything is measured
        await scope.execute(call_id="warm", name="echo", arguments={})

    async def plain_calls():
        return await drive(lambda i: plain[i % 10].execute(call_id=f"p{i}", name="echo", arguments={}), total, 50)

    await drive(lambda i: plain[i % 10].execute(call_id=f"warm{i}", name="echo", arguments={}), 100, 50)
    _, quiet = await plain_calls()
    asks = [askers[i % 10].execute(call_id=f"a{i}", name="risky", arguments={}) for i in range(pending)]
    waiting = [asyncio.ensure_future(response) for response in asks]
    deadline = time.monotonic() + 60
    while len(await (await registry.approvals()).pending()) < pending and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    asked = len(await (await registry.approvals()).pending())
    _, busy = await plain_calls()
    for response in asks:
        response.cancel()
    for task in waiting:
        task.cancel()
    registry.shutdown()
    return table(["asks pending", "plain calls/s", "ratio"], [
        ["0", f"{quiet:.0f}", "1.00×"], [str(asked), f"{busy:.0f}", f"{busy / quiet:.2f}×"]]) + (
        f"\n\n{total} plain calls from 10 agents at 50 in flight, while 10 other agents have {pending} asks "
        "pending between them; goal ≥ 0.8×. Each pending ask is a coroutine waiting in an executor, holding "
        "no CPU slot.")


async def main() -> tuple[str, str]:
    return await io_table(2000), await approval_table(1000, 100)


if __name__ == "__main__":
    ensure_ray()
    io, approvals = asyncio.run(main())
    write_section("waiting_io", "Calls that wait: an async body awaiting 100 ms vs a bare async actor", io)
    write_section("waiting_approvals", "Calls that wait: plain calls while asks are pending", approvals)
    print(io, approvals, sep="\n\n")
