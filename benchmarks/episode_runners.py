"""The batch job on a 3-node cluster: how evenly episodes spread, whether their calls stay on
their runner's node, and what a runner killed mid-run costs.

Run: ``python benchmarks/episode_runners.py [--episodes 300]``. A ``ray.cluster_utils``
cluster of three nodes on this machine (loopback), one runner per node. Each episode makes
3 calls of a tool that waits 20 ms and writes a marker file naming the node it ran on (read
from outside, after the run). Goals: episodes per node within ±15 % of even; every call on
its runner's node; a runner killed mid-run costs no episode and none is reported twice.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cluster import local_cluster  # noqa: E402
from _results import table, write_section  # noqa: E402

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
import ray  # noqa: E402

from dsh_actors import define_tool, text_block  # noqa: E402
from dsh_actors.eval.job import run_episodes  # noqa: E402
from dsh_actors.eval.runners import RUNNER_PREFIX  # noqa: E402

CALLS = 3


def marking_tool(folder: str):
    def body(args, ctx):
        time.sleep(0.02)
        node = ray.get_runtime_context().get_node_id()
        Path(folder, f"{ctx.agent}.{args['n']}.{time.monotonic_ns()}").write_text(node)
        return [text_block(node)]
    return define_tool(name="mark", description="mark this node", parameters={"n": {"type": "number"}},
                       execute=body)


def episodes(count: int, prefix: str):
    return [{"id": f"{prefix}-{i:05d}", "turns": [{"calls": [{"name": "mark", "arguments": {"n": n}}]}
                                                   for n in range(CALLS)]} for i in range(count)]


def run(count: int, prefix: str, folder: Path, kill: bool) -> tuple[list, dict, float, int]:
    marks = folder / prefix
    marks.mkdir()
    killed = []

    def killer():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(list(marks.iterdir())) < count // 3:
            time.sleep(0.05)
        runners = [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].startswith(RUNNER_PREFIX)]
        handle = ray.get_actor(runners[-1]["name"], namespace=runners[-1]["namespace"])
        os.kill(ray.get(handle.pid.remote()), signal.SIGKILL)
        killed.append(1)

    thread = threading.Thread(target=killer) if kill else None
    if thread is not None:
        thread.start()

    async def go():
        return [r async for r in run_episodes(episodes(count, prefix), tools=[marking_tool(str(marks))],
                                              reference_tools=False, in_flight=96, runners_per_node=1)]
    start = time.monotonic()
    reports = asyncio.run(go())
    wall = time.monotonic() - start
    if thread is not None:
        thread.join()
    ran: dict[str, set[str]] = collections.defaultdict(set)
    for path in marks.iterdir():
        ran[path.name.split(".")[0]].add(path.read_text())
    return reports, ran, wall, len(killed)


def main(count: int) -> None:
    rows = []
    with local_cluster(3):
        with tempfile.TemporaryDirectory() as folder:
            for prefix, kill in (("even", False), ("killed", True)):
                reports, ran, wall, killed = run(count, prefix, Path(folder), kill)
                ids = [r.id for r in reports]
                per_node = collections.Counter(r.node for r in reports if r.attempts == 1)
                even = count / 3
                spread = max(abs(n - even) / even for n in per_node.values()) if per_node else 1.0
                first = [r for r in reports if r.attempts == 1]  # a rerun's first calls ran by its dead runner
                on_node = sum(1 for r in first if ran[r.agent] and all(n.startswith(r.node or "?")
                                                                       for n in ran[r.agent]))
                rows.append([f"{count} episodes" + (", a runner SIGKILLed mid-run" if kill else ""),
                             f"{len(reports)} ({len(set(ids))} distinct)",
                             " / ".join(str(per_node[n]) for n in sorted(per_node)),
                             f"±{spread * 100:.0f} %" if not kill else "—",
                             f"{on_node / len(first) * 100:.1f} %",
                             str(sum(1 for r in reports if r.attempts == 2)),
                             str(sum(1 for r in reports if r.status != "ok")), f"{wall:.1f}"])
                print(rows[-1], flush=True)
    body = table(["run", "reports", "episodes per node (first attempt)", "vs even", "episodes whose every call "
                  "ran on their runner's node (run once)", "ran again", "failed", "wall s"], rows)
    body += ("\n\nThree nodes on one machine (`ray.cluster_utils`, loopback), one runner per node, 96 episodes in "
             "flight. Where a call ran is read from marker files the tool writes (the node id), after the run. "
             "In the killed run one runner's process is SIGKILLed once a third of the calls are done: what it held "
             "runs again on another runner (`attempts: 2`), and the count of distinct reports shows none was lost "
             "or reported twice. Goals: within ±15 % of even; every call on its runner's node.")
    write_section("episode_runners", "The batch job on 3 nodes: spread, locality, a runner killed", body)
    print(body)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=300)
    main(parser.parse_args().episodes)
