"""The cgroups of environments: where they go, what bounds them, how they are emptied.

Imported by the backend (as ``dsh_actors.envs._cgroups``: finding the hierarchies, making
and removing its parents, reaping), by each environment's warden (making its cgroups) and
init and spawner (using them, by descriptor), the last three as a top-level module, so it
imports only the standard library.

**Hierarchies and roles.** A host mounts cgroup v2 (one hierarchy), v1 (one per controller
set) or both (hybrid, like these machines: v1 ``memory`` and ``pids``, and a v2 hierarchy
without controllers). Each role goes to the best hierarchy that has it, and the backend
makes one parent ``dsh-envs-<tag>`` in its own cgroup there:

=========  ==============================================  ======================
role       what it does                                    where
=========  ==============================================  ======================
memory     the memory bound (tmpfs, pipes, kernel memory)  v2 if delegated, else v1
pids       the processes bound                             v2 if delegated, else v1
track      one cgroup per running command: a wall or a     v2 (``cgroup.kill``),
           bound kills all it started, escapes included    else v1 pids
cpu        CPU seconds used over the environment's life    v2 ``cpu.stat``, else v1 cpuacct
=========  ==============================================  ======================

**One environment**, in each hierarchy (made by its warden, :func:`make_env`)::

    <parent>/e<k>/            cgroup.procs owned by the env's uid where the spawner moves
    │                         below it (cgroup v2 lets a process move only below a common
    │                         ancestor it may write)
    ├── init/                 (track) the init's home, outside every bound; elsewhere the
    │                         init stays in the warm parent's cgroups
    └── box/                  the bounds (memory, pids); the spawners live here
        └── c<j>/             (track) one per command slot, made by the spawners as needed

Each spawner stays in its slot, and a command goes to an idle spawner whose slot has nothing
left running in it, so neither commands one after another nor overlapping ones move a spawner
(the init keeps one per command in flight, :mod:`_commands`); only a spawner whose last
command left a process behind, or one of a pool that is full, moves first. A move is a few µs,
but it takes a lock that every fork and exit on the node waits for, and the first one after an
idle spell waits for an RCU grace period (about 8 ms on these machines).
"""

import os
import signal
import time

ROLES = ("memory", "pids", "track", "cpu")

ROOT = "/sys/fs/cgroup"

PARENT_PREFIX = "dsh-envs-"
"""How the backends' parent cgroups are named (``dsh-envs-<pid>-<n>``); :func:`reap`
and the backends' start sweep find a dead owner's parents by it."""


# --- the backend's side: hierarchies and parents -----------------------------------------

def _mounts():
    """``[(mount point, fstype, super options)]`` of the cgroup mounts."""
    found = []
    try:
        with open("/proc/self/mountinfo") as handle:
            for line in handle:
                before, _, after = line.partition(" - ")
                fields, rest = before.split(), after.split()
                if len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2") and fields[3] == "/":
                    found.append((fields[4], rest[0], set(rest[2].split(","))))
    except OSError:
        pass
    return found


def hierarchies():
    """``[(own cgroup directory, version, controllers)]`` of this process, one per hierarchy."""
    mounts = _mounts()
    found = []
    try:
        with open("/proc/self/cgroup") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return found
    for line in lines:
        number, controllers, path = line.split(":", 2)
        if number == "0" and controllers == "":
            mount = next((m for m, kind, _ in mounts if kind == "cgroup2"), None)
            if mount is not None:
                found.append((os.path.join(mount, path.lstrip("/")), 2, _v2_controllers(mount, path)))
            continue
        wanted = set(controllers.split(",")) - {""}
        mount = next((m for m, kind, options in mounts if kind == "cgroup" and wanted <= options), None)
        if mount is not None and wanted:
            found.append((os.path.join(mount, path.lstrip("/")), 1, wanted))
    return found


def _v2_controllers(mount, path):
    """The controllers a child of this process's v2 cgroup would get."""
    try:
        with open(os.path.join(mount, path.lstrip("/"), "cgroup.subtree_control")) as handle:
            return set(handle.read().split())
    except OSError:
        return set()


def plan_roles(found):
    """Which hierarchy takes each role: ``{directory: (version, [roles])}``."""
    v2 = [(d, c) for d, version, c in found if version == 2]
    v1 = {frozenset(c): d for d, version, c in found if version == 1}

    def v1_with(controller):
        return next((d for c, d in v1.items() if controller in c), None)

    chosen = {}
    for role, v1_controller in (("memory", "memory"), ("pids", "pids"), ("track", "pids"), ("cpu", "cpuacct")):
        where = None
        if v2 and (role in ("track", "cpu") or role in v2[0][1]):
            where = (v2[0][0], 2)
        elif v1_with(v1_controller) is not None:
            where = (v1_with(v1_controller), 1)
        if where is not None:
            chosen.setdefault(where[0], (where[1], []))[1].append(role)
    return chosen


