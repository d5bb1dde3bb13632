"""An environment's warden: the trusted process in the host's namespaces that holds it.

Forked by the warm parent (``_zygote.py``) for each environment; a top-level module of the
trusted processes. It unshares a PID namespace (and, on an ordinary-user host, first a
user namespace mapping uid 1000 to the backend's uid), forks the environment's init into
it (``_init.py``) and then:

- sends the backend a pidfd of the init on the environment's status socket (the backend
  kills the init by it, and learns from it when every process of the environment is gone);
- makes the environment's cgroups while the init builds its root, and sends it their
  folders (``_cgroups.make_env``);
- forwards the egress destinations, when the environment has some (``_forward``): it stays
  in the host's network namespace for that;
- waits for the init to end, removes the environment's cgroups, and exits.

It dies with the warm parent (parent-death signal) and the init dies with it (the same),
and with the init every process of the environment (the kernel ends a PID namespace whose
init exits). On a root host it also holds, while it lives, the lock on the environment's
uid, so no other environment on the node gets it meanwhile.
"""

import ctypes
import os
import select
import signal
import socket

import _cgroups
import _confine
import _init
import _walls


def _map_ids(uid, gid):
    """Inside a new user namespace: the backend's ids are uid/gid 1000 there."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"{_init.INSIDE_ID} {uid} 1\n"),
                       ("gid_map", f"{_init.INSIDE_ID} {gid} 1\n")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)


def _listeners(channel, init_pidfd):
    """The listening sockets the init made for the egress destinations, once it sends them
    (or ``[]`` if it ended first)."""
    readable, _, _ = select.select([channel, init_pidfd], [], [])
    if channel not in readable:
        return []
    data, fds, _, _ = socket.recv_fds(channel, 65536, 256)
    destinations = [d.rpartition(":") for d in data.decode().split(";") if d]
    return [(socket.socket(fileno=fd), host, int(port)) for fd, (host, _, port) in zip(fds, destinations)]


def main(config, env, *, zygote, status, listener, uid, uid_lock, program):
    """The warden's life (see the module docs); never returns."""
    lib = _walls.libc(config["sonames"])
    _confine.retitle(lib, "dsh-envs-warden")
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _walls.orphan_guard(zygote)
    try:
        if config["host_root"]:
            flags = _walls.CLONE_NEWPID
        else:
            flags = _walls.CLONE_NEWPID | _walls.CLONE_NEWUSER
        if lib.unshare(flags) != 0:
            raise _walls.SetupError(f"unshare(pid): {os.strerror(ctypes.get_errno())}")
        if not config["host_root"]:
            _map_ids(*config["owner_ids"])
            _walls.orphan_guard(zygote)  # a change of credentials may have cleared the signal
    except (OSError, _walls.SetupError) as exc:
        status.send(f"failed: {exc}".encode())
        os._exit(_init.SETUP_FAILED)
    alive_r, alive_w = os.pipe()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    init = os.fork()
    if init == 0:
        os.close(alive_w)
        ours.close()
        if uid_lock is not None:
            os.close(uid_lock)  # the lock lives as long as the warden
        _init.main(config, env, status=status, alive_fd=alive_r, listener=listener, channel=theirs, uid=uid,
                   program=program)
        os._exit(_init.SETUP_FAILED)
    os.close(alive_r)
    listener.close()
    theirs.close()
    init_pidfd = os.pidfd_open(init)
    socket.send_fds(status, [b"init"], [init_pidfd])
    if config["cgroups"]:  # while the init builds its root
        try:
            folders = _cgroups.make_env(config["cgroups"], env["name"], memory_bytes=env["memory_bytes"],
                                        tasks=env["processes"], uid=uid)
            socket.send_fds(ours, [b"cgroups"], folders)
            # the first cgroup move after an idle spell waits for an RCU grace period (~8 ms
            # here): made now, it overlaps the init's setup instead of delaying its start
            _cgroups.move_home(config["cgroups"], env["name"], init)
            ours.send(b"moved")
        except OSError as exc:
            ours.send(f"{exc}".encode())
    forwarding = not isinstance(env["egress"], str) and "netns" in config["mechanisms"]
    listeners = _listeners(ours, init_pidfd) if forwarding else []
    ours.close()
    if listeners:
        import _forward  # noqa: PLC0415 - only here (see its docs)

        _forward.forward(listeners, init_pidfd)
    os.waitpid(init, 0)
    for directory in _cgroups.env_dirs(config["cgroups"], env["name"]):
        _cgroups.remove_tree(directory)
    os._exit(0)
