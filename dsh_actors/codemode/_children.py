"""A process's children, reaped from a selector loop: ``SIGCHLD`` as a readable descriptor.

Trusted code (standard library only), imported by path as :mod:`_walls` is: Code Mode's
fork server and Episode environments' spawner, zygote and server wait on it.
"""

import os
import signal


def watch_children():
    """``SIGCHLD`` as a readable descriptor (the read end of a non-blocking pipe the signal
    writes a byte to): what a selector loop waits on to reap its children. Code Mode's fork
    server and Episode environments' processes use it."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    return wake_r


def ended_children(wake_fd):
    """Empty ``wake_fd`` (from :func:`watch_children`), then reap: ``[(pid, wait status)]``
    of every child that ended."""
    try:
        while os.read(wake_fd, 4096):
            pass
    except BlockingIOError:
        pass
    return reaped_now()


def reaped_now():
    """Reap every child that ended by now: ``[(pid, wait status)]``."""
    ended = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return ended
        if pid == 0:
            return ended
        ended.append((pid, status))
