"""An environment's network: nothing, its own loopback, or exactly the destinations it names.

Every environment has a network namespace of its own, so what it can reach is what that
namespace holds; the kernel enforces it:

- ``none``: no interface is up, not even loopback (every ``connect`` fails);
- ``loopback``: only ``lo`` is up (servers the episode runs, reached by its own commands);
- ``("host:port", ...)``: ``lo`` is up and, for each destination, the init listens *inside*
  the namespace at an address that stands for it (an IPv4 literal is added to ``lo`` as
  itself, a loopback literal is already there, a name gets a loopback address of its own,
  written into the environment's ``/etc/hosts``), and hands those listening sockets to the
  environment's warden, which lives in the host's network namespace and forwards each
  connection to exactly that destination (a name is resolved on the host). There is no
  route to anything else: no DNS server, no other port, no other host. TCP only.

:func:`configure` runs in the init (privileged, in the new namespace); the forwarding is
``_forward.py``, in the warden. Top-level modules of the trusted processes (the standard
library only).
"""

import fcntl
import ipaddress
import socket
import struct

SIOCSIFFLAGS, SIOCSIFADDR, SIOCSIFNETMASK, IFF_UP = 0x8914, 0x8916, 0x891C, 0x1

NAME_BASE = ipaddress.IPv4Address("127.77.0.1")
"""A named destination's stand-in address inside the environment (the first; one each)."""


def _ifreq_flags(name, flags):
    return struct.pack("16sH22x", name.encode(), flags)


def _ifreq_addr(name, address):
    return struct.pack("16sH2s4s8x8x", name.encode(), socket.AF_INET, b"\0\0", socket.inet_aton(address))


def _interface(name, address=None):
    """Bring ``name`` up (with ``address``/32 when given)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as control:
        if address is not None:
            fcntl.ioctl(control, SIOCSIFADDR, _ifreq_addr(name, address))
            fcntl.ioctl(control, SIOCSIFNETMASK, _ifreq_addr(name, "255.255.255.255"))
        fcntl.ioctl(control, SIOCSIFFLAGS, _ifreq_flags(name, IFF_UP))


def ports(egress):
    """The TCP ports ``egress`` names (none for ``none`` and ``loopback``): all Landlock can
    restrict to where the environment shares the host's network namespace."""
    return () if isinstance(egress, str) else tuple(int(d.rpartition(":")[2]) for d in egress)


def configure(egress):
    """Set up this (new) network namespace for ``egress``. Returns ``(listeners, hosts)``:
    ``[(socket, host, port)]`` to hand the warden, and ``/etc/hosts`` lines for names."""
    if egress == "none":
        return [], ""
    _interface("lo")
    if egress == "loopback":
        return [], ""
    listeners, hosts, aliases, names = [], [], 0, {}
    for destination in egress:
        host, _, port_text = destination.rpartition(":")
        host = host.strip("[]")
        try:
            literal = ipaddress.ip_address(host)
        except ValueError:
            literal = None
        if literal is not None and literal.version != 4:
            raise ValueError(f"egress {destination!r}: only IPv4 addresses and names are forwarded")
        if literal is None:
            if host not in names:
                names[host] = str(NAME_BASE + len(names))
                hosts.append(f"{names[host]}\t{host}")
            local = names[host]
        else:
            local = str(literal)
            if not literal.is_loopback:
                aliases += 1
                _interface(f"lo:{aliases}", local)
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind((local, int(port_text)))
        listener.listen(64)
        listeners.append((listener, host, int(port_text)))
    return listeners, "\n".join(hosts)
