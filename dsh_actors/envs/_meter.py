"""What an environment has used, as its init measures it against its bounds.

A top-level module of the init (only the standard library). Each bound, and who enforces it:

=========  ===========================================================================
memory     the kernel: the ``box`` cgroup's limit (the OOM killer stops a process); the
           init reads the cgroup's OOM-kill count to say which bound stopped a command
processes  the kernel: the ``box`` cgroup's ``pids.max`` (and ``RLIMIT_NPROC`` per uid); the
           init reads how many forks it refused, and charges them to the leftovers of
           ended commands if any, else to the running command holding the most processes
           (never to a command beside a fork bomb, nor after the bound stopped holding)
cpu        measured: CPU seconds from the cgroup (``cpu.stat``; without cgroups, the reaped
           processes' times from ``getrusage`` and the live ones' from ``/proc``), over the
           environment's life, checked when each command ends, and every :data:`WATCH_S`
           while one has run longer than that or a finished one left something running
disk       measured: bytes the environment's processes wrote to storage, from the kernel's
           per-process I/O accounting (``write_bytes`` of the live processes in
           ``/proc/<pid>/io``; for the reaped ones, their reapers' ``getrusage`` output
           blocks), so a file written and deleted, or written while open and unlinked,
           counts; ``fallocate`` is refused so no space is taken unwritten.
           Each single file is also capped by the kernel (``RLIMIT_FSIZE``). The private
           ``/tmp`` is a tmpfs: it counts as memory, not disk
=========  ===========================================================================

Once ``cpu`` or ``disk`` is spent, it stays spent: the environment's commands are killed and
every later one is refused with that bound.
"""

import os
import resource

WATCH_S = 0.05
"""How often a running environment is measured (20 Hz: about 0.1 ms each time for a few
dozen processes, so at most ~0.2 % of a core per busy environment); a CPU burner overshoots
its budget by at most this times the cores it uses."""

_TICKS = os.sysconf("SC_CLK_TCK")


def _io_written(pid):
    """Bytes process ``pid`` wrote to storage so far (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/io") as handle:
            text = handle.read()
    except OSError:
        return 0
    values = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    return int(values.get("write_bytes", 0))


def _own():
    """Bytes this init wrote, and its reaped descendants wrote, to storage; and their CPU
    seconds (``getrusage``: the kernel adds a reaped process's counts to its reaper's)."""
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (me.ru_oublock + children.ru_oublock) * 512, children.ru_utime + children.ru_stime


def _cpu_of(pid):
    try:
        with open(f"/proc/{pid}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _TICKS
    except (OSError, IndexError, ValueError):
        return 0.0


def _live(skip):
    """The other processes of this PID namespace (this init is 1), but those in ``skip``."""
    return [name for name in os.listdir("/proc") if name.isdigit() and name != "1" and int(name) not in skip]


class Meter:
    """Reads what the environment used (see the module docs).

    The kernel adds a reaped process's I/O and CPU to its reaper's: the init's own counters
    hold everything it reaped (orphans, a spawner that ended, and all that one reaped), a
    spawner's what it reaped (the commands' bash); each spawner reports its counters with
    each exit (:meth:`spawner_usage`): not being dumpable, it cannot be read from outside."""

    def __init__(self, cgroups, *, cpu_s, disk_bytes, processes):
        self.cgroups, self.cpu_limit, self.disk_limit, self.processes = cgroups, cpu_s, disk_bytes, processes
        self._base_written = _own()[0]
        self._spawners = {}  # spawner pid -> (bytes written, CPU seconds), as it last said
        self._live_written = 0  # the other live processes' share, as of the last full reading
        self._cpu_tracked = cgroups is not None and cgroups.cpu_s() is not None
        self._seen_refused = 0
        self.spent = None

    def spawner_usage(self, pid, written, cpu_s):
        """What spawner ``pid`` says its reaped commands used (at each exit). The live
        processes' share, as last read, may hold the same bytes (the command was alive then):
        it is read afresh at the next full reading, not added twice meanwhile."""
        self._spawners[pid] = (written, cpu_s)
        self._live_written = 0

    def spawner_gone(self, pid):
        """Its counts are the init's now (the init reaps it)."""
        self._spawners.pop(pid, None)

    def events(self):
        """``(OOM kills, forks refused)`` so far: a command compares them at its end."""
        if self.cgroups is None:
            return 0, 0
        return self.cgroups.oom_kills(), self.cgroups.pids_refused()

    def new_refusals(self):
        """Whether the pids bound refused a fork since the last call (then every process
        left running by earlier commands is suspect: a fork bomb's parent may be gone)."""
        refused = self.events()[1]
        fresh, self._seen_refused = refused > self._seen_refused, refused
        return fresh

    def written(self, full):
        """Bytes written so far (``full``: the live processes read now, else as last read)."""
        if full:
            self._live_written = sum(_io_written(pid) for pid in _live(self._spawners))
        return _own()[0] - self._base_written + sum(w for w, _ in self._spawners.values()) + self._live_written

    def cpu_used(self, full):
        if self._cpu_tracked:
            return self.cgroups.cpu_s() or 0.0
        total = _own()[1] + sum(cpu for _, cpu in self._spawners.values())
        if full:
            total += sum(_cpu_of(pid) for pid in _live(self._spawners))
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

    def at_processes_bound(self):
        """Whether the processes bound is (nearly) reached now, by live processes (those
        exiting, and zombies until reaped, hold the bound too: after a bomb dies of it, for a
        moment, or longer on a loaded machine): a refused fork is charged to a running
        command only while it is (``None``: nothing to read it from)."""
        if self.cgroups is None:
            return None
        tasks = self.cgroups.live_tasks()
        if tasks is None:
            tasks = self.cgroups.tasks()
        return None if tasks is None else tasks >= self.processes * 0.9

    def too_many_processes(self):
        """Without a pids cgroup (no event to read): whether the count is at the bound."""
        return self.cgroups is None and len(_live(())) + 1 >= self.processes
