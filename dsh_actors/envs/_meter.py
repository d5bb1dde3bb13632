"""What an environment has used, as its init measures it against its bounds.

A top-level module of the init (only the standard library). Each bound, and who enforces it:

=========  ===========================================================================
memory     the kernel: the ``box`` cgroup's limit (the OOM killer stops a process); the
           init reads the cgroup's OOM-kill count to say which bound stopped a command
processes  the kernel: the ``box`` cgroup's ``pids.max`` (and ``RLIMIT_NPROC`` per uid); the
           init reads how many forks it refused
cpu        measured: CPU seconds from the cgroup (``cpu.stat``; without cgroups, the init's
           reaped children's and the live processes' times from ``/proc``), over the
           environment's life, checked every :data:`WATCH_S` while a process runs in it
           and when a command ends
disk       measured: bytes the environment's processes wrote to storage, from the kernel's
           per-process I/O accounting (``write_bytes`` less ``cancelled_write_bytes`` in
           ``/proc/<pid>/io``: the live processes' own, and the init's, which holds every
           reaped process's), so a file written and deleted, or written while open and
           unlinked, counts; ``fallocate`` is refused so no space is taken unwritten.
           Each single file is also capped by the kernel (``RLIMIT_FSIZE``). The private
           ``/tmp`` is a tmpfs: it counts as memory, not disk
=========  ===========================================================================

Once ``cpu`` or ``disk`` is spent, it stays spent: the environment's commands are killed and
every later one is refused with that bound.
"""

import os

WATCH_S = 0.05
"""How often a running environment is measured (20 Hz: about 0.1 ms each time for a few
dozen processes, so at most ~0.2 % of a core per busy environment); a CPU burner overshoots
its budget by at most this times the cores it uses."""

_TICKS = os.sysconf("SC_CLK_TCK")


def _io_written(fd_or_path):
    """``write_bytes - cancelled_write_bytes`` of one process (0 if it is gone)."""
    try:
        if isinstance(fd_or_path, int):
            text = os.pread(fd_or_path, 1024, 0).decode()
        else:
            with open(fd_or_path) as handle:
                text = handle.read()
    except (OSError, ValueError):
        return 0
    values = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    return int(values.get("write_bytes", 0)) - int(values.get("cancelled_write_bytes", 0))


def _times(stat_text, children):
    fields = stat_text.rsplit(")", 1)[1].split()
    first = 13 if children else 11  # cutime, cstime / utime, stime
    return (int(fields[first]) + int(fields[first + 1])) / _TICKS


def _live():
    """The other processes of this PID namespace (this init is 1)."""
    return [name for name in os.listdir("/proc") if name.isdigit() and name != "1"]


class Meter:
    """Reads what the environment used (see the module docs)."""

    def __init__(self, cgroups, *, cpu_s, disk_bytes, processes):
        self.cgroups, self.cpu_limit, self.disk_limit, self.processes = cgroups, cpu_s, disk_bytes, processes
        self._own_io = os.open("/proc/self/io", os.O_RDONLY | os.O_CLOEXEC)
        self._own_stat = os.open("/proc/self/stat", os.O_RDONLY | os.O_CLOEXEC)
        self._base_written = _io_written(self._own_io)
        self._live_written = 0  # the live processes' share, as of the last full reading
        self._cpu_tracked = cgroups is not None and cgroups.cpu_s() is not None
        self.spent = None

    def events(self):
        """``(OOM kills, forks refused)`` so far: a command compares them at its end."""
        if self.cgroups is None:
            return 0, 0
        return self.cgroups.oom_kills(), self.cgroups.pids_refused()

    def event_bound(self, before):
        """The bound an event since ``before`` (from :meth:`events`) says, or ``None``."""
        oom, refused = self.events()
        if oom > before[0]:
            return "memory"
        if refused > before[1]:
            return "processes"
        return None

    def written(self, full):
        """Bytes written so far (``full``: the live processes read now, else as last read)."""
        if full:
            self._live_written = sum(_io_written(f"/proc/{pid}/io") for pid in _live())
        return _io_written(self._own_io) - self._base_written + self._live_written

    def cpu_used(self, full):
        if self._cpu_tracked:
            return self.cgroups.cpu_s() or 0.0
        total = _times(os.pread(self._own_stat, 1024, 0).decode(), children=True)
        if full:
            for pid in _live():
                try:
                    with open(f"/proc/{pid}/stat") as handle:
                        total += _times(handle.read(), children=False)
                except (OSError, IndexError, ValueError):
                    pass
        return total

    def check_life(self, full):
        """``"cpu"`` or ``"disk"`` once that life bound is spent (and from then on)."""
        if self.spent is None:
            if self.cpu_used(full) >= self.cpu_limit:
                self.spent = "cpu"
            elif self.written(full) >= self.disk_limit:
                self.spent = "disk"
        return self.spent

    def allowance(self):
        """Bytes a write may still add."""
        return max(0, self.disk_limit - self.written(full=True))

    def too_many_processes(self):
        """Without a pids cgroup (no event to read): whether the count is at the bound."""
        return self.cgroups is None and len(_live()) + 1 >= self.processes
