"""Aborts, timeouts and the session log, measured side by side.

Run: ``python benchmarks/lifecycle.py``. Writes three tables to RESULTS.md:

* abort latency — from ``controller.abort()`` in the driver to the tool body in a worker
  process seeing ``ctx.signal`` abort (goal ≤ 50 ms);
* the timeout policy's overhead per call, in one process and on Ray, each against the
  same registry without it;
* session log appends per second with fsync always, at an interval, and never, next to
  plain ``file.write`` + ``flush`` of the same bytes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import table, write_section  # noqa: E402
from dsh_actors.eval.reports import percentile  # noqa: E402

import msgpack  # noqa: E402

from dsh_actors import AbortController, InMemoryRegistry, define_tool, text_block  # noqa: E402
from dsh_actors.log import FrameFile  # noqa: E402
from dsh_actors.policies import timeout_policy  # noqa: E402
from dsh_actors.runtime import ToolRegistry, ensure_ray  # noqa: E402
from dsh_actors.runtime.session.client import SessionLog  # noqa: E402


async def _wait_for_abort(args, ctx):
    await ctx.signal
    return [text_block(repr(time.time()))]


waiter = define_tool(name="waiter", description="waits for its signal", parameters={}, execute=_wait_for_abort)
echo = define_tool(name="echo", description="echo", parameters={"text": {"type": "string"}},
                   execute=lambda a, c: [text_block(a.get("text", ""))], timeout_ms=10_000)


def pct(samples, p):
    return percentile(list(samples), p)  # the one percentile helper (interpolated), as the job's summary uses


async def abort_latency(registry: ToolRegistry, rounds: int) -> str:
    await registry.register(waiter)
    samples = []
    for i in range(-1, rounds):  # round -1 warms up (the first call creates the signal hub)
        controller = AbortController()
        call = asyncio.ensure_future(registry.execute(call_id=str(i), name="waiter", arguments={},
                                                      signal=controller.signal))
        await asyncio.sleep(0.15)  # the body is running and waiting
        aborted_at = time.time()
        controller.abort("benchmark")
        seen_at = float((await call).text)
        if i >= 0:
            samples.append((seen_at - aborted_at) * 1e3)
    return table(["rounds", "p50 ms", "p90 ms", "max ms", "goal"],
                 [[str(rounds), f"{statistics.median(samples):.2f}", f"{pct(samples, 90):.2f}",
                   f"{max(samples):.2f}", "≤ 50 ms"]])


async def per_call_ms(call, count):
    for i in range(20):
        await call(i)
    start = time.perf_counter()
    for i in range(count):
        await call(i)
    return (time.perf_counter() - start) / count * 1e3


async def timeout_overhead(count: int) -> str:
    rows = []
    for label, with_policy in (("without timeout policy", False), ("with timeout policy", True)):
        local = InMemoryRegistry()
        local.register(echo)
        if with_policy:
            local.on("tools/execute", timeout_policy)
        in_process = await per_call_ms(lambda i: local.execute(call_id=str(i), name="echo", arguments={"text": "x"}),
                                       count * 20)
        remote = ToolRegistry.connect(f"bench-timeout-{with_policy}")
        await remote.register(echo)
        if with_policy:
            await remote.on("tools/execute", timeout_policy)
        scope = remote.scope("agent")
        on_ray = await per_call_ms(lambda i: scope.execute(call_id=str(i), name="echo", arguments={"text": "x"}),
                                   count)
        remote.shutdown()
        rows.append([label, f"{in_process * 1e3:.1f}", f"{on_ray:.3f}"])
    added_local = float(rows[1][1]) - float(rows[0][1])
    added_ray = float(rows[1][2]) - float(rows[0][2])
    rows.append(["added by the policy", f"{added_local:.1f}", f"{added_ray:+.3f}"])
    return table(["registry", "in one process, µs per call", "on Ray, ms per call"], rows)


def log_throughput(count: int) -> str:
    event = {"type": "tool/result", "call_id": "c", "name": "echo", "arguments": {"text": "x" * 64},
             "content": [{"type": "text", "text": "y" * 256}], "is_error": False}
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        payload = msgpack.packb(event)
        start = time.perf_counter()
        with open(os.path.join(folder, "raw.bin"), "ab") as raw:
            for _ in range(count):
                raw.write(payload)
                raw.flush()
        base = count / (time.perf_counter() - start)
        rows.append(["plain write + flush (no framing, no fsync)", f"{base:,.0f}", "1.00×"])
        for policy in ("never", "interval", "always"):
            n = count if policy != "always" else max(200, count // 20)
            with FrameFile(os.path.join(folder, f"{policy}.log"), fsync=policy) as frames:
                start = time.perf_counter()
                for _ in range(n):
                    frames.append(event)
                rate = n / (time.perf_counter() - start)
            rows.append([f"FrameFile, fsync {policy}", f"{rate:,.0f}", f"{rate / base:.2f}×"])
        log = SessionLog.open(f"bench-{time.monotonic_ns()}", os.path.join(folder, "writer.log"), fsync="never")

        async def through_actor(n: int) -> float:
            start = time.perf_counter()
            await asyncio.gather(*(log.append(event) for _ in range(n)))
            return n / (time.perf_counter() - start)

        rate = asyncio.run(through_actor(count // 5))
        rows.append(["SessionLog on the node's writer (fsync never), 1 driver, pipelined", f"{rate:,.0f}",
                     f"{rate / base:.2f}×"])
        log.close().result(60)
    return table(["writer", "events/s", "vs plain write"], rows)


async def main(rounds: int, calls: int) -> tuple[str, str]:
    registry = ToolRegistry.connect("bench-abort")
    try:
        latency = await abort_latency(registry, rounds)
    finally:
        registry.shutdown()
    return latency, await timeout_overhead(calls)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--events", type=int, default=5000)
    options = parser.parse_args()
    ensure_ray()
    latency, overhead = asyncio.run(main(options.rounds, options.calls))
    throughput = log_throughput(options.events)
    write_section("abort_latency", "Abort latency: caller in the driver, tool body in a worker", latency
                  + "\n\nThe caller's abort goes to the registry's signal hub; the execution task's open wait "
                    "returns and the body's `ctx.signal` aborts. Timestamps are wall clock on one machine.")
    write_section("timeout_overhead", "Timeout policy: overhead per call", overhead
                  + "\n\nSequential calls of a tool with a 10 s budget (never reached). The policy arms a deadline "
                    "(a timer thread) per call.")
    write_section("log_throughput", "Session log: appends per second", throughput
                  + "\n\nEach append is a length+CRC framed msgpack event flushed before it returns; fsync "
                    "\"always\" is the default (nothing acknowledged is lost even on power loss).")
    print(latency, overhead, throughput, sep="\n\n")
