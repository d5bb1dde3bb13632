"""Native calls on the Ray runtime, side by side with a bare Ray task and a bare actor call.

Run: ``python benchmarks/runtime_calls.py``. Starts (or joins) a Ray instance and writes
two tables to RESULTS.md: latency and throughput at 1/16/64 calls in flight; the cost
of 1, 3 and 5 policy actors in the chain. (Agent scopes: benchmarks/scopes.py.)
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
from dsh_actors.eval.reports import percentile  # noqa: E402

import ray  # noqa: E402

from dsh_actors import ToolExecution, define_tool, text_block  # noqa: E402
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
    return percentile(list(samples), p)  # the one percentile helper (interpolated), as the job's summary uses


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
        for call in calls.values():
            await drive(call, min(total, 50), in_flight)  # warm the workers
        rounds: dict[str, list[tuple[list[float], float]]] = {label: [] for label in calls}
        for _ in range(3):  # interleaved rounds, medians reported: a shared machine is noisy
            for label, call in calls.items():
                rounds[label].append(await drive(call, total, in_flight))
        measured = {label: (statistics.median(statistics.median(lat) for lat, _ in runs),
                            statistics.median(pct(lat, 99) for lat, _ in runs),
                            statistics.median(rate for _, rate in runs)) for label, runs in rounds.items()}
        task_p50, _, task_rate = measured["bare Ray task"]
        for label, (p50, p99, rate) in measured.items():
            rows.append([str(in_flight), label, f"{p50:.2f}", f"{p99:.2f}", f"{rate:.0f}",
                         f"{p50 / task_p50:.2f}×", f"{rate / task_rate:.2f}×"])
    return table(["in flight", "call", "p50 ms", "p99 ms", "calls/s", "p50 vs task", "throughput vs task"], rows)


@ray.remote(num_cpus=0, max_concurrency=10_000)  # as an executor is made
class AsyncCaller:
    """Bare calls of policy methods made from an async actor (where executors make them)."""

    def __init__(self, targets):
        self.targets = targets

    async def median_ms(self, count, payload, gap_s=0.0):
        """``count`` calls of the first target one after another (``gap_s`` idle between
        them); p50 ms."""
        latencies = []
        for _ in range(count):
            start = time.perf_counter()
            await self.targets[0].check.remote(payload)
            latencies.append((time.perf_counter() - start) * 1e3)
            if gap_s:
                await asyncio.sleep(gap_s)
        return statistics.median(latencies)

    async def chain(self, payload, count):
        """What a call with ``count`` policy actors does around them: one bare call of
        each, in order (``count`` = 0: nothing)."""
        for target in self.targets[:count]:
            await target.check.remote(payload)


async def policy_table(total: int, rounds: int = 3) -> str:
    """Calls with 0, 1, 3 and 5 policy actors in pre-execute, against the same number of
    bare calls of the same policy method with the same execution, made in turn from an
    async actor's method that the driver calls — the position policy actors have in a
    call. Also shown: one bare call back to back in a loop, and with 5 ms idle between
    calls, because how long an actor call takes here depends on how long the processes
    were idle before it. Rounds are interleaved and the medians of the rounds reported."""
    args = {"text": "hello"}
    counts = (0, 1, 3, 5)
    scopes, registries = {}, []
    for count in counts:
        registry = ToolRegistry.connect(f"bench-policies-{count}")
        registries.append(registry)
        await registry.register(echo)
        for _ in range(count):
            await registry.on("tools/pre-execute", actor_listener(PassPolicy.remote(), "check"))
        scopes[count] = registry.scope("agent")
        await drive(lambda i: scopes[count].execute(call_id=str(i), name="echo", arguments=args), 30, 1)
    caller = AsyncCaller.remote([PassPolicy.remote() for _ in range(max(counts))])
    payload = ToolExecution(call_id="c", name="echo", arguments=args, agent="agent")
    await caller.median_ms.remote(30, payload)
    p50s: dict[int, list[float]] = {count: [] for count in counts}
    chains: dict[int, list[float]] = {count: [] for count in counts}
    tight: list[float] = []
    gap: list[float] = []
    for _ in range(rounds):
        for count in counts:
            latencies, _ = await drive(lambda i: scopes[count].execute(call_id=str(i), name="echo", arguments=args),
                                       total, 1)
            p50s[count].append(statistics.median(latencies))
            latencies, _ = await drive(lambda i: caller.chain.remote(payload, count), total, 1)
            chains[count].append(statistics.median(latencies))
        tight.append(await caller.median_ms.remote(total, payload))
        gap.append(await caller.median_ms.remote(total // 2, payload, 0.005))
    for registry in registries:
        registry.shutdown()
    base, bare_base = statistics.median(p50s[0]), statistics.median(chains[0])
    rows = []
    for count in counts[1:]:
        per_actor = (statistics.median(p50s[count]) - base) / count
        per_bare = (statistics.median(chains[count]) - bare_base) / count
        rows.append([str(count), f"{statistics.median(p50s[count]):.2f}", f"{per_actor:.2f}", f"{per_bare:.2f}",
                     f"{per_actor / per_bare:.2f}×"])
    text = table(["policy actors in pre-execute", "call p50 ms", "added ms per policy actor",
                  "added ms per bare call, same position", "ratio"],
                 [["0", f"{base:.2f}", "—", "—", "—"], *rows])
    return text + (
        "\n\n*Same position*: the driver calls an async actor's method that makes the same number of bare calls "
        "of the same policy method with the same execution, one after another, to as many policy actors (p50 "
        "minus that of the method making none, per call) — what a policy actor is in a call. The same bare call "
        f"back to back in a loop inside the actor takes {statistics.median(tight):.2f} ms, and "
        f"{statistics.median(gap):.2f} ms with 5 ms idle between calls: on this VM a process idle a few ms "
        "answers later, and a policy call in a chain always follows idle time, so a loop is not the "
        "comparison. Goal: ratio ≤ 1.1×.")


def pss_mb(pid: int) -> float:
    """Proportional set size of a process (Linux), from /proc/<pid>/smaps_rollup."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no Pss line for pid {pid}")


async def main(total: int) -> None:
    registry = ToolRegistry.connect("bench")
    await registry.register(echo)
    latency = await latency_table(registry, total)
    registry.shutdown()
    policies = await policy_table(total // 2)
    cpus = int(ray.cluster_resources().get("CPU", 0))
    note = (f"\n\nLocal Ray instance, {cpus} CPUs, {os.cpu_count()} cores. Each bare task uses Ray's default "
            "of 1 CPU; dsh-actors executions run on the registry's executors (no CPU reserved), streamed over the channel of "
            "the executor on the driver's node (a local socket, no actor task per call). "
            f"{total} calls per round; each row is the median of 3 interleaved rounds.")
    write_section("runtime_latency", "Ray runtime: native call latency and throughput", latency + note)
    write_section("runtime_policies", "Ray runtime: cost of policy actors in the chain", policies)
    print(latency + note, policies, sep="\n\n")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=400)
    options = parser.parse_args()
    ensure_ray()
    asyncio.run(main(options.calls))
