"""MCP servers as tool plugins, over the official ``mcp`` SDK (``pip install dsh-actors[mcp]``).

``await McpPlugin.connect(registry, "files", server)`` — ``server`` is a URL (streamable
HTTP) or ``{"command": ..., "args": [...], "env": {...}}`` (stdio) — starts one actor
that owns the connection, discovers the server's tools and registers each as a raw
JSON-Schema tool named ``<name>.<tool>`` through one plugin handle. Calls go through the
whole pipeline; their bodies (in executors, wherever they run) check the arguments
against the server's input schema (``INVALID_ARGS`` listing the violations, before
anything is sent) and ask the connection actor. A server error (``is_error``) becomes an
``MCP_ERROR`` result, a call past its timeout a ``TOOL_TIMEOUT`` result; a result's
``structuredContent`` is kept as its ``meta``: ``{"structured_content": ...}``. A stdio
server's stderr goes to a file in Ray's log directory (``McpPlugin.stderr_log``), not to
the driver's console. ``close()`` disposes the tools and ends the connection (a stdio
server process exits with it); a ``connect`` that fails at any step leaves nothing
running and nothing registered.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tempfile
from typing import Any, Mapping

import ray

from ..core.errors import HarnessError, ToolArgsError, ToolTimeoutError
from ..core.within import within
from .client import Plugin, ToolRegistry
from .errors import RAY_ERROR, translate
from .revive import release

__all__ = ["McpError", "McpPlugin", "McpServerActor", "McpServerService"]


class McpError(HarnessError):
    """An MCP server answered a call with an error, or the connection failed."""

    code = "MCP_ERROR"


def _server(spec: str | Mapping[str, Any], errlog: Any = None) -> Any:
    """The transport for ``spec``; a stdio server's stderr goes to ``errlog``."""
    from mcp import StdioServerParameters
    from mcp.client.stdio import stdio_client

    if isinstance(spec, str):
        if not spec.startswith(("http://", "https://")):
            raise ValueError("an MCP server is a streamable-HTTP URL or {'command': ..., 'args': [...]}")
        return spec
    if not isinstance(spec, Mapping) or not isinstance(spec.get("command"), str):
        raise ValueError("a stdio MCP server needs {'command': str, 'args': [...], 'env'?: {...}}")
    params = StdioServerParameters(command=spec["command"], args=list(spec.get("args", [])), env=spec.get("env"))
    return params if errlog is None else stdio_client(params, errlog=errlog)


def _log_dir() -> str:
    """Ray's log directory on this node (where the connection actor's own logs are)."""
    try:
        return str(ray._private.worker.global_worker.node.get_logs_dir_path())
    except Exception:
        return tempfile.gettempdir()


