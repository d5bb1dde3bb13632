"""Watching the host from outside while a run attacks it: its memory, its CPU, its event loop."""

import asyncio
import os
import platform
import threading
import time
from pathlib import Path

_TICKS = os.sysconf("SC_CLK_TCK")


def processes_of(uid):
    """This machine's processes running as ``uid`` (a sandbox's outside id), as /proc paths."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            if any(line.split()[1:2] == [str(uid)] for line in status.splitlines() if line.startswith("Uid:")):
                found.append(entry)
    return found


def rss_bytes(pid="self"):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid="self"):
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


# The system calls in which a thread of an event loop is not stalled, by machine: the
# loop's wait for work (epoll_wait, epoll_pwait, epoll_pwait2), and futex, which is also
# how a thread waits for the GIL, long on a loaded machine (a loop blocked on ray.get, a
# futex too, is caught by Ray's own warning, which the session's cluster scans its logs for).
_NOT_A_STALL = {"x86_64": {202, 232, 281, 441}, "aarch64": {98, 22, 441}}


def syscall_of(pid, tid):
    """The number of the system call that thread ``tid`` of process ``pid`` is in, or
    ``None`` while it runs (read from /proc: the kernel's view, not the process's)."""
    word = Path(f"/proc/{pid}/task/{tid}/syscall").read_text().split()[0]
    return None if word == "running" else int(word)


class SyscallStalls:
    """The longest time any thread ``tids`` of process ``pid`` stayed in one system call
    in which a loop is stalled (see ``_NOT_A_STALL``): a step that blocks without using CPU,
    in a write, a read or a sleep. Call :meth:`sample` every few milliseconds; a run of
    samples in the same call counts from the first to the last."""

    def __init__(self, pid, tids):
        self.pid, self.tids = pid, list(tids)
        self.not_stalls = _NOT_A_STALL[platform.machine()]
        self.longest_s, self.longest_call = 0.0, None
        self._since = {}  # tid -> (the call it is in, when it was first seen there)

    def sample(self):
        now = time.monotonic()
        for tid in self.tids:
            try:
                call = syscall_of(self.pid, tid)
            except (OSError, ValueError, IndexError):  # gone, or between states
                call = None
            if call is None or call in self.not_stalls:
                self._since.pop(tid, None)
                continue
            seen = self._since.setdefault(tid, (call, now))
            if seen[0] != call:
                self._since[tid] = (call, now)
            elif now - seen[1] > self.longest_s:
                self.longest_s, self.longest_call = now - seen[1], call


class HostWatch:
    """While its block runs: how long this process's event loop was ever kept from its other
    work — the longest step it ran (CPU seconds of one callback between two awaits) and the
    longest it sat in one system call that is not its wait for work (read from /proc) —,
    the peak RSS of this process above where it started, and the CPU this process spent.
    No wall-clock gap: on a shared machine a loop waits for a core without being stalled."""

    def __init__(self, sample_s=0.005, files=()):
        self.sample_s = sample_s
        self.files = list(files)  # extra numbers to sample (e.g. a cgroup's memory usage), peak kept
        self.worst_step_s = 0.0
        self.peak_rss_growth = 0
        self.cpu_s = 0.0
        self.peaks = {}

    @property
    def stall_s(self):
        """The longest the loop was kept from its other work, by CPU or in a system call."""
        return max(self.worst_step_s, self._stalls.longest_s)

    def _sample(self, stop):
        while not stop.is_set():
            self.peak_rss_growth = max(self.peak_rss_growth, rss_bytes() - self._rss0)
            self._stalls.sample()
            for path in self.files:
                try:
                    value = int(Path(path).read_text().split()[0])
                except (OSError, ValueError, IndexError):
                    continue
                self.peaks[path] = max(self.peaks.get(path, 0), value)
            stop.wait(self.sample_s)

    def _meter_steps(self):
        """Time every step of this thread's loop (asyncio's ``Handle._run``), by thread CPU."""
        run, loop_thread = asyncio.events.Handle._run, threading.get_native_id()

        def metered(handle):
            if threading.get_native_id() != loop_thread:
                return run(handle)
            started = time.thread_time()
            try:
                return run(handle)
            finally:
                self.worst_step_s = max(self.worst_step_s, time.thread_time() - started)

        asyncio.events.Handle._run = metered
        return run

    async def __aenter__(self):
        self._rss0 = rss_bytes()
        self._cpu0 = cpu_seconds()
        self._stalls = SyscallStalls(os.getpid(), [threading.get_native_id()])
        self._unmetered = self._meter_steps()
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, args=(self._stop,), daemon=True)
        self._sampler.start()
        return self

    async def __aexit__(self, *exc):
        asyncio.events.Handle._run = self._unmetered
        self._stop.set()
        self._sampler.join()
        self.cpu_s = cpu_seconds() - self._cpu0
        return False


async def watched(runtime, program, bindings, **watch):
    """``(result, watch)`` of one run under a :class:`HostWatch`."""
    async with HostWatch(**watch) as w:
        result = await runtime.run(program, bindings)
    return result, w
