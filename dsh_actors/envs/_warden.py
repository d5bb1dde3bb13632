"""An environment's warden: the trusted process in the host's namespaces that holds it.

Forked by the warm parent (``_zygote.py``) ahead of need, as a spare; a top-level module of
the trusted processes. It unshares a PID namespace (and, on an ordinary-user host, first a
user namespace mapping uid 1000 to the backend's uid), forks the environment's init into
it (``_init.py``; it prepares what every environment has), and waits. Once the warm parent
assigns it an environment (its spec, status socket, listening socket, and on a root host
the lock on its uid) it:

- hands the init its assignment, and the backend a pidfd of the init on the status socket
  (the backend kills the init by it, and learns from it when every process is gone);
- makes the environment's cgroups while the init completes its root, sends it their
  folders (``_cgroups.make_env``), and moves it into its home there when it asks (ready);
- forwards the egress destinations, when the environment has some (``_forward``): it stays
  in the host's network namespace for that;
- waits for the init to end, removes the environment's cgroups, and exits.

It dies with the warm parent (parent-death signal) and the init dies with it (the same),
and with the init every process of the environment (the kernel ends a PID namespace whose
init exits). On a root host it holds, while it lives, the lock on the environment's uid, so
no other environment on the node gets that uid meanwhile.
"""

import ctypes
import json
import os
import select
import signal
import socket

import _cgroups
import _confine
import _init
import _walls
import _wire


def _map_ids(uid, gid):
    """Inside a new user namespace: the backend's ids are uid/gid 1000 there."""
    for name, text in (("setgroups", "deny"), ("uid_map", f"{_init.INSIDE_ID} {uid} 1\n"),
                       ("gid_map", f"{_init.INSIDE_ID} {gid} 1\n")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)


def _next(channel, init_pidfd):
    """The next message the init sends (with its descriptors), or ``None`` once it ended."""
    readable, _, _ = select.select([channel, init_pidfd], [], [])
    if channel not in readable:
        return None
    data, fds = _wire.recv_fds(channel, 65536, 256)
    return data, fds


def _listeners(message):
    """The listening sockets the init made for the egress destinations."""
    if message is None:
        return []
    data, fds = message
    destinations = [d.rpartition(":") for d in data.decode().split(";") if d]
    return [(socket.socket(fileno=fd), host, int(port)) for fd, (host, _, port) in zip(fds, destinations)]


def _spare(config, zygote, program):
    """Become a spare: a PID namespace with the init preparing in it. Returns the init's
    pid and pidfd, and the warden's ends of the init's pipes."""
    lib = _walls.libc(config["sonames"])
    flags = _walls.CLONE_NEWPID if config["host_root"] else _walls.CLONE_NEWPID | _walls.CLONE_NEWUSER
    if lib.unshare(flags) != 0:
        raise _walls.SetupError(f"unshare(pid): {os.strerror(ctypes.get_errno())}")
    if not config["host_root"]:
        _map_ids(*config["owner_ids"])
        _walls.orphan_guard(zygote)  # a change of credentials may have cleared the signal
    alive_r, alive_w = os.pipe()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    init = os.fork()
    if init == 0:
        os.close(alive_w)
        ours.close()
        _init.main(config, alive_fd=alive_r, channel=theirs, program=program)
        os._exit(_init.SETUP_FAILED)
    os.close(alive_r)
    theirs.close()
    return init, os.pidfd_open(init), ours, alive_w


def _assigned(control, init_pidfd):
    """The environment the warm parent assigns: ``(env, status, listener, uid lock)``."""
    readable, _, _ = select.select([control, init_pidfd], [], [])
    if control not in readable:
        os._exit(_init.SETUP_FAILED)  # the spare's init died preparing: the warm parent makes another
    data, fds = _wire.recv_fds(control, 1 << 20, 3)
    if not data:
        os._exit(0)  # the warm parent ended
    return json.loads(data), socket.socket(fileno=fds[0]), fds[1], fds[2] if len(fds) > 2 else None


def main(config, *, zygote, control, program):
    """The warden's life (see the module docs); never returns."""
    lib = _walls.libc(config["sonames"])
    _confine.retitle(lib, "dsh-envs-warden")
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _walls.orphan_guard(zygote)
    try:
        init, init_pidfd, channel, alive = _spare(config, zygote, program)
    except (OSError, _walls.SetupError):
        os._exit(_init.SETUP_FAILED)
    env, status, listener, uid_lock = _assigned(control, init_pidfd)
    control.close()
    socket.send_fds(channel, [json.dumps(env).encode()], [status.fileno(), listener])
    os.close(listener)
    socket.send_fds(status, [b"init"], [init_pidfd])
    if config["cgroups"]:  # while the init completes its root
        try:
            folders = _cgroups.make_env(config["cgroups"], env["name"], memory_bytes=env["memory_bytes"],
                                        tasks=env["processes"], uid=env["uid"])
            socket.send_fds(channel, [b"cgroups"], folders)
        except OSError as exc:
            channel.send(f"{exc}".encode())
    forwarding = not isinstance(env["egress"], str) and "netns" in config["mechanisms"]
    listeners = _listeners(_next(channel, init_pidfd)) if forwarding else []
    if config["cgroups"] and _next(channel, init_pidfd) is not None:  # the init is ready: home, now
        try:
            _cgroups.move_home(config["cgroups"], env["name"], init)
            channel.send(b"moved")
        except OSError as exc:
            channel.send(f"{exc}".encode())
    channel.close()
    if listeners:
        import _forward  # noqa: PLC0415 - only here (see its docs)

        _forward.forward(listeners, init_pidfd)
    else:
        _idle(uid_lock, alive)
    os.waitpid(init, 0)
    for directory in _cgroups.env_dirs(config["cgroups"], env["name"]):
        _cgroups.remove_tree(directory)
    os._exit(0)


def _idle(uid_lock, alive):
    """With nothing to forward, the warden only has to be there (its death is the init's,
    and its lock the uid's): it becomes ``sleep``, 0.1 MB instead of a forked interpreter's
    ~2 MB of its own. The parent-death signal survives the exec, and so do the lock and the
    ``alive`` pipe the init watches, made inheritable; its owner kills it when the
    environment ends (and removes the cgroups then)."""
    keep = {fd for fd in (uid_lock, alive) if fd is not None}
    for fd in keep:
        os.set_inheritable(fd, True)
    for name in os.listdir("/proc/self/fd"):  # nothing else crosses: its end of the status socket least of all
        if int(name) > 2 and int(name) not in keep:
            try:
                os.set_inheritable(int(name), False)
            except OSError:
                pass
    for sleep in ("/usr/bin/sleep", "/bin/sleep"):
        try:
            os.execv(sleep, ["dsh-envs-warden", "infinity"])
        except OSError:
            continue
