"""The warm parent: one pre-imported interpreter per backend that forks environments.

Started by the backend (``_parent.py``) as ``python -I -S -B _zygote.py CONFIG`` with an
empty environment and one end of a ``SOCK_SEQPACKET`` socket pair; trusted code that never
reads a byte an environment wrote. It imports once everything a warden and an init run
(so forking one costs no import, and nothing is imported once the host's files are out of
sight), compiles the seccomp program once, freezes the garbage collector's view of all
that (a forked child then copies fewer pages), and waits. For each ``start`` it:

1. (on a root host) claims a uid for the environment: an ``flock`` on ``<base>/uids/<uid>``,
   the first free one from a random place in :data:`ENV_UIDS`, held by the warden while it
   lives, so two environments on the node never share one, whichever backend made them;
2. binds the environment's socket (in the backend's 0700 folder) and listens;
3. hands all that to a spare (:data:`SPARES`: a warden, ``_warden.py``, forked ahead with
   its init, which already built what every environment has), which does the rest;
4. answers the backend with the warden's pidfd and the backend's end of the environment's
   status socket, then forks the next spare once no request waits.

It dies with the backend's process (the parent-death signal of the thread that started
it, and a check that it is still there), and every warden dies with it.

``python _zygote.py CONFIG`` with ``probe`` in ``CONFIG`` instead prints which walls
this host has (``{mechanism: "ok" | why not}``) and exits.
"""

import json
import sys

CONFIG = json.loads(sys.argv[1])
for _lib in CONFIG["libs"]:
    sys.path.insert(0, _lib)

import _boot  # noqa: E402 - Code Mode's: the C library's path before landlockpy loads it

_boot.prepare(CONFIG)

import array  # noqa: E402,F401 - socket.send_fds imports it when first called
import ctypes  # noqa: E402
import fcntl  # noqa: E402
import gc  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import selectors  # noqa: E402
import socket  # noqa: E402

import landlockpy  # noqa: E402
import msgpack  # noqa: E402

import _confine  # noqa: E402
import _children  # noqa: E402
import _walls  # noqa: E402
import _warden  # noqa: E402

ENV_UIDS = (300_000, 65_536)
"""The uids (and gids) a root host gives its environments, one each while it lives: clear
of real users, of Code Mode's sandboxes (200,000 + 4,096) and of the 65,534 of nobody;
65,536 of them is more than a node runs at once (its PIDs run out first)."""


