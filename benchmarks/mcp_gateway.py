"""The MCP gateway (dsh_actors.serve) vs a bare Ray Serve tool endpoint, side by side in one run.

Run: ``python benchmarks/mcp_gateway.py``. Writes to RESULTS.md: the same two tools — a
CPU-trivial echo at 64 calls in flight, and a body that awaits 100 ms at 200 in flight — called
over HTTP through Serve's proxy (a) as MCP ``tools/call`` requests to the gateway (one replica;
the registry's whole pipeline as an agent on every call) and (b) as plain JSON POSTs to a Serve
deployment of one replica running the same bodies with no policy at all (what Ray's MCP
examples do). One ``aiohttp`` session sends both, JSON-RPC bodies built once. Throughput in
calls/s, p50, and the ratio gateway / bare.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import table, write_section  # noqa: E402

from dsh_actors import ToolRegistry, define_tool, text_block  # noqa: E402
from dsh_actors.runtime import ensure_ray  # noqa: E402

from tool_server import free_port  # noqa: E402

CALLS = {"echo": (64, 2000), "wait": (200, 2000)}
"""tool -> (in flight, calls per round)."""


async def echoes(args, ctx):
    return [text_block(args.get("text", ""))]


async def waits(args, ctx):
    await asyncio.sleep(0.1)
    return [text_block("done")]


TOOLS = [define_tool(name="echo", description="echo", parameters={"text": {"type": "string"}}, execute=echoes),
         define_tool(name="wait", description="waits 100 ms", parameters={}, execute=waits)]


def bare_application():
    """The baseline: the same bodies behind a Serve deployment, POST /<tool> with JSON arguments."""
    from ray import serve
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    def build():
        async def call(request: Request) -> JSONResponse:
            args = await request.json()
            body = echoes if request.path_params["tool"] == "echo" else waits
            return JSONResponse({"content": await body(args, None), "is_error": False})
        return Starlette(routes=[Route("/{tool}", call, methods=["POST"])])

    @serve.deployment(name="BareTools", num_replicas=1, ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1000)
    @serve.ingress(build)
    class BareTools:
        pass

    return BareTools.bind()


async def drive(send, tool: str, in_flight: int, calls: int) -> tuple[float, float]:
    """``calls`` calls of ``tool`` with ``in_flight`` at once: (calls/s, p50 ms)."""
    latencies: list[float] = []
    left = iter(range(calls))

    async def lane() -> None:
        for _ in left:
            started = time.perf_counter()
            await send(tool)
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(lane() for _ in range(in_flight)))
    wall = time.perf_counter() - started
    return calls / wall, statistics.median(latencies) * 1000


async def measure(mcp_url: str, bare_url: str, rounds: int = 3) -> dict[tuple[str, str], list[tuple[float, float]]]:
    import aiohttp

    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    bodies = {tool: json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                "params": {"name": tool, "arguments": {"text": "x"} if tool == "echo" else {}}})
              for tool in CALLS}
    arguments = {tool: json.dumps({"text": "x"} if tool == "echo" else {}) for tool in CALLS}
    seen: dict[tuple[str, str], list[tuple[float, float]]] = {}
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as http:
        async def gateway(tool: str) -> None:
            async with http.post(mcp_url, data=bodies[tool], headers=headers) as answer:
                reply = await answer.json(content_type=None)
                assert answer.status == 200 and reply["result"]["isError"] is False, reply

        async def bare(tool: str) -> None:
            async with http.post(f"{bare_url}/{tool}", data=arguments[tool], headers=headers) as answer:
                reply = await answer.json()
                assert answer.status == 200 and reply["is_error"] is False, reply

        for tool, (in_flight, calls) in CALLS.items():
            await drive(gateway, tool, in_flight, 200)  # warm: connections, channels, plans
            await drive(bare, tool, in_flight, 200)
            for _ in range(rounds):  # interleaved, so both meet the same machine
                for side, send in (("gateway", gateway), ("bare", bare)):
                    seen.setdefault((tool, side), []).append(await drive(send, tool, in_flight, calls))
    return seen


def main() -> None:
    from ray import serve

    from dsh_actors.serve import GatewayConfig, serve_mcp, stop_mcp

    ensure_ray()
    port = free_port()
    registry = ToolRegistry.connect("mcp-gateway-bench")
    try:
        for definition in TOOLS:
            registry.register(definition).result(120)
        mcp_url = serve_mcp(GatewayConfig(registry.name), port=port).format(agent="bench-agent")
        serve.run(bare_application(), name="bare-tools", route_prefix="/bare")
        seen = asyncio.run(measure(mcp_url, f"http://127.0.0.1:{port}/bare"))
    finally:
        try:
            serve.delete("bare-tools")
            stop_mcp(shutdown_serve=True)
        finally:
            registry.shutdown()
    rows = []
    for tool, (in_flight, _) in CALLS.items():
        label = "CPU-trivial echo" if tool == "echo" else "100 ms tool"
        gateway = statistics.median(r for r, _ in seen[(tool, "gateway")])
        bare = statistics.median(r for r, _ in seen[(tool, "bare")])
        rows.append([label, str(in_flight), f"{bare:,.0f}", f"{gateway:,.0f}", f"{gateway / bare:.2f}×",
                     f"{statistics.median(p for _, p in seen[(tool, 'bare')]):.1f}",
                     f"{statistics.median(p for _, p in seen[(tool, 'gateway')]):.1f}"])
    body = table(["tool", "in flight", "bare Serve calls/s", "gateway calls/s", "gateway / bare",
                  "bare p50 ms", "gateway p50 ms"], rows)
    body += ("\n\nBoth behind the same Serve proxy on this node, one replica each, the same client session; "
             "median of 3 interleaved rounds. The gateway's call is an MCP `tools/call` (JSON-RPC, stateless, "
             "JSON response) running the registry's pipeline as an agent on the registry's executors; the bare "
             "deployment runs the body in its replica with no policy, no scope and no executor hop.")
    write_section("mcp_gateway", "MCP gateway vs a bare Serve tool endpoint", body)
    print(body)


if __name__ == "__main__":
    main()
