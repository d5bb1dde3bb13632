"""The MCP gateway on three nodes: agents' environments spread over the nodes, each agent in
one environment from every replica, and a node removed while calls run.

Run: ``python benchmarks/gateway_nodes.py``. Starts a three-node cluster on loopback
(``ray.cluster_utils``), a registry with the reference tools in gateway environments (each
agent's calls in an environment of its own, started on the node of the replica that took its
first call), and the gateway with three replicas, one per node, all on one port (the kernel
spreads the connections). Twenty-four agents then call ``bash`` through the official ``mcp``
client, a new connection per call, all at once:

1. **spread** — each agent's calls append to its environment's private ``/tmp``: one line per
   call in one file means one environment served all of them, whichever replica took each;
   where the environments run is read from each node's environment host;
2. **a node removed** (``cluster.remove_node``: its raylet, replica, environment host and
   environments go) while every agent's calls run: each call is answered once, with its
   result, a coded error, or — a call whose replica died under it — a dropped connection;
3. **after** — every agent's next calls run, those that lived on the removed node in a new
   environment on a live one.

Writes a table to RESULTS.md (``gateway_nodes``).
"""

from __future__ import annotations

import asyncio
import collections
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
sys.path.insert(0, str(Path(__file__).resolve().parent))
from _cluster import local_cluster  # noqa: E402
from _results import table, write_section  # noqa: E402

import ray  # noqa: E402

from dsh_actors import ToolRegistry  # noqa: E402
from dsh_actors.runtime.envhost import env_id_of  # noqa: E402
from dsh_actors.runtime.wire import DEFAULT_NAMESPACE, env_host_name  # noqa: E402
from dsh_actors.serve import GatewayConfig, serve_mcp, stop_mcp  # noqa: E402
from dsh_actors.serve.environments import GatewayEnvironments  # noqa: E402
from dsh_actors.tools import AgentWorkspaces, reference_tools  # noqa: E402
from tool_server import free_port  # noqa: E402

AGENTS = 24
CALLS = 6
"""Calls per agent in each phase."""
T = 120


async def bash(url: str, agent: str, command: str) -> tuple[str, str, float]:
    """One call on a connection of its own: (outcome, text, seconds). The outcome is ``ok``,
    the result's error code, or ``dropped: <exception>`` when no result came back."""
    from mcp import Client

    started = time.monotonic()
    try:
        async with Client(url.format(agent=agent)) as client:
            result = await client.call_tool("bash", {"command": command}, read_timeout_seconds=T)
    except Exception as exc:  # noqa: BLE001 - counted: the connection went with its replica
        return f"dropped: {type(exc).__name__}", "", time.monotonic() - started
    text = "\n".join(block.text for block in result.content).strip()
    code = (result.meta or {}).get("dsh", {}).get("error", {}).get("code") if result.is_error else None
    return code or ("ok" if not result.is_error else "error"), text, time.monotonic() - started


async def wave(url: str, agents: list[str], command: str, calls: int) -> dict[str, list[tuple[str, str, float]]]:
    """Every agent's ``calls`` calls, one after another for each agent, all agents at once."""
    async def one(agent: str) -> list[tuple[str, str, float]]:
        return [await bash(url, agent, command.format(agent=agent, k=k)) for k in range(calls)]

    answers = await asyncio.gather(*(one(agent) for agent in agents))
    return dict(zip(agents, answers))


def placement(registry: str, agents: list[str]) -> dict[str, list[str]]:
    """agent -> the nodes whose environment host runs its environment now."""
    where: dict[str, list[str]] = {agent: [] for agent in agents}
    ids = {env_id_of(f"{registry}/{agent}"): agent for agent in agents}
    for node in ray.nodes():
        if not node["Alive"]:
            continue
        try:
            host = ray.get_actor(env_host_name(node["NodeID"]), namespace=DEFAULT_NAMESPACE)
            running = ray.get(host.running.remote(), timeout=T)
        except Exception:  # noqa: BLE001 - no host made there, or it is gone
            continue
        for env_id in running:
            if env_id in ids:
                where[ids[env_id]].append(node["NodeID"])
    return where


def outcomes(answers: dict[str, list[tuple[str, str, float]]]) -> collections.Counter[str]:
    return collections.Counter(outcome for calls in answers.values() for outcome, _, _ in calls)


def samples(answers: dict[str, list[tuple[str, str, float]]]) -> dict[str, str]:
    """One text of each outcome but ``ok`` (what a failed call said)."""
    found: dict[str, str] = {}
    for calls in answers.values():
        for outcome, text, _ in calls:
            if outcome != "ok":
                found.setdefault(outcome, text[:300])
    return found


def describe(counts: collections.Counter[str]) -> str:
    return ", ".join(f"{n} {outcome}" for outcome, n in counts.most_common())


