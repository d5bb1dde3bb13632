"""A replica that takes HTTP itself: the gateway's app under uvicorn, in the replica's process.

Through Serve's proxy a call crossed two processes more than it needed: the proxy parsed
the HTTP request, shipped it to the replica as an actor call, and streamed each ASGI
message of the answer back — several times the CPU of the call itself (measured in
``benchmarks/mcp_vs_sdk.py``). With ``ingress="direct"`` each replica listens on the
gateway's port of its own node instead, with ``SO_REUSEPORT``: every replica of a node
binds the same port and the kernel spreads the connections over them; a replica that dies
stops taking them, and the one Serve brings up instead binds the port again.

:class:`DirectServer` binds the socket when it is made (a port it cannot have fails the
replica's start, which Serve reports) and serves on an event loop of its own, in a thread
of its own, so nothing of Serve's own loop runs it.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

__all__ = ["DirectServer", "port_taken"]

_START_S = 60.0


class DirectServer:
    """``app`` served on ``host:port`` (shared with the node's other replicas) until :meth:`stop`."""

    def __init__(self, app: Any, host: str, port: int) -> None:
        import uvicorn

        self.socket = _shared_socket(host, port)
        config = uvicorn.Config(app, lifespan="on", log_level="warning", access_log=False, proxy_headers=False,
                                loop="none", timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(config)
        self.failure: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="dsh-mcp-http", daemon=True)
        self.thread.start()
        waited = 0.0
        while not self.server.started and self.thread.is_alive() and waited < _START_S:
            self.thread.join(0.05)
            waited += 0.05
        if not self.server.started:
            self.stop()
            why = repr(self.failure) if self.failure is not None else "it did not answer in time"
            raise RuntimeError(f"the gateway's HTTP server did not start on {host}:{port}: {why}")

    def _run(self) -> None:
        try:
            loop = _new_loop()
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self.server.serve(sockets=[self.socket]))
        except BaseException as exc:  # noqa: BLE001 - kept for the health check and the start's error
            self.failure = exc
        finally:
            self.socket.close()

    def check(self) -> None:
        """Raise unless it still serves (Serve's health check: a replica whose server
        ended is replaced)."""
        if not self.thread.is_alive() or self.server.should_exit:
            raise RuntimeError(f"the gateway's HTTP server ended: {self.failure!r}")

    def stop(self) -> None:
        """Stop taking connections, let those running end (a few seconds at most)."""
        self.server.should_exit = True
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(10)


def _shared_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(2048)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def port_taken(host: str, port: int) -> bool:
    """Whether something on this node already listens on ``host:port`` (checked by binding
    it without ``SO_REUSEPORT``: a direct gateway shares its port only with its own replicas)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            return True
    return False


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop  # what uvicorn itself prefers, when it is there
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()  # type: ignore[no-any-return]
