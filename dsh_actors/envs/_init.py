"""An environment's init: PID 1 of its PID namespace, walled in, then serving.

Forked by the environment's warden (``_warden.py``) right after it unshared the PID
namespace, while both wait as a spare in the warm parent; a top-level module of the trusted
processes. In order, while still privileged (root of the host, or of the warden's user
namespace):

0. as a spare: new mount, network, IPC and UTS namespaces (those the host has and was not
   excused), and the part of its root every environment has (``Root.prepare``); then it
   waits for its assignment (the environment's spec, status socket and listening socket);
1. the network its egress allows (``_egress.configure``; the listeners go to the warden);
2. the rest of its root (``Root.complete``); on a root host the workspace handed to the
   environment's uid (each environment has one: the warm parent claims it);
3. its cgroups, which the warden made meanwhile (``_cgroups.make_env``, in parallel: it
   sends their folders' descriptors; once ready, the init asks it to move it home, outside
   the bounds, so that move is never on a start's path);
4. rlimits, then the drop (``_confine``): the uid, no capabilities, no_new_privs, the
   parent-death signal again (a uid change clears it), Landlock, seccomp;
5. ``ready`` on the status socket, and the server (``_server.Server``) until the end; its
   first act is to fork the spawner (``_spawner``), where commands are born.

Any failure on the way is reported on the status socket (``failed: ...``) and ends it.
"""

import ctypes
import json
import os
import select
import signal
import socket
import stat

import _cgroups
import _confine
import _egress
import _walls
import _wire
from _files import Workspace
from _meter import Meter
from _rootfs import Root
from _server import Server

INSIDE_ID = _walls.INSIDE_ID
"""The uid commands have inside a user namespace (an ordinary-user host): 1000."""

SETUP_FAILED = _walls.SETUP_FAILED

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _identity(uid):
    """``/etc/passwd`` and ``/etc/group`` naming the environment's user ``agent``."""
    return {
        "/etc/passwd": f"root:x:0:0:root:/root:/usr/sbin/nologin\nagent:x:{uid}:{uid}:agent:/tmp:/bin/bash\n"
                       "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        "/etc/group": f"root:x:0:\nagent:x:{uid}:\nnogroup:x:65534:\n",
    }


def _hosts(names):
    """``/etc/hosts`` with the egress names' stand-in addresses first (the first match wins,
    so a name the host's file already has points at its forwarder too)."""
    try:
        with open("/etc/hosts") as handle:
            base = handle.read()
    except OSError:
        base = "127.0.0.1\tlocalhost\n"
    return names + "\n" + base


def _chown_tree(path, uid):
    """Give the workspace to the environment's uid (before any of its processes runs).
    A regular file with several links is left alone: a link may be a file elsewhere."""
    os.chown(path, uid, uid)
    for _, folders, files, folder_fd in os.fwalk(path):
        for name in folders + files:
            try:
                info = os.stat(name, dir_fd=folder_fd, follow_symlinks=False)
                if not (stat.S_ISREG(info.st_mode) and info.st_nlink > 1):
                    os.chown(name, uid, uid, dir_fd=folder_fd, follow_symlinks=False)
            except OSError:
                pass


