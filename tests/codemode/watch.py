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
    """While its block runs: the worst gap between ticks of the running event loop, the
    peak RSS of this process above where it started, and the CPU this process spent."""

    def __init__(self, tick_s=0.005, sample_s=0.005, files=()):
        self.tick_s, self.sample_s = tick_s, sample_s
        self.files = list(files)  # extra numbers to sample (e.g. a cgroup's memory usage), peak kept
        self.worst_gap_s = 0.0
        self.peak_rss_growth = 0
        self.cpu_s = 0.0
        self.peaks = {}

    async def _tick(self):
        last = time.monotonic()
        while True:
            await asyncio.sleep(self.tick_s)
            now = time.monotonic()
            self.worst_gap_s = max(self.worst_gap_s, now - last)
            last = now

    def _sample(self, stop):
        while not stop.is_set():
            self.peak_rss_growth = max(self.peak_rss_growth, rss_bytes() - self._rss0)
            for path in self.files:
                try:
                    value = int(Path(path).read_text().split()[0])
                except (OSError, ValueError, IndexError):
                    continue
                self.peaks[path] = max(self.peaks.get(path, 0), value)
            stop.wait(self.sample_s)

    async def __aenter__(self):
        self._rss0 = rss_bytes()
        self._cpu0 = cpu_seconds()
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, args=(self._stop,), daemon=True)
        self._sampler.start()
        self._ticker = asyncio.ensure_future(self._tick())
        await asyncio.sleep(0)
        return self

    async def __aexit__(self, *exc):
        self._ticker.cancel()
        self._stop.set()
        self._sampler.join()
        self.cpu_s = cpu_seconds() - self._cpu0
        return False


async def watched(runtime, program, bindings, **watch):
    """``(result, watch)`` of one run under a :class:`HostWatch`."""
    async with HostWatch(**watch) as w:
        result = await runtime.run(program, bindings)
    return result, w