class McpServerService:
    """Owns one MCP connection. anyio scopes must exit in the task that entered them, so
    one long-lived task holds the client and serves requests from a queue."""

    def __init__(self) -> None:
        self._requests: asyncio.Queue[Any] = asyncio.Queue()
        self._ready: asyncio.Future[Any] | None = None
        self._task: asyncio.Task[Any] | None = None
        self._errlog: Any = None

    async def start(self, spec: Any, read_timeout_s: float, name: str = "mcp") -> tuple[list[dict[str, Any]], str]:
        """Connect and list the server's tools: ``([{name, description, parameters}],
        path of the server's stderr log)``."""
        path = os.path.join(_log_dir(), f"mcp-{name}-{os.getpid()}.stderr.log")
        if not isinstance(spec, str):
            self._errlog = open(path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115 (closed in close())
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._task = loop.create_task(self._serve(spec, read_timeout_s))
        return await self._ready, path

    async def _serve(self, spec: Any, read_timeout_s: float) -> None:
        import anyio
        from mcp import Client

        assert self._ready is not None
        try:
            async with Client(_server(spec, self._errlog), read_timeout_seconds=read_timeout_s) as client:
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
            reply = {"content": content, "is_error": bool(result.is_error)}
            structured = getattr(result, "structured_content", None)
            if structured is not None:
                reply["structured"] = structured
            future.set_result(reply)
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
                await within(self._task, 10)
        if self._errlog is not None:
            self._errlog.close()


def _violations(schema: Mapping[str, Any], arguments: Any, cache: list[Any]) -> list[str]:
    """What is wrong with ``arguments`` under the server's input schema (jsonschema, the
    reference validator; compiled once per process)."""
    import jsonschema

    if not cache:
        cls = jsonschema.validators.validator_for(schema)
        cache.append(cls(schema))
    found = []
    for error in sorted(cache[0].iter_errors(arguments), key=lambda e: list(e.absolute_path)):
        where = ".".join(str(p) for p in error.absolute_path)
        found.append(f'"{where}" {error.message}' if where else error.message)
    return found


def _tool(server: str, actor: Any, listed: Mapping[str, Any], prefix: str, timeout_s: float) -> dict[str, Any]:
    remote_name = listed["name"]
    schema = listed["parameters"]
    validator: list[Any] = []

    async def execute(args: Any, ctx: Any) -> Any:
        from ..core.jsonvalue import thaw

        plain = thaw(args)
        violations = _violations(schema, plain, validator)
        if violations:
            raise ToolArgsError(violations)  # never sent: as for native tools
        reply = await actor.call.remote(remote_name, plain, timeout_s)
        if "timeout" in reply:
            raise ToolTimeoutError(reply["timeout"] * 1000)
        if "failure" in reply:
            raise McpError(f'MCP server "{server}" failed on {remote_name}: {reply["failure"]}')
        if reply["is_error"]:
            text = "\n".join(b.get("text", "") for b in reply["content"] if b.get("type") == "text")
            raise McpError(text or f'MCP server "{server}" reported an error from {remote_name}')
        if "structured" in reply:
            return {"content": reply["content"], "meta": {"structured_content": reply["structured"]}}
        return reply["content"]

    return {"name": prefix + remote_name, "description": listed["description"], "parameters": listed["parameters"],
            "execute": execute}


class McpPlugin:
    """One MCP server's tools, registered together and disposed together."""

    def __init__(self, name: str, plugin: Plugin, actor: Any, tools: list[str], stderr_log: str | None = None) -> None:
        self.name = name
        self.tools = tools
        self.stderr_log = stderr_log
        """Where a stdio server's stderr goes (a file in Ray's log directory of the
        connection actor's node); ``None`` for an HTTP server."""
        self._plugin = plugin
        self._actor = actor

    @classmethod
    async def connect(cls, registry: ToolRegistry, name: str, server: str | Mapping[str, Any], *,
                      prefix: str | None = None, timeout_s: float = 30.0) -> "McpPlugin":
        """Start the connection, discover the tools, register them as ``<prefix><tool>``.
        If any step fails, whatever was started is ended before the error is raised."""
        _server(server)  # misuse fails here, before anything starts
        actor: Any = McpServerActor.options(num_cpus=0, max_restarts=0).remote()
        plugin = registry.plugin(f"mcp:{name}")
        try:
            listed, stderr_log = await actor.start.remote(server, timeout_s, name)
            head = f"{name}." if prefix is None else prefix
            for item in listed:
                await plugin.register(_tool(name, actor, item, head, timeout_s))
        except BaseException as exc:
            await _end(plugin, actor)  # e.g. a name already used: no server left running
            if isinstance(exc, RAY_ERROR):
                raise translate(exc, what=f'MCP server "{name}"') from None
            raise
        return cls(name, plugin, actor, [head + item["name"] for item in listed],
                   None if isinstance(server, str) else stderr_log)

    async def close(self) -> None:
        """Dispose the tools, close the connection, end its actor."""
        await _end(self._plugin, self._actor)


async def _end(plugin: Plugin, actor: Any) -> None:
    """Dispose ``plugin``'s registrations, close the connection (a stdio server exits with
    it) and kill the actor; each step runs whatever the others did."""
    with contextlib.suppress(Exception):
        await plugin.dispose()
    with contextlib.suppress(Exception):
        await within(actor.close.remote(), 15)
    release(actor)


McpServerActor = ray.remote(McpServerService)
"""The MCP server actor class (one per connected server)."""
