"""A real MCP server for the adapter tests: `python mcp_test_server.py stdio | http PORT`."""
import sys, time
from mcp.server.mcpserver import MCPServer
server = MCPServer("test-server")

@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b

@server.tool()
def fail(message: str) -> str:
    """Always fails."""
    raise ValueError(message)

@server.tool()
def slow(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "done"

@server.tool()
def noisy(text: str) -> str:
    """Write to stderr, then answer."""
    print(f"noise from the server: {text}", file=sys.stderr, flush=True)
    return text

if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
