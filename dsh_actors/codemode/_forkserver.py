"""The fork server: one pre-imported interpreter that forks a fresh sandbox per request.

Started by the host (``forkserver.py``) as ``python -I -S -B _forkserver.py CONFIG`` with an
empty environment and one end of a ``SOCK_SEQPACKET`` socket pair. Trusted code: it never
reads a model-written byte (programs go to each sandbox over that sandbox's own pipes).

It imports, once, everything a run needs (the walls, the program runner, and the standard
library modules programs commonly import), then waits. For each ``spawn`` request it
makes the run's three pipes, forks a launcher that applies every wall of ``_walls.py``
afresh (cgroups, namespaces, a private root, a new user namespace, no_new_privs, Landlock,
rlimits, seccomp) and runs the program under them, and sends the host its ends of the
pipes and a pidfd of the launcher. When a launcher exits it reports the exit status (and
whether the memory cgroup killed it), then removes the run's cgroups.

What a run shares with the others because of the fork: the pre-imported modules' code
and state as they were at start (no run's state: each run is a fresh fork of the idle
server), the address-space layout and the hash seed. ``random`` reseeds itself in every
fork. The server dies with the host process; a launcher dies with the server.
"""

import json
import sys

CONFIG = json.loads(sys.argv[1])
for _lib in CONFIG["libs"]:
    sys.path.insert(0, _lib)

import _boot  # noqa: E402

_boot.prepare(CONFIG["launch"])

import collections  # noqa: E402
import os  # noqa: E402
import selectors  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402

import msgpack  # noqa: E402

import _child  # noqa: E402
import _children  # noqa: E402
import _walls  # noqa: E402

for _name in CONFIG["preload"]:  # a program's `import json` is then free in every run
    try:
        __import__(_name)
    except Exception:  # noqa: BLE001 - a module this install lacks is simply not preloaded
        pass

_RETRY_S = 0.05


def _program(frames_fd):
    _child.main(frames_fd)
    _child.finish()


def _launch(server, slot, to_child_r, frames_w, stray_w):
    """In the forked launcher: the run's fds in place, every other fd closed, then the walls."""
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        _walls.orphan_guard(server)
        os.dup2(to_child_r, 0)
        os.dup2(stray_w, 1)
        os.dup2(stray_w, 2)
        os.dup2(frames_w, _walls.FRAMES_FD)
        os.closerange(_walls.FRAMES_FD + 1, 1 << 20)
        config = dict(CONFIG["launch"])
        if config["outside_ids"] is None:  # ids of this run's own (a slot freed when it ends)
            base = config["outside_range"][0] + slot
            config["outside_ids"] = [base, base]
        launch = _walls.Launch(config)
        launch.join_cgroups()
        launch.run(_program)
    except BaseException as exc:  # noqa: BLE001 - whatever failed, the launcher reports it and ends
        _walls.die(f"{type(exc).__name__}: {exc}")
    os._exit(_walls.SETUP_FAILED)


class Server:
    def __init__(self, control):
        self.control = control
        self.cgroups = [parent for parent, _ in CONFIG["launch"].get("cgroups", ())]
        self.leftover = []  # run cgroups not yet removable (their processes are still dying)
        # outside ids: the longest free is used first, so an id is never reused soon after its run
        self.free_slots = collections.deque(range(CONFIG["launch"]["outside_range"][1]))
        self.slots = {}  # launcher pid -> its slot

    def send(self, message, fds=()):
        socket.send_fds(self.control, [msgpack.packb(message)], list(fds))

    def spawn(self, request_id):
        pipes = []
        if not self.free_slots:
            self.send({"op": "failed", "id": request_id, "error": "every outside id is in use by a running sandbox"})
            return
        slot = self.free_slots.popleft()
        try:
            for _ in range(3):
                pipes.append(os.pipe())
            server = os.getpid()
            pid = os.fork()
        except OSError as exc:
            self.free_slots.append(slot)
            for pair in pipes:
                for fd in pair:
                    os.close(fd)
            self.send({"op": "failed", "id": request_id, "error": f"{type(exc).__name__}: {exc}"})
            return
        (to_child_r, to_child_w), (frames_r, frames_w), (stray_r, stray_w) = pipes
        if pid == 0:
            _launch(server, slot, to_child_r, frames_w, stray_w)
        self.slots[pid] = slot
        for fd in (to_child_r, frames_w, stray_w):
            os.close(fd)
        pidfd = os.pidfd_open(pid)
        try:
            self.send({"op": "spawned", "id": request_id, "pid": pid}, (to_child_w, frames_r, stray_r, pidfd))
        finally:
            for fd in (to_child_w, frames_r, stray_r, pidfd):
                os.close(fd)

    def reap(self, wake_fd):
        for pid, status in _children.ended_children(wake_fd):
            code = os.waitstatus_to_exitcode(status)
            if pid in self.slots:
                self.free_slots.append(self.slots.pop(pid))
            runs = [os.path.join(parent, f"run-{pid}") for parent in self.cgroups]
            self.send({"op": "exited", "pid": pid, "code": code, "oom": any(_oom_killed(run) for run in runs)})
            self.leftover.extend(runs)

    def remove_leftovers(self):
        keep = []
        for path in self.leftover:
            try:
                os.rmdir(path)
            except FileNotFoundError:
                pass
            except OSError:
                keep.append(path)  # still has processes: the kernel is ending them
        self.leftover = keep

    def serve(self):
        wake_r = _children.watch_children()
        selector = selectors.DefaultSelector()
        selector.register(self.control, selectors.EVENT_READ, "control")
        selector.register(wake_r, selectors.EVENT_READ, "child")
        self.send({"op": "ready", "pid": os.getpid()})
        while True:
            for key, _ in selector.select(_RETRY_S if self.leftover else None):
                if key.data == "control":
                    data = self.control.recv(65536)
                    if not data:
                        return  # the host closed its end (or died): end with it
                    request = msgpack.unpackb(data)
                    if request.get("op") == "spawn":
                        self.spawn(request["id"])
            self.reap(wake_r)
            if self.leftover:
                self.remove_leftovers()


def _oom_killed(run):
    """Whether the memory cgroup at ``run`` killed a process for being over its limit."""
    for name in ("memory.oom_control", "memory.events"):  # cgroup v1, v2
        try:
            with open(os.path.join(run, name)) as handle:
                for line in handle:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill" and int(value) > 0:
                        return True
        except OSError:
            continue
    return False


def main():
    _walls.libc(CONFIG["launch"]["sonames"])
    _walls.orphan_guard(CONFIG["host_pid"])  # the host process dies: so do we
    control = socket.socket(fileno=CONFIG["control_fd"])
    try:
        Server(control).serve()
    except OSError:  # the host's end is gone (a send failed): end with it
        pass


if __name__ == "__main__":
    main()
