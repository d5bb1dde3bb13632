"""dsh-actors as a tool server for clients written elsewhere: each agent scope served as an
MCP server over Streamable HTTP, on Ray Serve (``pip install 'dsh-actors[serve]'``)."""

from .access import load_tokens
from .deployment import APPLICATION, gateway_application, serve_mcp, serve_running, stop_mcp
from .gateway import AGENT_PATH, GatewayConfig, gateway_app
from .mcp_mapping import mcp_result, mcp_tool

__all__ = ["AGENT_PATH", "APPLICATION", "GatewayConfig", "gateway_app", "gateway_application", "load_tokens", "mcp_result",
           "mcp_tool", "serve_mcp", "serve_running", "stop_mcp"]
