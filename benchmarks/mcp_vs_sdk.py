"""The MCP gateway (dsh_actors.serve) vs the official SDK's own server, side by side in one run.

Run: ``python benchmarks/mcp_vs_sdk.py [--calls N] [--memory-calls N] [--memory-only]``. Writes to RESULTS.md
(section ``mcp_vs_sdk``): the same two tools — a CPU-trivial echo and a body that awaits
100 ms — served (a) by the SDK's ``MCPServer`` in one process (uvicorn, stateless Streamable
HTTP, JSON responses: what a user of the SDK runs) and (b) by the gateway with 1 and 2
replicas, each taking HTTP itself on the gateway's port (``ingress="direct"``, the default;
the registry's whole pipeline as an agent on every call, in the replica's process), all
driven by the official ``mcp`` client at 50 and 500 calls in flight (50 clients, each with
``in flight / 50`` calls open at once). Calls/s (median of interleaved rounds) and the ratio
to the SDK's server; then each server's resident memory before, halfway through and after
``--memory-calls`` more echo calls (RSS read from ``/proc``, every process of the server
summed). ``--memory-only``: only that, for the SDK's server and one replica (section
``mcp_memory``). ``--ingress proxy``: the gateway through Serve's HTTP proxy instead.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import table, write_section  # noqa: E402

from dsh_actors import ToolRegistry  # noqa: E402
from dsh_actors.runtime import ensure_ray  # noqa: E402

from mcp_gateway import TOOLS  # noqa: E402  (the same two tools as the gateway's other benchmark)
from tool_server import free_port  # noqa: E402

LEVELS = (50, 500)
INGRESS_TEXT = {
    "direct": "each replica taking HTTP itself on the gateway's port (two replicas share it; the kernel spreads "
              "the connections) and running the calls in its own process",
    "proxy": "its requests through Serve's HTTP proxy to its replicas, each call on the registry's executors",
}
CLIENTS = 50
CLIENT_BUSY: list[float] = []
"""Each measurement's share of its time that the client's thread (every client runs on this
process's one event loop) spent on the CPU."""

SDK_SERVER = '''
import asyncio, sys, uvicorn
from mcp.server.mcpserver import MCPServer
server = MCPServer("sdk-bench")

@server.tool()
async def echo(text: str = "") -> str:
    """echo"""
    return text

@server.tool()
async def wait() -> str:
    """waits 100 ms"""
    await asyncio.sleep(0.1)
    return "done"

app = server.streamable_http_app(stateless_http=True, json_response=True)
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
'''


def cpu_s(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes ``pids`` have used, from ``/proc``."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (OSError, IndexError, ValueError):
            pass
    return total / os.sysconf("SC_CLK_TCK")


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as handle:
                total += next(int(line.split()[1]) for line in handle if line.startswith("VmRSS:"))
        except (OSError, StopIteration):
            pass
    return total / 1024


async def drive(url: str, tool: str, in_flight: int, calls: int) -> float:
    """``calls`` calls of ``tool`` through :data:`CLIENTS` official clients, ``in_flight`` open at once: calls/s."""
    arguments = {"text": "x"} if tool == "echo" else {}
    left = iter(range(calls))
    async with _clients(url, min(CLIENTS, in_flight)) as clients:
        async def lane(client) -> None:
            for _ in left:
                result = await client.call_tool(tool, arguments)
                assert not result.is_error, result

        started, thread_started = time.perf_counter(), time.thread_time()
        await asyncio.gather(*(lane(clients[k % len(clients)]) for k in range(in_flight)))
        wall = time.perf_counter() - started
        CLIENT_BUSY.append((time.thread_time() - thread_started) / wall)
        return calls / wall


class _clients:
    def __init__(self, url: str, count: int) -> None:
        from contextlib import AsyncExitStack

        self.url, self.count, self.stack = url, count, AsyncExitStack()

    async def __aenter__(self):
        from mcp import Client

        return [await self.stack.enter_async_context(Client(self.url)) for _ in range(self.count)]

    async def __aexit__(self, *exc):
        await self.stack.aclose()


def replica_pids(proxies: bool = False) -> list[int]:
    """The gateway's replicas' pids (``proxies``: and Serve's HTTP proxies')."""
    import ray

    from dsh_actors.serve import APPLICATION

    pids = []
    for actor in ray.util.list_named_actors(all_namespaces=True):
        if (APPLICATION in actor["name"] and "McpGateway" in actor["name"]) or (
                proxies and "SERVE_PROXY_ACTOR" in actor["name"]):
            handle = ray.get_actor(actor["name"], namespace=actor["namespace"])
            pids.append(ray.get(handle.__ray_call__.remote(lambda self: os.getpid())))
    return pids


def main(calls: int, memory_calls: int, rounds: int, memory_only: bool = False, ingress: str = "direct") -> None:
    from dsh_actors.serve import GatewayConfig, serve_mcp, stop_mcp

    ensure_ray()
    sdk_port, serve_port = free_port(), free_port()
    sdk = subprocess.Popen([sys.executable, "-c", SDK_SERVER, str(sdk_port)])
    registry = ToolRegistry.connect("mcp-vs-sdk-bench")
    seen: dict[tuple[str, int, str], list[float]] = {}
    ratios: dict[tuple[str, int, str], list[float]] = {}
    cpu_per_call: dict[tuple[str, int, str], list[float]] = {}  # µs of the server's processes per call
    memory: dict[str, tuple[float, float]] = {}
    try:
        for definition in TOOLS:
            registry.register(definition).result(120)
        sdk_url = f"http://127.0.0.1:{sdk_port}/mcp"
        for replicas in ((1,) if memory_only else (1, 2)):
            gateway_url = serve_mcp(GatewayConfig(registry.name), port=serve_port, num_replicas=replicas,
                                    ingress=ingress).format(agent="bench-agent")
            servers = {"SDK server": sdk_url, f"gateway, {replicas} replica{'s' if replicas > 1 else ''}": gateway_url}
            processes = {"SDK server": [sdk.pid], f"gateway, {replicas} replica{'s' if replicas > 1 else ''}":
                         replica_pids(proxies=ingress == "proxy")}
            for tool in (() if memory_only else ("echo", "wait")):
                for in_flight in LEVELS:
                    for url in servers.values():
                        asyncio.run(drive(url, tool, in_flight, min(calls, 500)))  # warm
                    for _ in range(rounds):  # interleaved: both meet the same machine
                        rates = {}
                        for name, url in servers.items():
                            spent = cpu_s(processes[name])
                            rates[name] = asyncio.run(drive(url, tool, in_flight, calls))
                            cpu_per_call.setdefault((tool, in_flight, name), []).append(
                                (cpu_s(processes[name]) - spent) / calls * 1e6)
                        for name, rate in rates.items():
                            seen.setdefault((tool, in_flight, name), []).append(rate)
                        # Each round's ratio to the SDK's rate measured just before: a machine
                        # slower for a while slows both sides of a pair, not one side's median.
                        gateway = next(name for name in rates if name != "SDK server")
                        ratios.setdefault((tool, in_flight, gateway), []).append(rates[gateway] / rates["SDK server"])
            for name, url in servers.items():
                pids = [sdk.pid] if name == "SDK server" else replica_pids(proxies=ingress == "proxy")
                if name in memory:
                    continue
                before = rss_mb(pids)
                asyncio.run(drive(url, "echo", 50, memory_calls // 2))
                half = rss_mb(pids)
                asyncio.run(drive(url, "echo", 50, memory_calls - memory_calls // 2))
                memory[name] = (before, half, rss_mb(pids))
    finally:
        sdk.terminate()
        sdk.wait(30)
        try:
            stop_mcp(shutdown_serve=True)
        finally:
            registry.shutdown()
    memory_table = table(["server", "RSS MB before", f"after {memory_calls // 2:,} echo calls",
                          f"after {memory_calls:,}"],
                         [[name, *(f"{mb:.0f}" for mb in sizes)] for name, sizes in memory.items()])
    if memory_only:
        body = memory_table + (f"\n\nEach server's resident memory (read from `/proc`: the SDK's one process; the "
                               f"gateway's replica{(' and Serve' + chr(39) + 's HTTP proxy') if ingress == 'proxy' else ''}) before "
                               f"and after {memory_calls:,} calls of a CPU-trivial echo by the official `mcp` client "
                               "(50 clients, 50 in flight); the gateway with one replica, "
                               f"{INGRESS_TEXT[ingress]}, each call through the registry's pipeline as an agent. "
                               "Load average "
                               f"at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores.")
        write_section("mcp_memory", "MCP gateway and the SDK's server: memory over many calls", body)
        print(body)
        return
    rows = []
    for tool in ("echo", "wait"):
        for in_flight in LEVELS:
            sdk_rate = statistics.median(seen[(tool, in_flight, "SDK server")])
            row = [("CPU-trivial echo" if tool == "echo" else "100 ms tool"), str(in_flight), f"{sdk_rate:,.0f}"]
            for replicas in ("gateway, 1 replica", "gateway, 2 replicas"):
                rate = statistics.median(seen[(tool, in_flight, replicas)])
                each = ratios[(tool, in_flight, replicas)]
                row += [f"{rate:,.0f}", f"{statistics.median(each):.2f}× ({min(each):.2f}–{max(each):.2f})"]
            rows.append(row)
    body = table(["tool", "in flight", "SDK server calls/s", "gateway ×1 calls/s", "vs SDK", "gateway ×2 calls/s",
                  "vs SDK"], rows)
    names = ("SDK server", "gateway, 1 replica", "gateway, 2 replicas")
    body += "\n\n" + table(
        ["tool", "in flight", "SDK server µs CPU/call", "gateway ×1 µs CPU/call", "gateway ×2 µs CPU/call"],
        [[("CPU-trivial echo" if tool == "echo" else "100 ms tool"), str(in_flight),
          *(f"{statistics.median(cpu_per_call[(tool, in_flight, name)]):,.0f}" for name in names)]
         for tool in ("echo", "wait") for in_flight in LEVELS])
    body += "\n\n" + memory_table
    body += (f"\n\nThe official `mcp` client ({CLIENTS} clients, calls spread over them), {calls:,} calls per "
             f"measurement, median of {rounds} interleaved rounds (calls/s: the median rate; vs SDK: the median of "
             "each round's ratio to the SDK's rate measured just before it, and in brackets the lowest and highest of "
             "those ratios). The SDK's server is `MCPServer` under uvicorn, "
             f"one process, stateless JSON; the gateway: {INGRESS_TEXT[ingress]}, and each call runs the registry's "
             "pipeline as an agent. µs CPU/call: the CPU time of the server's processes (from `/proc`: the SDK's "
             "one process, the gateway's replicas) per call, median of the rounds; the client, in this process, "
             "shares the 2 cores and spends more than either: its one thread was on the CPU "
             f"{statistics.median(CLIENT_BUSY):.0%} of each measurement's time (median), so the rates are mostly "
             "how fast the client can go against each server. Load average at "
             f"the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores.")
    write_section("mcp_vs_sdk", "MCP gateway vs the official SDK's own server", body)
    print(body)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--memory-calls", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--memory-only", action="store_true",
                        help="only the memory over --memory-calls calls (SDK server, gateway with 1 replica)")
    parser.add_argument("--ingress", choices=["direct", "proxy"], default="direct")
    options = parser.parse_args()
    main(options.calls, options.memory_calls, options.rounds, options.memory_only, options.ingress)
