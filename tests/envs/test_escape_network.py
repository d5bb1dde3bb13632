"""Escapes through the network: an environment reaches what its egress names and nothing
else, the kernel's doing (its own network namespace). Checked on the host's listeners."""

import socket

import pytest

from .host import Listener, wait_until

pytestmark = pytest.mark.timeout(60)


def connect(port, host="127.0.0.1"):
    """A command connecting to ``host:port``, printing what the other end said."""
    return ("python3 -c \"import socket; s = socket.create_connection(('%s', %d), timeout=3); s.sendall(b'hi'); "
            "print(s.recv(100).decode().strip())\"" % (host, port))


@pytest.fixture
def listen():
    """Listeners on the host (``Listener``'s arguments), closed after the test."""
    made = []

    def listener(*args, **options):
        made.append(Listener(*args, **options))
        return made[-1]

    yield listener
    for each in made:
        each.close()


def test_with_no_egress_no_interface_is_up_and_the_hosts_loopback_gets_nothing(envs, env, listen):
    listener = listen()
    assert b"UP" not in envs.sh(env, "ip -o link show").output
    assert envs.sh(env, connect(listener.port)).exit_code != 0
    assert envs.sh(env, "curl -s -m 3 http://127.0.0.1:%d/" % listener.port).exit_code != 0
    assert not listener.reached()


def test_with_no_egress_names_do_not_resolve_and_no_datagram_leaves(envs, env, listen):
    datagrams = listen(socket.SOCK_DGRAM)
    assert envs.sh(env, "getent hosts example.com").exit_code != 0
    for address in (("127.0.0.1", datagrams.port), ("10.255.255.53", 53)):
        envs.sh(env, "python3 -c \"import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM)"
                     ".sendto(b'query', %r)\"" % (address,))
    assert not datagrams.reached()


def test_loopback_egress_serves_its_own_loopback_and_nothing_of_the_hosts(envs, listen):
    env, listener = envs(egress="loopback"), listen()
    own = ("python3 -c \"import socket, threading; s = socket.socket(); s.bind(('127.0.0.1', 8123)); s.listen(); "
           "threading.Thread(target=lambda: s.accept()[0].sendall(b'mine\\n'), daemon=True).start(); "
           "c = socket.create_connection(('127.0.0.1', 8123)); print(c.recv(10).decode().strip())\"")
    assert envs.sh(env, own).output == b"mine\n"
    assert envs.sh(env, connect(listener.port)).exit_code != 0
    assert not listener.reached()


def test_a_named_destination_is_reached_and_no_other(envs, listen):
    listener, other_listener = listen(), listen()
    env = envs(egress=(f"127.0.0.1:{listener.port}",))
    assert envs.sh(env, connect(listener.port)).output == b"hello from the host\n"
    assert listener.connections == 1
    assert envs.sh(env, connect(other_listener.port)).exit_code != 0
    assert envs.sh(env, connect(listener.port, "127.0.0.2")).exit_code != 0
    assert not other_listener.reached()


def test_a_destination_named_by_host_name_is_resolved_on_the_host(envs, listen):
    listener, other_listener = listen(), listen()
    env = envs(egress=(f"localhost:{listener.port}",))
    assert envs.sh(env, connect(listener.port, "localhost")).output == b"hello from the host\n"
    assert envs.sh(env, connect(other_listener.port, "localhost")).exit_code != 0
    assert envs.sh(env, "getent hosts example.com").exit_code != 0
    assert not other_listener.reached()


def test_vsock_and_other_socket_families_are_refused(envs, env):
    for family in (40, 17, 38, 4):  # AF_VSOCK (the hypervisor), AF_PACKET, AF_ALG, AF_IPX
        attempt = f"python3 -c \"import socket; socket.socket({family}, socket.SOCK_STREAM)\""
        assert envs.sh(env, attempt).exit_code != 0, family


def test_an_abstract_unix_socket_of_the_host_is_not_reachable(envs, env, listen):
    host = listen(address=b"\0dsh-envs-test-abstract")
    attempt = "python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect(b'\\0dsh-envs-test-abstract')\""
    assert envs.sh(env, attempt).exit_code != 0
    assert not host.reached()
    with socket.socket(socket.AF_UNIX) as control:  # the same connect from the host does reach it
        control.connect(b"\0dsh-envs-test-abstract")
    assert wait_until(host.reached)
