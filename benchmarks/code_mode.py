"""Code Mode, measured side by side.

Run: ``python benchmarks/code_mode.py``. Writes to RESULTS.md:

* an empty program's latency (warm): the sandbox alone, ``run_code`` in one process,
  ``run_code`` on Ray — next to a bare Ray task;
* one program making 100 sequential sub-calls vs 100 native calls from a driver (goal
  ≤ 1.3×, either dispatch);
* the time from a run settling to its in-flight sub-call seeing the abort.
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

from dsh_actors import InMemoryRegistry, define_tool, text_block  # noqa: E402
from dsh_actors.codemode.runtime import CodeRuntimeConfig, SubprocessRuntime  # noqa: E402
from dsh_actors.runtime import ToolRegistry, ensure_ray  # noqa: E402

CPYTHON = CodeRuntimeConfig(backend="cpython")  # the settle probe uses asyncio.ensure_future and time

echo = define_tool(name="echo", description="echo", parameters={"text": {"type": "string"}},
                   execute=lambda a, c: [text_block(a.get("text", ""))])


@ray.remote(max_retries=0)
def bare_task():
    return 1


@ray.remote(num_cpus=0)
class Stamps:
    def __init__(self):
        self.items = []

    def add(self, item):
        self.items.append(item)

    def all(self):
        return self.items


SUBCALL_ROUNDS = 21
"""Rounds per row of the sub-call table, taken in turn with the other rows (see :func:`interleaved`)."""


async def timed(call, rounds):
    for _ in range(3):
        await call()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - start) * 1e3)
    return statistics.median(samples)


async def interleaved(calls, rounds):
    """The median of each call's rounds, taken in turn (A B C A B C ...): a machine that
    slows down or speeds up during the run moves every row alike, not one row."""
    for call in calls:
        for _ in range(3):
            await call()
    samples = [[] for _ in calls]
    for _ in range(rounds):
        for call, taken in zip(calls, samples):
            start = time.perf_counter()
            await call()
            taken.append((time.perf_counter() - start) * 1e3)
    return [statistics.median(taken) for taken in samples]


async def main(rounds: int) -> tuple[str, str, str]:
    sandbox = SubprocessRuntime(CPYTHON)
    local = InMemoryRegistry(mode="code", code_runtime=sandbox)
    local.register(echo)
    remote = ToolRegistry.connect("bench-code", mode="code", code_runtime=CPYTHON, code_dispatch="queue-actor")
    await remote.register(echo)
    scope = remote.scope("bench")
    rows = [
        ["bare Ray task (reference)", await timed(lambda: bare_task.remote(), rounds)],
        ["CPython sandbox run of `pass` (a walled-in fork of its server)",
         await timed(lambda: sandbox.run("pass", {}), rounds)],
        ["run_code in one process", await timed(
            lambda: local.execute(call_id="r", name="run_code", arguments={"code": "pass"}), rounds)],
        ["run_code on Ray", await timed(
            lambda: scope.execute(call_id="r", name="run_code", arguments={"code": "pass"}), rounds)],
    ]
    empty = table(["empty program", "p50 ms"], [[label, f"{ms:.1f}"] for label, ms in rows])

    program = "for i in range(100):\n    await tools.echo(text=str(i))"
    direct = ToolRegistry.connect("bench-code-in-task", mode="code", code_runtime=CPYTHON,
                                  code_dispatch="in-task")
    await direct.register(echo)
    direct_scope = direct.scope("bench")
    monty = ToolRegistry.connect("bench-code-monty", mode="code", code_runtime=CodeRuntimeConfig(backend="monty"))
    await monty.register(echo)
    monty_scope = monty.scope("bench")
    native_ms, code_ms, direct_ms, monty_ms = await interleaved([
        lambda: _hundred_native(scope),
        lambda: scope.execute(call_id="h", name="run_code", arguments={"code": program}),
        lambda: direct_scope.execute(call_id="h", name="run_code", arguments={"code": program}),
        lambda: monty_scope.execute(call_id="h", name="run_code", arguments={"code": program}),
    ], SUBCALL_ROUNDS)
    monty.shutdown()
    sub = table(["100 calls", f"total ms (median of {SUBCALL_ROUNDS})", "ratio"], [
        ["100 native calls from the driver, sequential", f"{native_ms:.0f}", "1.00×"],
        ["one run_code, 100 sub-calls, code_dispatch=queue-actor", f"{code_ms:.0f}",
         f"{code_ms / native_ms:.2f}×"],
        ["one run_code (CPython sandbox, the default), 100 sub-calls, code_dispatch=in-task (default)",
         f"{direct_ms:.0f}",
         f"{direct_ms / native_ms:.2f}×"],
        ["one run_code on Monty, 100 sub-calls, code_dispatch=in-task", f"{monty_ms:.0f}",
         f"{monty_ms / native_ms:.2f}×"],
    ]) + ("\n\nGoal: ≤ 1.3×. Rows taken in turn, round by round (median of each). Each sub-call runs the full "
          "pipeline with no Ray hop: with `in-task` on the executor that took the run, with `queue-actor` in the "
          "queue actor on the run's node that hosts the run (one hop there and back per run, not per sub-call). "
          "The CPython rows include one sandbox run and the program↔host frames; the "
          "Monty row one Monty run.")

    rows = []
    for label, registry in (("in-task (default)", direct), ("queue-actor", remote)):
        latencies = await settle_latencies(registry)
        rows.append([label, str(len(latencies)), f"{statistics.median(latencies):.1f}", f"{max(latencies):.1f}"])
    direct.shutdown()
    settle = table(["code_dispatch", "runs", "p50 ms", "max ms"], rows)
    settle += ("\n\nFrom the program's last statement (its clock) to the in-flight sub-call's tool body seeing "
               "`run_code settled`. With `in-task` the run's signal is the sub-call's own; with `queue-actor` "
               "the abort goes to the queue actor (its control group), where the sub-call runs. Goal ≤ 10 ms.")
    remote.shutdown()
    sandbox.close()
    return empty, sub, settle


async def settle_latencies(registry, runs: int = 10) -> list[float]:
    """Per run: from the program's settlement to the in-flight sub-call's body seeing it."""
    stamps = Stamps.remote()

    async def waits(args, ctx):
        await ctx.signal
        stamps.add.remote(time.time())
        return [text_block("stopped")]

    await registry.register(define_tool(name="waits", description="waits", parameters={}, execute=waits))
    scope = registry.scope("settle")
    latencies = []
    for i in range(runs):
        code = ("import asyncio, time\nasyncio.ensure_future(tools.waits())\nawait asyncio.sleep(0.3)\n"
                "print(repr(time.time()))")
        result = await scope.execute(call_id=f"s{i}", name="run_code", arguments={"code": code})
        settled_at = float(result.meta["logs"][0])
        deadline = time.monotonic() + 10
        while len(await stamps.all.remote()) <= i and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        latencies.append(((await stamps.all.remote())[i] - settled_at) * 1e3)
    return latencies


async def _hundred_native(scope):
    for i in range(100):
        await scope.execute(call_id=f"n{i}", name="echo", arguments={"text": str(i)})


if __name__ == "__main__":
    ensure_ray()
    empty, sub, settle = asyncio.run(main(20))
    write_section("code_empty", "Code Mode: an empty program (warm)", empty
                  + "\n\nEach CPython run is a fresh sandbox (every wall applied afresh), forked from a pre-imported "
                    "server. Both backends are measured without Ray in benchmarks/sandbox.py.")
    write_section("code_subcalls", "Code Mode: 100 sub-calls vs 100 native calls", sub)
    write_section("code_settle", "Code Mode: settlement to the in-flight sub-call's abort", settle)
    print(empty, sub, settle, sep="\n\n")
