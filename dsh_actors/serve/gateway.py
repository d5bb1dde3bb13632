"""One registry's agents as MCP servers over Streamable HTTP: ``/agents/<agent>/mcp``.

:func:`gateway_app` is the ASGI application (what each Ray Serve replica runs, see
:mod:`.deployment`): the official SDK's low-level server, stateless (every request stands
alone, so any replica answers any request and no sticky routing is needed), with JSON
responses. ``tools/list`` is the agent's visible set as the registry resolves it (its
shadows, restrictions and mode); ``tools/call`` runs the registry's whole pipeline as that
agent — its policies, guards, approvals, deadlines and session log — wherever the registry's
executors run the tool. An ask is put to the registry's approval queue (answered from any
process, as for every other caller: ``dsh-actors approvals``), or denied where the registry
has none.
"""

from __future__ import annotations

import os
import re
import uuid
from typing import Any

import mcp_types as types

from .mcp_mapping import mcp_result, mcp_tool

__all__ = ["AGENT_PATH", "GatewayConfig", "gateway_app"]

AGENT_PATH = "/agents/{agent}/mcp"
"""Where an agent's MCP endpoint is, under the application's route prefix."""

_AGENT_ID = re.compile(r"^[A-Za-z0-9._:@-]{1,200}$")


class GatewayConfig:
    """Which registry a gateway serves, and how its endpoint is reached."""

    def __init__(self, registry: str, *, namespace: str | None = None, logs: str | None = None,
                 allowed_hosts: list[str] | None = None) -> None:
        """``registry``: the name of a running registry (the gateway joins it as it is; it
        never makes one). ``logs``: a folder where each agent's session log is
        (``<logs>/<agent>.log`` on the node of the replica that took the call: a folder
        every node mounts keeps one log per agent), recording every call as the batch job
        does (one ``tool/result`` per call); ``None``: no log. ``allowed_hosts``: the
        ``Host`` headers accepted (DNS-rebinding protection, e.g. ``["127.0.0.1:*"]``); by
        default any, since a cluster's gateway is reached by many names."""
        from ..runtime.wire import DEFAULT_NAMESPACE

        self.registry, self.namespace = registry, namespace or DEFAULT_NAMESPACE
        self.logs, self.allowed_hosts = logs, allowed_hosts


def gateway_app(config: GatewayConfig) -> Any:
    """The ASGI application serving ``config``'s registry (a Starlette app with a lifespan)."""
    from mcp.server.lowlevel import Server
    from mcp.server.transport_security import TransportSecuritySettings

    from ..runtime.client import ToolRegistry

    registry = ToolRegistry(config.registry, config.namespace)  # joins the running one by name, when first asked
    logs: dict[str, Any] = {}  # agent -> its session log, opened at its first call here

    async def session_of(agent: str, folder: str) -> Any:
        from ..runtime.session.client import SessionLog

        if agent not in logs:
            os.makedirs(folder, exist_ok=True)
            logs[agent] = await SessionLog.open_async(registry.session_id(agent), os.path.join(folder, f"{agent}.log"))
        return logs[agent]

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        agent = _agent(ctx)
        visible = await registry.visible(agent)
        return types.ListToolsResult(tools=[mcp_tool(d) for d in visible])

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        agent = _agent(ctx)
        call = {"call_id": f"mcp-{uuid.uuid4().hex[:16]}", "name": params.name, "arguments": params.arguments or {}}
        if config.logs is None:
            return mcp_result(await registry.execute(call, agent=agent))
        from ..runtime.step import agent_step

        session = await session_of(agent, config.logs)
        [result] = await agent_step(registry.scope(agent), session, [call])  # logged, as a step is
        return mcp_result(result)

    server: Server[Any] = Server("dsh-actors", version=_version(), on_list_tools=list_tools, on_call_tool=call_tool,
                                 instructions="Tools of one dsh-actors agent: every call runs through its policies.")
    security = TransportSecuritySettings(enable_dns_rebinding_protection=config.allowed_hosts is not None,
                                         allowed_hosts=config.allowed_hosts or [])
    return server.streamable_http_app(streamable_http_path=AGENT_PATH, stateless_http=True, json_response=True,
                                      transport_security=security, host="0.0.0.0")


def _agent(ctx: Any) -> str:
    """The agent named by the request's path (``/agents/<agent>/mcp``)."""
    request = getattr(ctx, "request", None)
    agent = getattr(request, "path_params", {}).get("agent") if request is not None else None
    if not isinstance(agent, str) or not _AGENT_ID.match(agent):
        from mcp.shared.exceptions import MCPError

        raise MCPError(types.INVALID_PARAMS, f"no agent in the endpoint's path (expected {AGENT_PATH})")
    return agent


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dsh-actors")
    except PackageNotFoundError:
        return "0"
