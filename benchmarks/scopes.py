"""Agent scopes: what one costs to create and to keep, per hosting, side by side in one run.

Run: ``python benchmarks/scopes.py [--dedicated 20] [--shared 1000 10000]``. For each
count of agents: creation time of each scope (its first request, after which it exists
in its host: sequential, p50 and max), its first view (``visible()``, which composes
its plan), the total time, and the memory of every scope host plus the registry actor
(PSS, Linux). Goal for ``shared``: ≤ 5 ms per scope and ≤ 2 GiB for 10,000.
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
from runtime_calls import echo, pss_mb  # noqa: E402

import ray  # noqa: E402

from dsh_actors.runtime import ToolRegistry, ensure_ray  # noqa: E402


async def measure(hosting: str, count: int) -> list[str]:
    registry = ToolRegistry.connect(f"bench-scopes-{hosting}-{count}", scope_hosting=hosting)
    await registry.register(echo)
    link = registry._link
    created, viewed = [], []
    start_all = time.perf_counter()
    for i in range(count):
        agent = f"agent-{i}"
        start = time.perf_counter()
        await link.call_scope(agent, "ping")  # the scope exists once its host answered
        created.append((time.perf_counter() - start) * 1e3)
        start = time.perf_counter()
        assert [d.name for d in await registry.scope(agent).visible()] == ["echo"]
        viewed.append((time.perf_counter() - start) * 1e3)
    total_s = time.perf_counter() - start_all
    hosts = await registry._handle().scope_handles.remote()
    pids = {await h.__ray_call__.remote(lambda self: os.getpid()) for h in [*hosts, registry._handle()]}
    memory_mb = sum(pss_mb(pid) for pid in pids)
    live = len(await registry._handle().scopes.remote())
    registry.shutdown()
    assert live == count
    return [hosting, f"{count:,}", str(len(hosts)), f"{statistics.median(created):.2f}", f"{max(created):.0f}",
            f"{statistics.median(viewed):.2f}", f"{total_s:.1f}", f"{memory_mb:,.0f}",
            f"{memory_mb * 1024 / count:,.0f}"]


async def main(dedicated: int, shared: list[int]) -> str:
    rows = [await measure("dedicated", dedicated)]
    for count in shared:
        rows.append(await measure("shared", count))
    return table(["hosting", "agent scopes", "host actors", "create p50 ms", "create max ms", "first view p50 ms",
                  "total s", "hosts + registry PSS MB", "KB per scope"], rows) + (
        "\n\nCreated one after another from one driver: *create* is the scope's first request (its host makes "
        "it), *first view* the `visible()` that follows (its plan, composed by the host). Memory is the PSS of "
        "every scope host and the registry actor after all scopes exist. Goal for `shared`: ≤ 5 ms per scope "
        "and ≤ 2 GiB for 10,000.")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--dedicated", type=int, default=20)
    parser.add_argument("--shared", type=int, nargs="*", default=[1000, 10000])
    options = parser.parse_args()
    ensure_ray()
    text = asyncio.run(main(options.dedicated, options.shared))
    write_section("scopes", "Agent scopes: dedicated vs shared hosting", text)
    print(text)
    ray.shutdown()
