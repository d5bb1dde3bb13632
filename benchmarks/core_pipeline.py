"""Per-call cost of the in-process pipeline, side by side with a bare ``await execute(args)``.

Run: ``python benchmarks/core_pipeline.py [--calls N]``. Writes its table to RESULTS.md.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import table, write_section  # noqa: E402

from dsh_actors import InMemoryRegistry, accept, define_tool, text_block  # noqa: E402

echo = define_tool(
    name="echo", description="echo", parameters={"text": {"type": "string", "required": True}},
    execute=lambda args, ctx: [text_block(args["text"])],
)
ARGS = {"text": "hello"}


async def pre(execution, call_next):
    return await call_next()


async def around(execution, call_next):
    return await call_next()


async def post(execution, result, call_next):
    return accept()


def observer(execution, result):
    return None


def registry(pre_n: int, around_n: int, post_n: int, observers: int) -> InMemoryRegistry:
    reg = InMemoryRegistry()
    reg.register(echo)
    for _ in range(pre_n):
        reg.on("tools/pre-execute", pre)
    for _ in range(around_n):
        reg.on("tools/execute", around)
    for _ in range(post_n):
        reg.on("tools/post-execute", post)
    for _ in range(observers):
        reg.on("tools/result", observer)
    return reg


async def per_call_us(make_call, calls: int, rounds: int = 5) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        for i in range(calls):
            await make_call(i)
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


async def main(calls: int) -> list[list[str]]:
    async def bare(i):
        return await echo.execute(ARGS, None)

    configs = [
        ("no listeners", registry(0, 0, 0, 0)),
        ("1 pre + 1 post", registry(1, 0, 1, 0)),
        ("5 listeners (2 pre, 1 around, 1 post, 1 observer)", registry(2, 1, 1, 1)),
    ]
    base = await per_call_us(bare, calls)
    rows = [["bare `await echo.execute(args)`", f"{base:.1f}", "1.00×", "—"]]
    for label, reg in configs:
        async def run(i, reg=reg):
            return await reg.execute({"call_id": str(i), "name": "echo", "arguments": ARGS})
        cost = await per_call_us(run, calls)
        rows.append([label, f"{cost:.1f}", f"{cost / base:.2f}×", f"{cost - base:.1f}"])
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=20_000)
    options = parser.parse_args()
    rows = asyncio.run(main(options.calls))
    body = table(["configuration", "µs per call (median of 5)", "ratio to bare", "overhead µs"], rows)
    body += (f"\n\n{options.calls} sequential calls per round on one event loop. The bare call already "
             "includes argument validation (define_tool's execute); the overhead is the pipeline's.")
    write_section("core_pipeline", "Core pipeline: per-call cost in one process", body)
    print(body)
