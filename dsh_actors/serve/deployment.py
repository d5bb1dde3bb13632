"""The MCP gateway as a Ray Serve application (``pip install 'dsh-actors[serve]'``).

``serve_mcp(config, port=8000)`` starts Serve's HTTP proxy on the cluster (if it is not
running yet) and deploys :func:`~.gateway.gateway_app` as the application ``dsh-mcp``:
``num_replicas`` replicas, each a stateless MCP server of the same registry, behind Serve's
proxy (one per node, or only on the head: Serve's ``proxy_location``). Any replica answers
any request, so the gateway scales out without sticky sessions; a replica that dies is
replaced by Serve, and the calls it was running answer as the registry's calls do when
their caller goes away.
"""

from __future__ import annotations

from typing import Any

from .gateway import AGENT_PATH, GatewayConfig, gateway_app

__all__ = ["APPLICATION", "gateway_application", "serve_mcp", "serve_running", "stop_mcp"]

APPLICATION = "dsh-mcp"
"""The Serve application's name."""

LOGGING = {"enable_access_log": False, "log_level": "WARNING"}
"""Serve's logging for the gateway: no line per request (on a busy gateway the access log
of the proxy and the replicas took more CPU than the calls; the session logs record calls)."""


def gateway_application(config: GatewayConfig, *, num_replicas: int = 1) -> Any:
    """The Serve application (not yet running) serving ``config``'s registry."""
    from ray import serve

    @serve.deployment(name="McpGateway", num_replicas=num_replicas,
                      ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1000, logging_config=LOGGING)
    @serve.ingress(lambda: gateway_app(config))
    class McpGateway:
        """One replica: a stateless MCP server of the registry (see :mod:`.gateway`)."""

    return McpGateway.bind()  # type: ignore[attr-defined]  # serve.deployment made it a Deployment


def serve_mcp(config: GatewayConfig, *, host: str = "127.0.0.1", port: int = 8000, num_replicas: int = 1,
              route_prefix: str = "/", name: str = APPLICATION) -> str:
    """Deploy the gateway (blocking until its replicas are up); the URL template of an
    agent's endpoint, ``http://HOST:PORT/agents/{agent}/mcp``. ``host`` and ``port`` are
    where Serve's proxy listens when this starts Serve; one already running keeps its own.
    Several gateways (one per registry, say) share one Serve: each its own application
    ``name`` under its own ``route_prefix``."""
    from ray import serve

    serve.start(http_options={"host": host, "port": port}, logging_config=LOGGING)
    serve.run(gateway_application(config, num_replicas=num_replicas), name=name, route_prefix=route_prefix)
    prefix = route_prefix.rstrip("/")
    return f"http://{host}:{port}{prefix}{AGENT_PATH}"


def serve_running() -> bool:
    """Whether Ray Serve runs on this cluster (its controller is there)."""
    import ray

    return any(a["name"] == "SERVE_CONTROLLER_ACTOR" for a in ray.util.list_named_actors(all_namespaces=True))


def stop_mcp(*, shutdown_serve: bool = False, name: str = APPLICATION) -> None:
    """Delete the gateway application ``name``; with ``shutdown_serve``, Serve itself too
    (what started it for the gateway alone ends it), else it keeps running for other
    applications."""
    from ray import serve

    try:
        serve.delete(name)
    finally:
        if shutdown_serve:
            serve.shutdown()
