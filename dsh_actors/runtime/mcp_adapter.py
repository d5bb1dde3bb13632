"""MCP servers as tool plugins, over the official ``mcp`` SDK (``pip install dsh-actors[mcp]``).

``await McpPlugin.connect(registry, "files", server)`` — ``server`` is a URL (streamable
HTTP) or ``{"command": ..., "args": [...], "env": {...}}`` (stdio) — starts one actor
that owns the connection, discovers the server's tools and registers each as a raw
JSON-Schema tool named ``<name>.<tool>`` through one plugin handle. Calls go through the
whole pipeline; their bodies (in executors, wherever they run) ask the connection
actor. A server error (``is_error``) becomes an ``MCP_ERROR`` result, a call past its
timeout a ``TOOL_TIMEOUT`` result. ``close()`` disposes the tools and ends the
connection (a stdio server process exits with it).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any, Mapping

import ray

from ..core.errors import HarnessError, ToolTimeoutError
from .client import Plugin, ToolRegistry
from .errors import RAY_ERROR, translate

__all__ = ["McpError", "McpPlugin", "McpServerActor"]


class McpError(HarnessError):
    """An MCP server answered a call with an error, or the connection failed."""

    code = "MCP_ERROR"


def _server(spec: str | Mapping[str, Any]) -> Any:
    from mcp import StdioServerParameters

    if isinstance(spec, str):
        if not spec.startswith(("http://", "https://")):
            raise ValueError("an MCP server is a streamable-HTTP URL or {'command': ..., 'args': [...]}")
        return spec
    if not isinstance(spec, Mapping) or not isinstance(spec.get("command"), str):
        raise ValueError("a stdio MCP server needs {'command': str, 'args': [...], 'env'?: {...}}")
    return StdioServerParameters(command=spec["command"], args=list(spec.get("args", [])), env=spec.get("env"))


@ray.remote
class McpServerActor:
    """Owns one MCP connection. anyio scopes must exit in the task that entered them, so
    one long-lived task holds the client and serves requests from a queue."""

    def __init__(self) -> None:
        self._requests: asyncio.Queue[Any] = asyncio.Queue()
        self._ready: asyncio.Future[Any] | None = None
        self._task: asyncio.Task[Any] | None = None

    async def start(self, spec: Any, read_timeout_s: float) -> list[dict[str, Any]]:
        """Connect and list the server's tools: ``[{name, description, parameters}]``."""
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._task = loop.create_task(self._serve(spec, read_timeout_s))
        return await self._ready

    async def _serve(self, spec: Any, read_timeout_s: float) -> None:
        import anyio
        from mcp import Client

        assert self._ready is not None
        try:
            async with Client(_server(spec), read_timeout_seconds=read_timeout_s) as client:
                listed = await client.list_tools()
                self._ready.set_result([
                    {"name": t.name, "description": t.description or "",
                     "parameters": t.input_schema if isinstance(t.input_schema, dict) else {"type": "object"}}
                    for t in listed.tools
                ])
                async with anyio.create_task_group() as group:
                    while True:
                        request = await self._requests.get()
                        if request is None:
                            group.cancel_scope.cancel()
                            return
                        group.start_soon(self._call, client, *request)
        except Exception as exc:
            if not self._ready.done():
                self._ready.set_exception(McpError(f"cannot connect to the MCP server: {exc}"))

    @staticmethod
    async def _call(client: Any, name: str, arguments: Any, timeout_s: float, future: asyncio.Future[Any]) -> None:
        import anyio

        try:
            with anyio.fail_after(timeout_s):
                result = await client.call_tool(name, arguments)
            content = [block.model_dump(mode="json", exclude_none=True) for block in result.content]
            future.set_result({"content": content, "is_error": bool(result.is_error)})
        except TimeoutError:
            future.set_result({"timeout": timeout_s})
        except Exception as exc:
            future.set_result({"failure": str(exc) or type(exc).__name__})

    async def call(self, name: str, arguments: Any, timeout_s: float) -> dict[str, Any]:
        if self._task is None or self._task.done():
            return {"failure": "the MCP connection is closed"}
        future = asyncio.get_running_loop().create_future()
        await self._requests.put((name, arguments, timeout_s, future))
        return await future

    async def close(self) -> None:
        if self._task is not None and not self._task.done():
            await self._requests.put(None)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._task, 10)


def _tool(server: str, actor: Any, listed: Mapping[str, Any], prefix: str, timeout_s: float) -> dict[str, Any]:
    remote_name = listed["name"]

    async def execute(args: Any, ctx: Any) -> Any:
        from ..core.jsonvalue import thaw

        reply = await actor.call.remote(remote_name, thaw(args), timeout_s)
        if "timeout" in reply:
            raise ToolTimeoutError(reply["timeout"] * 1000)
        if "failure" in reply:
            raise McpError(f'MCP server "{server}" failed on {remote_name}: {reply["failure"]}')
        if reply["is_error"]:
            text = "\n".join(b.get("text", "") for b in reply["content"] if b.get("type") == "text")
            raise McpError(text or f'MCP server "{server}" reported an error from {remote_name}')
        return reply["content"]

    return {"name": prefix + remote_name, "description": listed["description"], "parameters": listed["parameters"],
            "execute": execute}


class McpPlugin:
    """One MCP server's tools, registered together and disposed together."""

    def __init__(self, name: str, plugin: Plugin, actor: Any, tools: list[str]) -> None:
        self.name = name
        self.tools = tools
        self._plugin = plugin
        self._actor = actor

    @classmethod
    async def connect(cls, registry: ToolRegistry, name: str, server: str | Mapping[str, Any], *,
                      prefix: str | None = None, timeout_s: float = 30.0) -> "McpPlugin":
        """Start the connection, discover the tools, register them as ``<prefix><tool>``."""
        _server(server)  # misuse fails here, before anything starts
        actor = McpServerActor.options(num_cpus=0, max_restarts=0).remote()  # type: ignore[attr-defined]
        try:
            listed = await actor.start.remote(server, timeout_s)
        except RAY_ERROR as exc:
            ray.kill(actor)
            raise translate(exc, what=f'MCP server "{name}"') from None
        plugin = registry.plugin(f"mcp:{name}")
        head = f"{name}." if prefix is None else prefix
        for item in listed:
            await plugin.register(_tool(name, actor, item, head, timeout_s))
        return cls(name, plugin, actor, [head + item["name"] for item in listed])

    async def close(self) -> None:
        """Dispose the tools, close the connection, end its actor."""
        await self._plugin.dispose()
        with contextlib.suppress(RAY_ERROR):
            await self._actor.close.remote()
        ray.kill(self._actor)