def make_parents(tag):
    """The backend's parent cgroups, made now: ``([{"path", "version", "roles"}], missing)``
    where ``missing`` says which roles no writable hierarchy offers, and why."""
    plan, problems = [], {}
    for directory, (version, roles) in sorted(plan_roles(hierarchies()).items()):
        parent = os.path.join(directory, f"{PARENT_PREFIX}{tag}")
        try:
            os.mkdir(parent)
            if version == 2 and {"memory", "pids"} & set(roles):
                _write(os.path.join(parent, "cgroup.subtree_control"),
                       " ".join(f"+{r}" for r in ("memory", "pids") if r in roles))
        except OSError as exc:
            for role in roles:
                problems[role] = f"cannot make a cgroup in {directory}: {exc.strerror}"
            remove_tree(parent)
            continue
        if version == 2 and "track" in roles and not os.path.exists(os.path.join(parent, "cgroup.kill")):
            problems["track"] = "this kernel's cgroup v2 has no cgroup.kill (5.14+)"
        plan.append({"path": parent, "version": version, "roles": roles})
    for role in ROLES:
        if not any(role in p["roles"] for p in plan):
            problems.setdefault(role, "no cgroup hierarchy offers it")
    return plan, problems


# --- emptying and removing (the backend, its reaper, and the init's end) ---------------------

def _write(path, text):
    with open(path, "w") as handle:
        handle.write(text)


def _text(path):
    with open(path) as handle:
        return handle.read()


def _pids(directory):
    try:
        with open(os.path.join(directory, "cgroup.procs")) as handle:
            return [int(p) for p in handle.read().split()]
    except (OSError, ValueError):
        return []


def kill_all(directory):
    """Kill every process in ``directory``'s cgroup and below it (``cgroup.kill`` on v2;
    on v1, each process read from ``cgroup.procs``, again until none is left)."""
    try:
        _write(os.path.join(directory, "cgroup.kill"), "1")
        return
    except OSError:
        pass
    for _ in range(100):
        found = False
        for root, dirs, _ in os.walk(directory):
            for pid in _pids(root):
                found = True
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        if not found:
            return


FREEZE_WAIT_S = 1.0
"""How long :func:`_freeze` waits for every process of a cgroup to be frozen (a few ms on
these machines, mostly; a process stuck in the kernel delays it)."""


KILL_WAIT_S = 1.0
"""How long :meth:`EnvCgroups.kill_slot` waits for what it killed to exit (a few ms on these
machines; a process stuck in the kernel takes longer, and is left to die meanwhile)."""


def _freeze(path):
    """Freeze the cgroup at ``path`` and wait until it says every process in it is: one in the
    middle of a fork is not until its child is in the cgroup, frozen too, so a listing read
    then holds each process that could ever run there. Whether it is (``False`` on cgroup v1,
    or if it is not frozen within :data:`FREEZE_WAIT_S`)."""
    try:
        _write(os.path.join(path, "cgroup.freeze"), "1")
    except OSError:
        return False
    events = os.path.join(path, "cgroup.events")
    try:
        return _until(lambda: _field(_text(events), "frozen") == 1, FREEZE_WAIT_S)
    except OSError:
        return False


def _until(done, within_s):
    """Poll ``done()`` every ms until it is true or ``within_s`` passed: whether it is."""
    deadline = time.monotonic() + within_s
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def remove_tree(directory):
    """Remove a cgroup and every cgroup below it, deepest first (those still holding a
    process stay; the caller kills them first). Whether it is gone."""
    try:
        walk = list(os.walk(directory, topdown=False))
    except OSError:
        return not os.path.exists(directory)
    for root, _, _ in walk:
        try:
            os.rmdir(root)
        except FileNotFoundError:
            pass
        except OSError:
            pass
    return not os.path.exists(directory)


def env_dirs(plan, name):
    """Each hierarchy's directory of environment ``name``."""
    return [os.path.join(p["path"], name) for p in plan]


def owner_of(parent_name):
    """The pid in a parent's name (``dsh-envs-<pid>-<n>``), or ``None``."""
    try:
        return int(parent_name[len(PARENT_PREFIX):].split("-")[0])
    except ValueError:
        return None


