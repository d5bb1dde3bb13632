"""The MCP gateway as a Ray Serve application (``pip install 'dsh-actors[serve]'``).

``serve_mcp(config, port=8000)`` deploys :func:`~.gateway.gateway_app` as the application
``dsh-mcp``: ``num_replicas`` replicas, each a stateless MCP server of the same registry.
Any replica answers any request, so the gateway scales out without sticky sessions; a
replica that dies is replaced by Serve, and the calls it was running answer as the
registry's calls do when their caller goes away. How requests reach the replicas:

- ``ingress="direct"`` (the default): each replica listens on ``host:port`` of its node
  itself (:mod:`.direct`; the node's replicas share the port). Serve runs no HTTP proxy for
  it when it starts Serve. Several gateways each need a port of their own; across nodes, a
  load balancer in front spreads clients over the nodes, as for Serve's proxies.
- ``ingress="proxy"``: through Serve's HTTP proxy (one per node, or only on the head:
  Serve's ``proxy_location``), so several gateways share one port under their own
  ``route_prefix``, and Serve's request-based autoscaling sees the requests. It costs
  several times the CPU per call (``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

from typing import Any

from .gateway import AGENT_PATH, GatewayConfig, gateway_app

__all__ = ["APPLICATION", "INGRESS", "gateway_application", "serve_mcp", "serve_running", "stop_mcp"]

APPLICATION = "dsh-mcp"
"""The Serve application's name."""

INGRESS = ("direct", "proxy")
"""How requests reach the replicas (see the module docs)."""

LOGGING = {"enable_access_log": False, "log_level": "WARNING"}
"""Serve's logging for the gateway: no line per request (on a busy gateway the access log
of the proxy and the replicas took more CPU than the calls; the session logs record calls)."""


def gateway_application(config: GatewayConfig, *, num_replicas: int = 1, ingress: str = "direct",
                        host: str = "127.0.0.1", port: int = 8000, max_replicas_per_node: int | None = None) -> Any:
    """The Serve application (not yet running) serving ``config``'s registry; with
    ``ingress="direct"`` each replica listens on ``host:port`` of its node.
    ``max_replicas_per_node``: at most that many on one node (1: one per node)."""
    from ray import serve

    if ingress not in INGRESS:
        raise ValueError(f"ingress must be one of {INGRESS}, not {ingress!r}")
    options: dict[str, Any] = dict(name="McpGateway", num_replicas=num_replicas, ray_actor_options={"num_cpus": 0},
                                   max_ongoing_requests=1000, logging_config=LOGGING)
    if max_replicas_per_node is not None:
        options["max_replicas_per_node"] = max_replicas_per_node
    if ingress == "proxy":
        @serve.deployment(**options)
        @serve.ingress(lambda: gateway_app(config))
        class McpGateway:
            """One replica: a stateless MCP server of the registry (see :mod:`.gateway`)."""

        return McpGateway.bind()  # type: ignore[attr-defined]  # serve.deployment made it a Deployment

    @serve.deployment(**options)
    class McpDirectGateway:
        """One replica taking HTTP itself on its node's ``host:port`` (see :mod:`.direct`)."""

        def __init__(self) -> None:
            from .direct import DirectServer

            self.http = DirectServer(gateway_app(config), host, port)

        def check_health(self) -> None:
            self.http.check()

        def __del__(self) -> None:
            http = getattr(self, "http", None)
            if http is not None:
                http.stop()

    return McpDirectGateway.bind()  # type: ignore[attr-defined]


def serve_mcp(config: GatewayConfig, *, host: str = "127.0.0.1", port: int = 8000, num_replicas: int = 1,
              route_prefix: str = "/", name: str = APPLICATION, ingress: str = "direct",
              max_replicas_per_node: int | None = None) -> str:
    """Deploy the gateway (blocking until its replicas are up); the URL template of an
    agent's endpoint, ``http://HOST:PORT/agents/{agent}/mcp``.

    ``ingress="direct"``: the replicas listen on ``host:port`` of their nodes (a port no
    other process of this node may hold; ``route_prefix`` does not apply). ``"proxy"``:
    ``host`` and ``port`` are where Serve's proxy listens when this starts Serve (one
    already running keeps its own), and several gateways (one per registry, say) share it,
    each its own application ``name`` under its own ``route_prefix``. ``max_replicas_per_node``:
    at most that many replicas on one node (1 spreads them one per node)."""
    from ray import serve

    if ingress not in INGRESS:
        raise ValueError(f"ingress must be one of {INGRESS}, not {ingress!r}")
    if ingress == "direct":
        from .direct import port_taken

        # The check leaves out a redeploy of this very application: its old replicas hold the
        # port until the new ones, sharing it, take over.
        if port_taken(host, port) and not (serve_running() and name in serve.status().applications):
            raise OSError(f"port {port} on {host} is taken: a gateway with ingress=\"direct\" needs a port of its "
                          "own (another gateway, or Serve's proxy, holds this one)")
        if not serve_running():
            serve.start(proxy_location="Disabled", logging_config=LOGGING)
        serve.run(gateway_application(config, num_replicas=num_replicas, host=host, port=port,
                                      max_replicas_per_node=max_replicas_per_node), name=name, route_prefix=None)
        return f"http://{_url_host(host)}:{port}{AGENT_PATH}"
    serve.start(http_options={"host": host, "port": port}, logging_config=LOGGING)
    serve.run(gateway_application(config, num_replicas=num_replicas, ingress="proxy",
                                  max_replicas_per_node=max_replicas_per_node), name=name, route_prefix=route_prefix)
    prefix = route_prefix.rstrip("/")
    return f"http://{_url_host(host)}:{port}{prefix}{AGENT_PATH}"


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


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
