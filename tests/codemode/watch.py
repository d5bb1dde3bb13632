"""Watching the host from outside while a run attacks it: its memory, its CPU, its event loop."""

import asyncio
import os
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