# --- one environment's cgroups ------------------------------------------------------------

def make_env(plan, name, *, memory_bytes, tasks, uid):
    """(The warden, root of the host.) Make ``e<k>``, ``init`` and ``box`` in each hierarchy,
    the bounds set on ``box``, and the files the environment's spawner writes handed to its
    ``uid`` (``None``: it keeps the backend's). Returns a descriptor of each ``e<k>``."""
    folders = []
    for parent in plan:
        env = os.path.join(parent["path"], name)
        for path in (env, os.path.join(env, "init"), os.path.join(env, "box")):
            os.mkdir(path)
        folders.append(os.open(env, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        box, roles = os.path.join(env, "box"), parent["roles"]
        if parent["version"] == 2 and {"memory", "pids"} & set(roles):
            _write(os.path.join(env, "cgroup.subtree_control"),
                   " ".join(f"+{r}" for r in ("memory", "pids") if r in roles))
        if "memory" in roles:
            _set_memory(box, parent["version"], memory_bytes)
        if "pids" in roles:
            _write(os.path.join(box, "pids.max"), str(tasks))
        if uid is not None:
            # the spawner joins box (v1), or parks in box/c<j> (tracking: making them, and
            # moving below e<k>, their common ancestor); the bounds' files stay root's
            owned = [os.path.join(box, "cgroup.procs")]
            if "track" in roles:
                owned += [box, os.path.join(env, "cgroup.procs")]
            for path in owned:
                os.chown(path, uid, uid)
    return folders


def move_home(plan, name, pid):
    """(The warden.) Move the init (``pid``) into ``e<k>/init`` of the tracking hierarchy, so
    its spawner may then move on into ``box`` (cgroup v2 lets an unprivileged process move
    only below a common ancestor it may write: ``e<k>``). Elsewhere the init stays in the
    warm parent's cgroups: outside the environment's bounds."""
    for parent in plan:
        if "track" in parent["roles"]:
            _write(os.path.join(parent["path"], name, "init", "cgroup.procs"), str(pid))


class EnvCgroups:
    """One environment's cgroups, from inside it: by the descriptors of its ``e<k>``
    folders (made by its warden), so the host's cgroup tree need not be in its root.
    The spawner (forked from the init) joins ``box`` and sits in a tracking slot, the one
    of the command it spawns; the init kills slots and reads the counters."""

    def __init__(self, plan, folders):
        self.plan, self.folders = plan, folders
        self._track = None        # the tracking hierarchy's box, a directory descriptor
        self._slot_fds = {}       # slot -> its c<j>/cgroup.procs (written) and cgroup.events (read)
        self._threads = None      # the file listing a tracking cgroup's threads
        self._counters = {}
        for parent, folder in zip(plan, folders):
            if "track" in parent["roles"]:
                self._track = os.open("box", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=folder)
                self._threads = "cgroup.threads" if parent["version"] == 2 else "tasks"
            for role, filename in (("memory", "memory.oom_control" if parent["version"] == 1 else "memory.events"),
                                   ("pids", "pids.events"), ("tasks", "pids.current"),
                                   ("cpu", "cpuacct.usage" if parent["version"] == 1 else "cpu.stat")):
                if (role if role != "tasks" else "pids") in parent["roles"]:
                    self._counters[role] = os.open(f"box/{filename}", os.O_RDONLY | os.O_CLOEXEC, dir_fd=folder)

    def writable_dirs(self):
        """Descriptors of the directories written after the walls are up (for Landlock)."""
        return list(self.folders)

    def join_box(self):
        """(The spawner.) Into ``box`` wherever it does not park in slots."""
        for parent, folder in zip(self.plan, self.folders):
            if "track" not in parent["roles"]:
                _write_at(folder, "box/cgroup.procs", "0")

    def slot(self, number):
        """Command slot ``number``'s ``cgroup.procs``, to join and to read (tracking
        hierarchy), made on first use; ``None`` without a tracking hierarchy."""
        fds = self._slot_fds.get(number)
        if fds is None and self._track is not None:
            name = f"c{number}"
            try:
                os.mkdir(name, dir_fd=self._track)
            except FileExistsError:
                pass
            fds = (os.open(f"{name}/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC, dir_fd=self._track),
                   os.open(f"{name}/cgroup.procs", os.O_RDONLY | os.O_CLOEXEC, dir_fd=self._track))
            self._slot_fds[number] = fds
        return fds

    def park(self, number):
        """(The spawner.) Into slot ``number``: what it spawns next is born there."""
        fds = self.slot(number)
        if fds is not None:
            os.write(fds[0], b"0")

    def _slot_pids(self, number):
        fds = self.slot(number)
        if fds is None:
            return []
        try:
            return [int(pid) for pid in os.pread(fds[1], 65536, 0).split()]
        except (OSError, ValueError):
            return []

    def slot_busy(self, number, spawners):
        """Whether a process other than the ``spawners`` (pids) is in slot ``number`` (one its
        command left running)."""
        return any(pid not in spawners for pid in self._slot_pids(number))

    def crowded(self, numbers, spawners):
        """Of the slots ``numbers``, the one holding the most processes (``spawners`` aside),
        or ``None`` when all are empty (or there is no tracking hierarchy)."""
        counts = {number: sum(pid not in spawners for pid in self._slot_pids(number)) for number in numbers}
        most = max(counts, key=counts.__getitem__, default=None)
        return most if most is not None and counts[most] > 0 else None

    def kill_slot(self, number, spawners):
        """Kill every process in slot ``number`` but the ``spawners`` (pids; one is parked
        there, usually), and wait until they have exited (up to :data:`KILL_WAIT_S`), so a
        fork the processes bound refuses from then on is not theirs. At once with
        ``cgroup.kill`` when no spawner is there; else the slot is frozen (once it is, nothing
        in it is mid-fork, so one listing holds every process), the others are killed, and
        the slot is thawed."""
        if self._track is None:
            return
        path = f"/proc/self/fd/{self._track}/c{number}"
        if not spawners.intersection(self._slot_pids(number)):
            kill_all(path)
        else:
            frozen = _freeze(path)
            try:
                for _ in range(1 if frozen else 100):  # (cgroup v1 has no freezer: kill until none is left)
                    others = [pid for pid in self._slot_pids(number) if pid not in spawners]
                    for pid in others:
                        try:
                            os.kill(pid, signal.SIGKILL)  # delivered to frozen processes too
                        except OSError:
                            pass
                    if not others:
                        break
            finally:
                try:
                    _write(os.path.join(path, "cgroup.freeze"), "0")
                except OSError:
                    pass
        _until(lambda: not self.slot_busy(number, spawners), KILL_WAIT_S)

    # counters

    def _read(self, role):
        fd = self._counters.get(role)
        if fd is None:
            return ""
        try:
            return os.pread(fd, 4096, 0).decode()
        except OSError:
            return ""

    def oom_kills(self):
        return _field(self._read("memory"), "oom_kill")

    def pids_refused(self):
        """How many forks the pids bound refused so far."""
        return _field(self._read("pids"), "max")

    def live_tasks(self):
        """How many threads the command slots hold that have not begun to exit (``pids.current``
        counts those until they are reaped too), or ``None`` without a tracking hierarchy."""
        if self._track is None:
            return None
        total = 0
        for name in os.listdir(self._track):
            if name.startswith("c") and name[1:].isdigit():
                try:
                    total += len(_text(f"/proc/self/fd/{self._track}/{name}/{self._threads}").split())
                except OSError:
                    pass
        return total

    def tasks(self):
        """How many processes the bounded cgroup holds now, or ``None`` without a pids hierarchy."""
        text = self._read("tasks").strip()
        return int(text) if text.isdigit() else None

    def cpu_s(self):
        """CPU seconds the commands used so far, or ``None`` without a cpu hierarchy."""
        text = self._read("cpu")
        if not text:
            return None
        if "usage_usec" in text:
            return _field(text, "usage_usec") / 1e6
        try:
            return int(text.strip()) / 1e9
        except ValueError:
            return None


def _write_at(folder, name, text):
    fd = os.open(name, os.O_WRONLY | os.O_CLOEXEC, dir_fd=folder)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _field(text, key):
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            try:
                return int(value)
            except ValueError:
                return 0
    return 0


def _set_memory(box, version, memory_bytes):
    if version == 1:
        _write(os.path.join(box, "memory.limit_in_bytes"), str(memory_bytes))
        if os.path.exists(os.path.join(box, "memory.memsw.limit_in_bytes")):
            _write(os.path.join(box, "memory.memsw.limit_in_bytes"), str(memory_bytes))
    else:
        _write(os.path.join(box, "memory.max"), str(memory_bytes))
        if os.path.exists(os.path.join(box, "memory.swap.max")):
            _write(os.path.join(box, "memory.swap.max"), "0")
