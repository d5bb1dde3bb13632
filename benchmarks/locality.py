"""Where calls run: the share made on a node that ran there, three nodes, callers on each.

Run: ``python benchmarks/locality.py``. Starts a three-node cluster on loopback
(``ray.cluster_utils``), a registry (one executor per node, its default), and a caller
actor pinned to each node; each caller makes calls of a tool whose body reports the node
it ran on, one at a time and 32 in flight. Writes to RESULTS.md the share of calls that ran
on their caller's node (goal ≥ 95 %), and the same with one node's executor killed for
good while its caller goes on (its calls run elsewhere until the registry's successor is
up, then come back).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cluster import local_cluster  # noqa: E402
from _results import table, write_section  # noqa: E402

import ray  # noqa: E402
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: E402

from dsh_actors import define_tool, text_block  # noqa: E402
from dsh_actors.runtime import ToolRegistry  # noqa: E402

where = define_tool(name="where", description="the node it ran on", parameters={},
                    execute=lambda a, c: [text_block(ray.get_runtime_context().get_node_id())])


@ray.remote(num_cpus=0)
class Caller:
    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()

    async def calls(self, registry, count: int, in_flight: int) -> list[str]:
        answers: list[str] = []
        numbers = iter(range(count))

        async def worker() -> None:
            for i in numbers:
                result = await registry.execute(call_id=f"c{i}", name="where", arguments={})
                answers.append("failed" if result.is_error else result.text)

        await asyncio.gather(*(worker() for _ in range(in_flight)))
        return answers


def main() -> str:
    with local_cluster(3):
        registry = ToolRegistry.connect("bench-locality")
        registry.register(where).result(120)
        nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        callers = {node: Caller.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
                   for node in nodes}
        assert {ray.get(c.node.remote(), timeout=120) for c in callers.values()} == set(nodes)
        rows = []
        for in_flight in (1, 32):
            total = same = 0
            for node, caller in callers.items():
                answers = ray.get(caller.calls.remote(registry, 300, in_flight), timeout=600)
                total += len(answers)
                same += sum(a == node for a in answers)
            rows.append([f"3 nodes, a caller on each, {in_flight} in flight", str(total), f"{100 * same / total:.1f} %"])
        # One node's executor killed for good: its caller's calls go elsewhere, then come back.
        node = nodes[-1]
        pairs = ray.get(registry._handle().executor_nodes.remote(), timeout=120)
        victim = next(h for h, at in pairs if at == node)
        ray.kill(victim)
        started = time.monotonic()
        answers = ray.get(callers[node].calls.remote(registry, 300, 8), timeout=600)
        spent = time.monotonic() - started
        back = ray.get(callers[node].calls.remote(registry, 300, 8), timeout=600)
        rows.append(["its executor killed for good, the next 300 calls", str(len(answers)),
                     f"{100 * sum(a == node for a in answers) / len(answers):.1f} % "
                     f"({sum(a == 'failed' for a in answers)} failed, {spent:.1f} s)"])
        rows.append(["the 300 after (its successor up)", str(len(back)),
                     f"{100 * sum(a == node for a in back) / len(back):.1f} %"])
        registry.shutdown()
    return table(["calls", "made", "ran on the caller's node"], rows) + (
        "\n\nA three-node cluster on one machine (`ray.cluster_utils`, loopback), one executor per node (the "
        "default), a caller actor pinned to each node. Goal ≥ 95 % on the caller's node. Before the caller side "
        "routed by node, one agent's calls ran 42 % on its node (33 % from an actor pinned to a worker node).")


if __name__ == "__main__":
    body = main()
    write_section("locality", "Ray runtime: calls stay on their caller's node", body)
    print(body)
