"""A model step of 8 I/O-bound reads (100 ms each): parallel vs sequential, side by side.

Run: ``python benchmarks/parallel_step.py``. The same tool body twice on one registry: once
declaring ``is_concurrency_safe`` (the step runs the 8 calls at once), once without (the
step runs them one after another). Writes the table to RESULTS.md; goal ≥ 6× faster.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import table, write_section  # noqa: E402

from dsh_actors import define_tool, text_block  # noqa: E402
from dsh_actors.runtime import ToolRegistry, ensure_ray  # noqa: E402
from dsh_actors.runtime.session.client import SessionLog  # noqa: E402
from dsh_actors.runtime.step import agent_step  # noqa: E402


async def read(args, ctx):
    await asyncio.sleep(0.1)  # an I/O-bound read: a file on a network disk, an HTTP API
    return [text_block(f"contents of {args['path']}")]


PARAMETERS = {"path": {"type": "string", "required": True}}
parallel_read = define_tool(name="read_parallel", description="read", parameters=PARAMETERS, execute=read,
                            is_concurrency_safe=lambda args: True)
sequential_read = define_tool(name="read_sequential", description="read", parameters=PARAMETERS, execute=read)


async def main(rounds: int = 5) -> None:
    registry = ToolRegistry.connect("bench-parallel-step")
    await registry.register(parallel_read)
    await registry.register(sequential_read)
    scope = registry.scope("reader")
    folder = tempfile.mkdtemp(prefix="dsh-bench-step-")
    session = SessionLog.open(f"bench-step-{os.getpid()}", os.path.join(folder, "step.log"))
    timings: dict[str, list[float]] = {"read_sequential": [], "read_parallel": []}
    for round_ in range(rounds + 1):  # the first round warms the executors and the plans
        for name in timings:
            calls = [{"call_id": f"{name}-{round_}-{i}", "name": name, "arguments": {"path": f"/data/{i}.txt"}}
                     for i in range(8)]
            start = time.perf_counter()
            results = await agent_step(scope, session, calls)
            elapsed = (time.perf_counter() - start) * 1e3
            assert all(not r.is_error for r in results), results
            if round_:
                timings[name].append(elapsed)
    await session.close()
    registry.shutdown()
    sequential = statistics.median(timings["read_sequential"])
    parallel = statistics.median(timings["read_parallel"])
    text = table(["step of 8 reads (100 ms each)", "ms (median of 5)", "speed-up"], [
        ["sequential (no classifier: each call exclusive)", f"{sequential:.0f}", "1.00×"],
        ["parallel (is_concurrency_safe → True)", f"{parallel:.0f}", f"{sequential / parallel:.2f}×"],
    ]) + ("\n\nGoal: ≥ 6×. Both rows run the full pipeline on the executors and append one "
          "`tool/result` per call to a session log (fsync always); the ideal is 8× (800 vs 100 ms).")
    write_section("parallel_step", "Parallel native calls: a step of 8 I/O-bound reads", text)
    print(text)


if __name__ == "__main__":
    ensure_ray()
    asyncio.run(main())
