"""The warden's forwarder: each egress destination's connections, to exactly it.

Imported by the warden only when its environment names destinations (``_egress``), and
then from the host's files (the warden never leaves the host's namespaces): the warm parent
does not import ``asyncio``, whose 8 MB would make every fork of it 0.85 ms slower.
"""

import asyncio
import socket

PIPE_BYTES = 1 << 16

CONNECT_TIMEOUT_S = 10.0
"""How long the forwarder tries one address of a destination (as a client's connect would)."""


async def _pump(reader, writer):
    try:
        while data := await reader.read(PIPE_BYTES):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except OSError:
            pass


async def _upstream(host, port):
    """A socket connected to ``host:port`` from the host's network namespace, or ``None``.
    The name is resolved right here, blocking: the warden cannot start a thread (a process
    that unshared a PID namespace may not make threads), so not asyncio's resolver."""
    loop = asyncio.get_running_loop()
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError:
        return None
    for family, kind, proto, _, address in addresses:
        sock = socket.socket(family, kind, proto)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):  # a top-level module here: no core.within
                await loop.sock_connect(sock, address)
            return sock
        except (OSError, asyncio.TimeoutError):
            sock.close()
    return None


async def _connect(host, port, reader, writer):
    """One connection from inside: to ``host:port``, resolved and reached from the host."""
    sock = await _upstream(host, port)
    if sock is None:
        writer.close()
        return
    upstream_reader, upstream_writer = await asyncio.open_connection(sock=sock)
    await asyncio.gather(_pump(reader, upstream_writer), _pump(upstream_reader, writer))


async def _serve(listeners, init_pidfd):
    loop = asyncio.get_running_loop()
    servers = []
    for listener, host, port in listeners:
        listener.setblocking(False)
        servers.append(await asyncio.start_server(
            lambda r, w, host=host, port=port: _connect(host, port, r, w), sock=listener))
    init_ended = loop.create_future()
    loop.add_reader(init_pidfd, lambda: init_ended.done() or init_ended.set_result(None))
    await init_ended
    for server in servers:
        server.close()


def forward(listeners, init_pidfd):
    """Until the init exits (its pidfd readable), every connection to a listener goes to
    its destination."""
    asyncio.run(_serve(listeners, init_pidfd))
