"""MCP servers as tool plugins, against a real MCP server over stdio and streamable HTTP."""

import asyncio
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsh_actors.runtime.mcp_adapter import McpError, McpPlugin

from .fixtures import shares_one_host_registry

pytestmark = shares_one_host_registry

SERVER = str(Path(__file__).resolve().parents[1] / "tools" / "mcp_test_server.py")
T = 60


def ex(registry, name, **arguments):
    return registry.execute(call_id="m", name=name, arguments=arguments).result(T)


def test_a_stdio_server_s_tools_run_through_the_pipeline_and_close_cleanly(registry):
    plugin = asyncio.run(McpPlugin.connect(registry, "calc", {"command": sys.executable, "args": [SERVER, "stdio"]},
                                           timeout_s=5))  # calc.slow (10 s) still times out; the others have room on a loaded machine
    assert plugin.tools == ["calc.add", "calc.fail", "calc.slow", "calc.noisy"]
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


def stdio(marker):
    return {"command": sys.executable, "args": [SERVER, "stdio", marker]}


def server_processes(marker):
    out = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    return [line for line in out.stdout.split() if line.strip()]


def test_arguments_are_checked_against_the_server_schema_before_anything_is_sent(registry):
    plugin = asyncio.run(McpPlugin.connect(registry, "calc", stdio("schema-check"), timeout_s=5))
    try:
        bad = ex(registry, "calc.add", a="two", b=40)
        assert bad.is_error and bad.error == {"name": "ToolArgsError", "code": "INVALID_ARGS"}
        assert '"a"' in bad.text and "integer" in bad.text and "pydantic" not in bad.text.lower()
        missing = ex(registry, "calc.add", a=1)
        assert missing.error["code"] == "INVALID_ARGS" and "'b' is a required property" in missing.text
    finally:
        asyncio.run(plugin.close())


def test_structured_content_is_kept_and_server_stderr_goes_to_a_log_file(registry):
    plugin = asyncio.run(McpPlugin.connect(registry, "calc", stdio("structured"), timeout_s=5))
    try:
        result = ex(registry, "calc.add", a=2, b=40)
        assert result.text == "42" and result.meta == {"structured_content": {"result": 42}}
        assert ex(registry, "calc.noisy", text="marker-7f3a").text == "marker-7f3a"
        deadline = time.monotonic() + 30
        while "marker-7f3a" not in Path(plugin.stderr_log).read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert "noise from the server: marker-7f3a" in Path(plugin.stderr_log).read_text()
    finally:
        asyncio.run(plugin.close())


def test_a_second_connect_under_a_used_name_fails_and_leaves_no_server_running(registry):
    from dsh_actors import DuplicateToolError

    first = asyncio.run(McpPlugin.connect(registry, "calc", stdio("first-of-two"), timeout_s=5))
    try:
        with pytest.raises(DuplicateToolError):
            asyncio.run(McpPlugin.connect(registry, "calc", stdio("second-of-two"), timeout_s=5))
        deadline = time.monotonic() + 30
        while server_processes("second-of-two") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not server_processes("second-of-two")  # its server process ended
        assert server_processes("first-of-two")  # the first connection is untouched
        assert ex(registry, "calc.add", a=1, b=2).text == "3"
        assert sorted(s["name"] for s in registry.schemas().result(T)) == ["calc.add", "calc.fail", "calc.noisy",
                                                                          "calc.slow"]
    finally:
        asyncio.run(first.close())
    deadline = time.monotonic() + 30
    while server_processes("first-of-two") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not server_processes("first-of-two")
