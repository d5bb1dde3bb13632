"""MCP servers as tool plugins, against a real MCP server over stdio and streamable HTTP."""

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsh_actors.runtime.mcp_adapter import McpError, McpPlugin

SERVER = str(Path(__file__).resolve().parents[1] / "tools" / "mcp_test_server.py")
T = 60


def ex(registry, name, **arguments):
    return registry.execute(call_id="m", name=name, arguments=arguments).result(T)


def test_a_stdio_server_s_tools_run_through_the_pipeline_and_close_cleanly(registry):
    plugin = asyncio.run(McpPlugin.connect(registry, "calc", {"command": sys.executable, "args": [SERVER, "stdio"]},
                                           timeout_s=2))
    assert plugin.tools == ["calc.add", "calc.fail", "calc.slow"]
    schemas = {s["name"]: s for s in registry.schemas().result(T)}
    assert schemas["calc.add"]["parameters"]["required"] == ["a", "b"]
    assert ex(registry, "calc.add", a=2, b=40).text == "42"
    failed = ex(registry, "calc.fail", message="boom")
    assert failed.is_error and failed.error == {"name": "McpError", "code": "MCP_ERROR"}
    timed_out = ex(registry, "calc.slow", seconds=10)
    assert timed_out.error == {"name": "ToolTimeoutError", "code": "TOOL_TIMEOUT"}
    assert ex(registry, "calc.add", a=1, b=1).text == "2"  # the connection survived both
    asyncio.run(plugin.close())
    assert registry.visible().result(T) == []


def test_a_streamable_http_server_works_the_same_way(registry):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, SERVER, "http", str(port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        plugin = asyncio.run(McpPlugin.connect(registry, "web", f"http://127.0.0.1:{port}/mcp", prefix=""))
        assert ex(registry, "add", a=3, b=4).text == "7"
        asyncio.run(plugin.close())
    finally:
        server.kill()
        server.wait(timeout=10)


def test_an_unreachable_server_is_a_clear_error(registry):
    with pytest.raises(McpError, match="cannot connect to the MCP server"):
        asyncio.run(McpPlugin.connect(registry, "gone", {"command": sys.executable, "args": ["-c", "pass"]}, timeout_s=3))
    with pytest.raises(ValueError, match="streamable-HTTP URL"):
        asyncio.run(McpPlugin.connect(registry, "bad", "ftp://nowhere"))