def _die_with_warden(lib, alive_fd):
    """Arm the parent-death signal (again: a uid change clears it), then check that the
    warden did not die before: its end of the ``alive`` pipe would be closed."""
    lib.prctl(_walls.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    readable, _, _ = select.select([alive_fd], [], [], 0)
    if readable:
        os._exit(SETUP_FAILED)


def _unshare_flags(mechanisms):
    flags = _walls.CLONE_NEWNS
    for name, flag in (("netns", _walls.CLONE_NEWNET), ("ipcns", _walls.CLONE_NEWIPC),
                       ("utsns", _walls.CLONE_NEWUTS)):
        if name in mechanisms:
            flags |= flag
    return flags


def _process_limit(processes, cgroups):
    """The uid's ``RLIMIT_NPROC``. It is the processes bound where no pids cgroup is (the init
    and a spawner are counted too). Where one is, it is only a backstop, set well above the
    cgroup's: the uid's count also holds processes that are exiting (a v1 pids cgroup has let
    go of them already) and the zombies not yet reaped, and a fork it refuses leaves no event
    the init can read, so a fork bomb that met it first would go on churning, uncharged."""
    if cgroups is not None and cgroups.tasks() is not None:
        return 2 * processes + 16
    return processes + 2


def _cgroup_folders(channel):
    """The descriptors of the environment's cgroup folders, once the warden made them."""
    data, fds = _wire.recv_fds(channel, 4096, 16)
    if data != b"cgroups":
        for fd in fds:
            os.close(fd)
        raise _walls.SetupError(f"the warden could not make the cgroups: {data.decode(errors='replace')}")
    return fds


def _assignment(channel, alive_fd):
    """Wait, as a spare, for the environment it becomes: ``(env, status, listener)`` from
    the warden, or the end (the warden died)."""
    readable, _, _ = select.select([channel, alive_fd], [], [])
    if channel not in readable:
        os._exit(SETUP_FAILED)
    data, fds = _wire.recv_fds(channel, 1 << 20, 2)
    if len(fds) != 2:
        os._exit(SETUP_FAILED)
    return json.loads(data), socket.socket(fileno=fds[0]), socket.socket(fileno=fds[1])


def main(config, *, alive_fd, channel, program):
    """The init's life (see the module docs); never returns. ``channel``: a socket to the
    warden, which sends the assignment, then the cgroups (made meanwhile), and takes the
    egress listeners and the request to move home."""
    lib = _walls.libc(config["sonames"])
    _confine.retitle(lib, "dsh-envs-init")
    _die_with_warden(lib, alive_fd)
    mechanisms, host_root = set(config["mechanisms"]), config["host_root"]
    root = Root(lib, config["stage"])
    try:  # as a spare: what every environment of this backend has
        if lib.unshare(_unshare_flags(mechanisms)) != 0:
            raise _walls.SetupError(f"unshare: {os.strerror(ctypes.get_errno())}")
        if "utsns" in mechanisms:
            lib.sethostname(b"env", 3)
        root.prepare(readonly=config["readonly"], shm_mb=config["shm_mb"])
    except BaseException:  # noqa: BLE001 - the warden reports it when the spare is asked for
        os._exit(SETUP_FAILED)
    env, status, listener = _assignment(channel, alive_fd)
    uid = env["uid"]
    try:
        listeners, names = _egress.configure(env["egress"]) if "netns" in mechanisms else ([], "")
        files = _identity(uid if host_root else INSIDE_ID)
        if names:
            files["/etc/hosts"] = _hosts(names)
        workspace_path = env["workspace"]
        root.complete(workspace=workspace_path, tmp_mb=env["tmp_mb"], hidden=env["hidden"], files=files)
        if host_root:
            _chown_tree(workspace_path, uid)
        workspace = Workspace(lib, workspace_path)
        if listeners:
            destinations = ";".join(f"{host}:{port}" for _, host, port in listeners).encode()
            socket.send_fds(channel, [destinations], [s.fileno() for s, _, _ in listeners])
            for sock, _, _ in listeners:
                sock.close()
        cgroups = None
        if config["cgroups"]:
            cgroups = _cgroups.EnvCgroups(config["cgroups"], _cgroup_folders(channel))
        meter = Meter(cgroups, cpu_s=env["cpu_s"], disk_bytes=env["disk_bytes"], processes=env["processes"])
        _confine.set_limits(file_bytes=env["disk_bytes"], processes=_process_limit(env["processes"], cgroups),
                            memory_bytes=None if cgroups is not None else env["memory_bytes"])
        os.umask(0o022)
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # PID 1 gets only the signals it handles
        _confine.drop_privileges(lib, uid if host_root else None)
        _die_with_warden(lib, alive_fd)
        if "landlock" in mechanisms:
            _confine.landlock(lib, writable=(workspace_path, "/tmp", "/dev/shm"),
                              extra_writable_fds=cgroups.writable_dirs() if cgroups is not None else (),
                              tcp_ports=None if "netns" in mechanisms else _egress.ports(env["egress"]))
        if "seccomp" in mechanisms:
            _confine.load_filter(lib, program)
        server = Server(listener=listener, secret=env["secret"], env_id=env["env_id"], workspace=workspace,
                        cgroups=cgroups, meter=meter, warden=channel, spawner_idle_s=config["spawner_idle_s"],
                        env={"PATH": PATH, "HOME": "/tmp", "LANG": "C.UTF-8", **dict(env["env"])})
    except BaseException as exc:  # noqa: BLE001 - whatever failed, it is reported and the init ends
        try:
            status.send(f"failed: {type(exc).__name__}: {exc}".encode()[:4096])
        finally:
            os._exit(SETUP_FAILED)
    status.send(b"ready")
    server.serve()