def main() -> str:
    root = Path(tempfile.mkdtemp(prefix="dsh-gw-nodes-"))
    agents = [f"agent-{i:02d}" for i in range(AGENTS)]
    for agent in agents:
        (root / agent).mkdir()
    rows: list[list[str]] = []
    with local_cluster(3) as cluster:
        name = "bench-gateway-nodes"
        registry = ToolRegistry.connect(name, scope_hosting="shared")
        for definition in reference_tools(GatewayEnvironments(AgentWorkspaces(root), name)):
            registry.register(definition).result(T)
        url = serve_mcp(GatewayConfig(name), port=free_port(), num_replicas=3, max_replicas_per_node=1)
        short = {node["NodeID"]: f"node {i}" for i, node in enumerate(sorted(ray.nodes(), key=lambda n: n["NodeID"]))}
        try:
            # 1. spread: every agent's calls at once, each on a new connection
            started = time.monotonic()
            first = asyncio.run(wave(url, agents, "echo {agent}-{k} >> /tmp/calls; wc -l < /tmp/calls", CALLS))
            spent = time.monotonic() - started
            where = placement(name, agents)
            one_env = sum(calls[-1][1] == str(CALLS) for calls in first.values())  # every line in one /tmp
            per_node = collections.Counter(short[nodes[0]] for nodes in where.values() if len(nodes) == 1)
            latencies = [s for calls in first.values() for _, _, s in calls]
            rows.append([f"{AGENTS} agents × {CALLS} calls, all at once", describe(outcomes(first)),
                         f"{one_env} of {AGENTS} agents saw all {CALLS} of their calls in one environment; "
                         f"environments per node: {', '.join(f'{n} {k}' for k, n in sorted(per_node.items()))}; "
                         f"{len(latencies) / spent:.1f} calls/s, p50 {statistics.median(latencies) * 1000:.0f} ms"])
            # 2. a node removed while every agent's calls run
            # (not the driver's node, nor the registry's: what they hold is not this run's question)
            kept = {ray.get_runtime_context().get_node_id()} | {
                actor["Address"]["NodeID"] for actor in ray._private.state.actors().values()
                if actor["State"] == "ALIVE" and actor["ActorClassName"] in ("RegistryService", "ServeController")}
            counts = collections.Counter(nodes[0] for nodes in where.values() if nodes)
            victim_id = max((n for n in counts if n not in kept), key=lambda n: counts[n])
            victim = next(node for node in cluster.worker_nodes if node.node_id == victim_id)
            lived_there = sorted(agent for agent, nodes in where.items() if victim_id in nodes)

            async def with_a_node_removed() -> dict[str, list[tuple[str, str, float]]]:
                calls = asyncio.ensure_future(wave(url, agents, "sleep 0.5; echo {agent}-{k} >> /tmp/calls", CALLS))
                await asyncio.sleep(1.5)
                await asyncio.to_thread(cluster.remove_node, victim, False)  # as a crash: no grace
                return await calls

            second = asyncio.run(with_a_node_removed())
            print("after the removal:", samples(second), file=sys.stderr)
            answered = sum(len(calls) for calls in second.values())
            rows.append([f"the same, {short[victim_id]} removed after 1.5 s "
                         f"({len(lived_there)} agents' environments there)", describe(outcomes(second)),
                         f"{answered} of {AGENTS * CALLS} calls answered once each"])
            # 3. after: every agent's next calls
            third = asyncio.run(wave(url, agents, "echo {agent} >> /tmp/after; wc -l < /tmp/after", 2))
            print("then:", samples(third), file=sys.stderr)
            where = placement(name, agents)
            moved = sum(1 for agent in lived_there if where[agent] and victim_id not in where[agent])
            whole = sum(calls[-1][0] == "ok" for calls in third.values())
            rows.append([f"then {2} calls per agent", describe(outcomes(third)),
                         f"{whole} of {AGENTS} agents' last call ran; {moved} of the {len(lived_there)} from "
                         f"{short[victim_id]} now in an environment on a live node; every agent in at most one "
                         f"environment: {all(len(nodes) <= 1 for nodes in where.values())}"])
        finally:
            stop_mcp(shutdown_serve=True)
            registry.shutdown()
    return table(["phase", "outcomes", "seen from outside"], rows) + (
        "\n\nA three-node cluster on one machine (`ray.cluster_utils`, loopback, 1 CPU each), the gateway with "
        "three replicas (one per node, `max_replicas_per_node=1`, all on one port: the kernel spreads the "
        "connections), `GatewayEnvironments` with the reference tools, the official `mcp` client making a new "
        "connection per call. One environment per agent is read from inside (its private `/tmp` holds every "
        "call's line) and from each node's environment host. `dropped`: the call's connection went with its "
        "replica (the client gets no answer; MCP has no way to resume a request); `ENV_GONE`: its "
        "environment went with the node while the call ran or was sent, so it may have run there and is not "
        "sent again; an agent hears it at most once from each replica that held its environment"
        ", and its next call on that replica runs in a new environment on a live node.")


if __name__ == "__main__":
    body = main()
    write_section("gateway_nodes", "MCP gateway on three nodes: one environment per agent, a node removed", body)
    print(body)
