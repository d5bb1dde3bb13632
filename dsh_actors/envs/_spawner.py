"""An environment's spawner: where its commands are born, already inside their cgroups.

Forked by the init once every wall is up (so it has them all, and can only add to them),
one per command in flight (:mod:`_commands`); a top-level module of the trusted processes.
It joins the environment's bounded cgroup (``box``) for good, and a tracking slot. Asked by
the init, it ``posix_spawn``-s the command right where it is (``vfork`` and ``exec``: nothing
is copied), first moving to the slot the init named if that is another (only when its last
command left a process behind, or the init has as many spawners as it may: a cgroup move
takes a lock every fork on the node waits for, and after an idle spell waits for an RCU grace
period, about 8 ms on these machines), and answers with its pid; it reaps its commands and
reports each exit.

Why a process of its own, not the init: a process's children are born in its cgroups, and
the init stays outside ``box`` so the memory bound's OOM killer never picks it. The
spawner is as unprivileged as a command (the same uid, the same walls): a command may kill
or stop it (the init then forks another, and reaps the orphans itself) but can neither
trace it nor read its memory (seccomp; it is not dumpable).

Before it acts on a request it writes its ``seq`` (the requests sent to it are numbered in
order) to a page it shares with the init (``taken``): if it dies, the init resends the
requests it never took to the next spawner, and only the one it was spawning when it died
can have started unseen (that one ends killed).

Messages on its ``SOCK_SEQPACKET`` pair with the init (msgpack)::

    init -> {"n", "seq", "command", "slot"} + fds [output pipe, working folder]
    spawner -> {"n", "pid"} | {"n", "errno"}         at once
    spawner -> {"exit": pid, "status": wait status, "usage": [bytes written, CPU seconds]}
                                                     when the command's bash ends
"""

import os
import resource
import selectors
import signal

import msgpack

import _confine
import _children
import _wire

BASH = "/bin/bash"

RESET_SIGNALS = tuple(s for s in range(1, 32) if s not in (signal.SIGKILL, signal.SIGSTOP))
"""Signals a command starts with at their default action: Python ignores ``SIGPIPE`` and
``SIGXFSZ``, and an ignored signal stays ignored across ``exec`` (``yes | head`` would never
end, and a file over its size cap would not stop its writer)."""


def _usage():
    """What the spawner's reaped children used, as the kernel adds it to their reaper: bytes
    written to storage and CPU seconds. The init cannot read them (the spawner is not
    dumpable), so each exit carries them."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return [children.ru_oublock * 512, children.ru_utime + children.ru_stime]


class Spawner:
    def __init__(self, sock, cgroups, env, taken):
        self.sock, self.cgroups, self.env, self.taken = sock, cgroups, env, taken
        self.parked = None

    def _send(self, message):
        self.sock.send(msgpack.packb(message, use_bin_type=True))

    def spawn(self, request, fds):
        self.taken[0] = request["seq"]
        output, folder = fds
        try:
            if self.cgroups is not None and self.parked != request["slot"]:
                self.cgroups.park(request["slot"])  # the command overlaps another, or follows leftovers
                self.parked = request["slot"]
            os.fchdir(folder)
            pid = os.posix_spawn(BASH, ["bash", "-c", request["command"]], self.env, setsid=True,
                                 setsigdef=RESET_SIGNALS, file_actions=[
                                     (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                                     (os.POSIX_SPAWN_DUP2, output, 1), (os.POSIX_SPAWN_DUP2, output, 2)])
        except OSError as exc:
            self._send({"n": request["n"], "errno": exc.errno, "error": exc.strerror or str(exc)})
            return
        finally:
            os.close(output)
            os.close(folder)
        self._send({"n": request["n"], "pid": pid})

    def reap(self, wake):
        for pid, status in _children.ended_children(wake):
            self._send({"exit": pid, "status": status, "usage": _usage()})

    def run(self, first_slot, lib):
        """The spawner's life; it ends (the process exits) when the init's end closes."""
        _confine.retitle(lib, "dsh-envs-spawner")
        wake = _children.watch_children()
        if self.cgroups is not None:
            self.cgroups.join_box()
            self.cgroups.park(first_slot)
            self.parked = first_slot
        selector = selectors.DefaultSelector()
        selector.register(self.sock, selectors.EVENT_READ, "request")
        selector.register(wake, selectors.EVENT_READ, "children")
        while True:
            for key, _ in selector.select():
                if key.data == "request":
                    data, fds = _wire.recv_fds(self.sock, 1 << 20, 2)
                    if not data:
                        os._exit(0)
                    self.spawn(msgpack.unpackb(data, raw=False), fds)
                self.reap(wake)  # after each spawn too: with many queued, exits are still told at once