def probe():
    """Each wall's state here, tried in throwaway children: ``{name: "ok" | why}``."""
    lib = _walls.libc(CONFIG["sonames"])
    root = os.geteuid() == 0
    report = {}

    def attempt(name, action):
        child = os.fork()
        if child == 0:
            try:
                action()
                os._exit(0)
            except BaseException:  # noqa: BLE001 - the exit status says it
                os._exit(1)
        if os.waitpid(child, 0)[1] == 0:
            report[name] = "ok"
        else:
            report.setdefault(name, "refused by this host")

    def unshare(flag):
        if lib.unshare(flag | (0 if root else _walls.CLONE_NEWUSER)) != 0:
            raise OSError(ctypes.get_errno(), "unshare")

    report["userns"] = "ok (not needed: the backend runs as root)" if root else None
    if not root:
        attempt("userns", lambda: unshare(0))
    for name, flag in (("mountns", _walls.CLONE_NEWNS), ("pidns", _walls.CLONE_NEWPID),
                       ("netns", _walls.CLONE_NEWNET), ("ipcns", _walls.CLONE_NEWIPC),
                       ("utsns", _walls.CLONE_NEWUTS)):
        attempt(name, lambda flag=flag: unshare(flag))
    abi = landlockpy.abi_version()
    report["landlock"] = "ok" if abi >= 6 else f"Landlock ABI {abi} (signal and socket scopes need 6)"
    try:
        program = _confine.compile_filter()

        def load():
            lib.prctl(_walls.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            _confine.load_filter(lib, program)

        attempt("seccomp", load)
    except Exception as exc:  # noqa: BLE001 - libseccomp missing or refusing
        report["seccomp"] = f"{type(exc).__name__}: {exc}"
    return {name: why for name, why in report.items() if why is not None}


SPARES = 2
"""Environments kept forked and prepared ahead of the next starts (a warden and its init
each: two idle processes, a few MB). A start takes one and only completes it; the warm
parent forks the replacement once no request waits. Starts in a burst past the spares
wait for those forks (about 1 ms of this process each on these machines)."""


class Zygote:
    def __init__(self, control):
        self.control = control
        self.program = _confine.compile_filter() if "seccomp" in CONFIG["mechanisms"] else b""
        self.next_uid = random.randrange(ENV_UIDS[1])
        self.selector = selectors.DefaultSelector()
        self.wake = None
        self.spares = []  # (warden pid, the warm parent's end of its control socket)

    def send(self, message, fds=()):
        socket.send_fds(self.control, [msgpack.packb(message, use_bin_type=True)], list(fds))

    def claim_uid(self):
        """A uid no other live environment on the node holds, and the lock that says so."""
        folder = CONFIG["uid_locks"]
        for _ in range(ENV_UIDS[1]):
            uid = ENV_UIDS[0] + self.next_uid % ENV_UIDS[1]
            self.next_uid += 1
            fd = os.open(os.path.join(folder, str(uid)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return uid, fd
            except BlockingIOError:
                os.close(fd)
        raise RuntimeError("every environment uid is held by a live environment")

    def fork_spare(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        zygote = os.getpid()
        pid = os.fork()
        if pid == 0:
            try:
                for fd in (self.control.fileno(), self.wake, self.selector.fileno(),
                           *(s.fileno() for _, s in self.spares)):
                    os.close(fd)
                ours.close()
                _warden.main(CONFIG, zygote=zygote, control=theirs, program=self.program)
            finally:
                os._exit(_walls.SETUP_FAILED)
        theirs.close()
        self.spares.append((pid, ours))

    def assign(self, env, fds):
        """Hand ``env`` to a spare (one made now if none is left alive): its warden's pid."""
        while True:
            if not self.spares:
                self.fork_spare()
            pid, control = self.spares.pop(0)
            try:
                socket.send_fds(control, [json.dumps(env).encode()], fds)
                return pid
            except OSError:
                continue  # it died preparing: the next one
            finally:
                control.close()

    def start(self, request):
        env, number = request["env"], request["n"]
        held = []
        try:
            uid, uid_lock = self.claim_uid() if CONFIG["host_root"] else (None, None)
            if uid_lock is not None:
                held.append(uid_lock)
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            held.append(listener.detach())
            os.set_inheritable(held[-1], False)
            _bind(held[-1], env["socket"])
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            held.append(theirs.detach())
            pid = self.assign({**env, "uid": uid}, [held[-1], held[-2], *([uid_lock] if uid_lock is not None else [])])
            pidfd = os.pidfd_open(pid)
        except Exception as exc:  # noqa: BLE001 - reported to the backend
            self.send({"op": "failed", "n": number, "error": f"{type(exc).__name__}: {exc}"})
            return
        finally:
            for fd in held:
                os.close(fd)
        try:
            self.send({"op": "started", "n": number, "pid": pid, "uid": uid}, (pidfd, ours.fileno()))
        finally:
            os.close(pidfd)
            ours.close()

    def serve(self):
        self.wake = _children.watch_children()
        self.selector.register(self.control, selectors.EVENT_READ, "control")
        self.selector.register(self.wake, selectors.EVENT_READ, "children")
        self.send({"op": "ready", "pid": os.getpid()})
        while True:
            events = self.selector.select(0 if len(self.spares) < SPARES else None)
            if not events:
                self.fork_spare()  # nothing waits: make the next start's spare now
            for key, _ in events:
                if key.data == "control":
                    data = self.control.recv(1 << 20)
                    if not data:
                        return  # the backend closed its end (or died): end with it
                    request = msgpack.unpackb(data, raw=False)
                    if request.get("op") == "start":
                        self.start(request)
                else:
                    _children.ended_children(self.wake)  # wardens: nothing to say about them


def _bind(fd, path):
    """Bind and listen on ``path``, a unix socket only the backend's user may open."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=os.dup(fd))
    try:
        sock.bind(path)
        os.chmod(path, 0o600)
        sock.listen(128)
    finally:
        sock.close()


def main():
    if CONFIG.get("probe"):
        sys.stdout.write(json.dumps(probe()))
        return
    _confine.retitle(_walls.libc(CONFIG["sonames"]), "dsh-envs-parent")
    _walls.orphan_guard(CONFIG["host_pid"])  # the backend's process dies: so do we
    control = socket.socket(fileno=CONFIG["control_fd"])
    zygote = Zygote(control)
    gc.freeze()  # what the forks share: the collector never touches (so never copies) it
    try:
        zygote.serve()
    except OSError:  # the backend's end is gone (a send failed): end with it
        pass


if __name__ == "__main__":
    main()
