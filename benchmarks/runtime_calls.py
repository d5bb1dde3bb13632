"""Native calls on the Ray runtime, side by side with a bare Ray task and a bare actor call.

Run: ``python benchmarks/runtime_calls.py``. Starts (or joins) a Ray instance and writes
three tables to RESULTS.md: latency and throughput at 1/16/64 calls in flight; the cost
of 1, 3 and 5 policy actors in the chain; agent scope actors (memory, creation time).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import table, write_section  # noqa: E402

import ray  # noqa: E402

from dsh_actors import define_tool, text_block  # noqa: E402
from dsh_actors.runtime import CONTINUE, ToolRegistry, actor_listener, ensure_ray  # noqa: E402


def body(args):
    return [text_block(args["text"])]


echo = define_tool(name="echo", description="echo", parameters={"text": {"type": "string", "required": True}},
                   execute=lambda args, ctx: body(args))


@ray.remote(max_retries=0)
def bare_task(args):
    return body(args)


@ray.remote(num_cpus=0)
class BareActor:
    def run(self, args):
        return body(args)


@ray.remote(num_cpus=0)
class PassPolicy:
    def check(self, execution):
        return CONTINUE


def pct(samples, p):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


async def drive(call, total: int, in_flight: int):
    """Keep ``in_flight`` calls running until ``total`` finished; latencies (ms) and calls/s."""
    latencies: list[float] = []
    counter = iter(range(total))

    async def worker():
        for i in counter:
            start = time.perf_counter()
            await call(i)
            latencies.append((time.perf_counter() - start) * 1e3)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return latencies, total / (time.perf_counter() - start)


async def latency_table(registry: ToolRegistry, total: int) -> str:
    args = {"text": "hello"}
    actor = BareActor.remote()
    await actor.run.remote(args)
    scope = registry.scope("bench-agent")
    await scope.execute(call_id="warm", name="echo", arguments=args)
    calls = {
        "bare Ray task": lambda i: bare_task.remote(args),
        "bare actor call": lambda i: actor.run.remote(args),
        "dsh-actors execute": lambda i: scope.execute(call_id=str(i), name="echo", arguments=args),
    }
    rows = []
    for in_flight in (1, 16, 64):
        measured = {}
        for label, call in calls.items():
            await drive(call, min(total, 50), in_flight)  # warm the workers
            measured[label] = await drive(call, total, in_flight)
        task_p50 = statistics.median(measured["bare Ray task"][0])
        task_rate = measured["bare Ray task"][1]
        for label, (lat, rate) in measured.items():
            rows.append([str(in_flight), label, f"{statistics.median(lat):.2f}", f"{pct(lat, 99):.2f}",
                         f"{rate:.0f}", f"{statistics.median(lat) / task_p50:.2f}×", f"{rate / task_rate:.2f}×"])
    return table(["in flight", "call", "p50 ms", "p99 ms", "calls/s", "p50 vs task", "throughput vs task"], rows)


async def policy_table(total: int) -> str:
    args = {"text": "hello"}
    rows = []
    base = None
    for count in (0, 1, 3, 5):
        registry = ToolRegistry.connect(f"bench-policies-{count}")
        await registry.register(echo)
        for _ in range(count):
            await registry.on("tools/pre-execute", actor_listener(PassPolicy.remote(), "check"))
        scope = registry.scope("agent")
        await scope.execute(call_id="warm", name="echo", arguments=args)
        await drive(lambda i: scope.execute(call_id=str(i), name="echo", arguments=args), 30, 1)
        latencies, _ = await drive(lambda i: scope.execute(call_id=str(i), name="echo", arguments=args), total, 1)
        p50 = statistics.median(latencies)
        base = p50 if base is None else base
        per_actor = "—" if count == 0 else f"{(p50 - base) / count:.2f}"
        rows.append([str(count), f"{p50:.2f}", f"{p50 - base:.2f}", per_actor])
        registry.shutdown()
    actor = BareActor.remote()
    await actor.run.remote(args)
    round_trip = statistics.median((await drive(lambda i: actor.run.remote(args), total, 1))[0])
    text = table(["policy actors in pre-execute", "p50 ms", "added ms", "added ms per actor"], rows)
    return text + f"\n\nOne bare actor round trip (same machine, same run): {round_trip:.2f} ms p50."


def pss_mb(pid: int) -> float:
    """Proportional set size of a process (Linux), from /proc/<pid>/smaps_rollup."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no Pss line for pid {pid}")


async def scope_table(count: int) -> str:
    registry = ToolRegistry.connect("bench-scopes")
    await registry.register(echo)
    created = []
    start_all = time.perf_counter()
    for i in range(count):
        start = time.perf_counter()
        handle = await registry._scope_handle(f"agent-{i}")
        await handle.ping.remote()
        created.append((time.perf_counter() - start) * 1e3)
    total_s = time.perf_counter() - start_all
    pids = [await (await registry._scope_handle(f"agent-{i}")).__ray_call__.remote(lambda self: os.getpid())
            for i in range(count)]
    memory = [pss_mb(pid) for pid in pids]
    registry.shutdown()
    return table(
        ["scope actors", "create p50 ms", "create max ms", "total s", "PSS per actor MB (median)"],
        [[str(count), f"{statistics.median(created):.0f}", f"{max(created):.0f}", f"{total_s:.1f}",
          f"{statistics.median(memory):.1f}"]],
    )


async def main(total: int, scopes: int) -> None:
    registry = ToolRegistry.connect("bench")
    await registry.register(echo)
    latency = await latency_table(registry, total)
    registry.shutdown()
    policies = await policy_table(total // 2)
    scope_text = await scope_table(scopes)
    cpus = int(ray.cluster_resources().get("CPU", 0))
    note = (f"\n\nLocal Ray instance, {cpus} CPUs, {os.cpu_count()} cores. Each bare task uses Ray's default "
            "of 1 CPU; dsh-actors executions are actor tasks on the registry's executors (no CPU reserved). "
            f"{total} calls per row.")
    write_section("runtime_latency", "Ray runtime: native call latency and throughput", latency + note)
    write_section("runtime_policies", "Ray runtime: cost of policy actors in the chain", policies)
    write_section("runtime_scopes", "Ray runtime: agent scope actors", scope_text)
    print(latency + note, policies, scope_text, sep="\n\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--scopes", type=int, default=20)
    options = parser.parse_args()
    ensure_ray()
    asyncio.run(main(options.calls, options.scopes))
