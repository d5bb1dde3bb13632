"""A free TCP port on loopback, for the servers and clusters a test starts."""

import socket


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick; free until someone binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
