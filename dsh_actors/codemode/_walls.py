"""The operating system's walls around one sandbox run, and the processes that hold them.

Trusted code, imported by the fork server (``_forkserver.py``) and the probe
(``_launcher.py``) while the host's files are still visible; everything here happens
before any model-written byte is read. Only the standard library, ``landlockpy`` and
``pyseccomp``.

One run's processes (the fork server forks the first for each sandbox)::

    launcher (host PID namespace): joins the run's cgroups, unshares the namespaces,
    │   waits, exits with the program's status; killing it ends the whole sandbox
    └─ reaper: PID 1 of a new PID namespace, in new mount, network, IPC and UTS
       │   namespaces. Builds the sandbox's root (tmpfs: the Python install and /usr
       │   read-only, an empty /tmp, a private /work, a minimal /dev, no /proc, the site
       │   directories hidden), pivots into it, and reaps. When it exits, the kernel kills
       │   every process left in the namespace — nothing outlives a run.
       └─ program: a new user namespace whose only uid/gid (1000) maps to an
          unprivileged outside id (no capabilities anywhere), no_new_privs, Landlock
          (files: read the install, write /work and /tmp; no TCP; no signals or abstract
          sockets outside the domain), rlimits, and a seccomp filter (no process
          creation, exec, ptrace, mount, namespaces, keyrings, BPF, io_uring, memfd,
          System V or POSIX IPC, inotify, only AF_UNIX sockets...). The user namespace
          is made after dropping to the run's outside id, so what the kernel counts per
          user is charged to that id, never to root. Then it runs the program.

Memory outside the address-space limit: where the host has memory (and pids) cgroups,
the launcher puts the run in cgroups of its own, limited to the memory budget (so
tmpfs files, pipe and socket buffers and kernel memory count) and to a few threads.
Everywhere, the routes to such memory that a program never needs are refused (memfd,
System V shared memory and message queues, POSIX message queues) and /tmp and /work
are small.

On a host running as root the mount and network setup needs no user namespace; on any
other host the launcher first enters one where it is root (unprivileged user namespaces).
"""

import ctypes
import ctypes.util
import errno
import json
import os
import select
import signal
import socket

import landlockpy
import pyseccomp

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
CLONE_NEWCGROUP = 0x02000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP = 1, 38, 24
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
_CAPABILITY_V3 = 0x20080522
SETUP_FAILED = 121
INSIDE_ID = 1000
FRAMES_FD = 3
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217}

NAMESPACES = {"mountns": CLONE_NEWNS, "pidns": CLONE_NEWPID, "netns": CLONE_NEWNET, "ipcns": CLONE_NEWIPC}

_libc = None


def libc(sonames):
    """The C library, loaded once (by path: after the pivot the loader cache is gone)."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(sonames.get("c") or None, use_errno=True)
        _libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)
    return _libc


class SetupError(Exception):
    """One mechanism could not be applied (the message says which and why)."""


def _check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(err)}")


def _write(path, text):
    with open(path, "w") as handle:
        handle.write(text)


def die(message):
    try:
        os.write(2, f"dsh-sandbox setup failed: {message}\n".encode())
    finally:
        os._exit(SETUP_FAILED)


def orphan_guard(parent=None, alive_fd=None):
    """Die with the parent (a sandbox never outlives whoever holds it): from now on by the
    parent-death signal, and now if the parent already died — seen as a changed parent pid
    (``parent``), or, across a PID namespace where the parent has no pid, as the end of a
    pipe the parent holds open (``alive_fd``)."""
    _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent is not None and os.getppid() != parent:
        os._exit(SETUP_FAILED)
    if alive_fd is not None:
        readable, _, _ = select.select([alive_fd], [], [], 0)
        os.close(alive_fd)
        if readable:  # end of file: the parent's end is closed, so the parent is gone
            os._exit(SETUP_FAILED)


def drop_capabilities(lib):
    """No capability anywhere, now or after an exec: the bounding and ambient sets
    emptied, then the permitted, effective and inheritable ones. The creator of a user
    namespace holds every capability inside it, and a uid change there does not clear
    them (its uid 0 is not mapped); Episode environments' inits use it too."""
    for cap in range(64):
        lib.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)  # EINVAL past the last cap: fine
    lib.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_V3, 0)
    data = (ctypes.c_uint32 * 6)()
    _check(lib.capset(header, data), "capset")


class Launch:
    """One sandbox run's walls, applied in order by the processes that hold them."""

    def __init__(self, config):
        self.config = config
        self.libc = libc(config["sonames"])
        self.want = set(config["mechanisms"])
        self.report = {"host_root": config["host_root"]}

    # --- the launcher's part ---------------------------------------------------------------

    def join_cgroups(self):
        """Put this process (and so the whole sandbox) into cgroups of its own, limited."""
        for parent, limits in self.config.get("cgroups", ()):
            path = os.path.join(parent, f"run-{os.getpid()}")
            os.mkdir(path)
            for name, value in limits:
                _write(os.path.join(path, name), str(value))
            _write(os.path.join(path, "cgroup.procs"), "0")  # "0": the writing process

    def unshare(self):
        flags = 0
        for name, flag in NAMESPACES.items():
            if name in self.want:
                flags |= flag
        if flags and not self.config["host_root"]:
            flags |= CLONE_NEWUSER  # unprivileged: become root of a namespace of our own first
        try:
            if flags:
                _check(self.libc.unshare(flags | (CLONE_NEWUTS if flags & CLONE_NEWNS else 0)), "unshare(namespaces)")
            if flags & CLONE_NEWUSER:
                uid, gid = os.getuid(), os.getgid()
                _write("/proc/self/setgroups", "deny")
                _write("/proc/self/uid_map", f"0 {uid} 1\n")
                _write("/proc/self/gid_map", f"0 {gid} 1\n")
            for name in NAMESPACES:
                if name in self.want:
                    self.report[name] = "ok"
        except SetupError as exc:
            if not self.config.get("probe"):
                die(str(exc))
            for name, flag in NAMESPACES.items():  # which one is missing?
                if name in self.want:
                    self.report[name] = "ok" if self._can_unshare(flag) else f"unshare: {exc}"
            self.want -= {n for n in NAMESPACES if self.report.get(n) != "ok"}

    def _can_unshare(self, flag):
        child = os.fork()
        if child == 0:
            os._exit(0 if self.libc.unshare(flag | (0 if self.config["host_root"] else CLONE_NEWUSER)) == 0 else 1)
        return os.waitpid(child, 0)[1] == 0

    def run(self, program_main):
        """The launcher: namespaces, then the reaper (PID 1) and the program under it.
        Never returns: exits with the program's status (128+N if a signal N killed it)."""
        self.unshare()
        alive_r, alive_w = os.pipe()
        reaper = os.fork() if "pidns" in self.want else 0
        if reaper:
            os.close(alive_r)
            _, status = os.waitpid(reaper, 0)
            os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
        os.close(alive_w)
        if "pidns" in self.want:
            orphan_guard(alive_fd=alive_r)  # the host kills the launcher: we go too
        else:
            os.close(alive_r)
        if "mountns" in self.want:
            try:
                self.libc.sethostname(b"sandbox", 7)
                self._build_root(self.config["root"])
                self.report["mountns"] = "ok"
            except (SetupError, OSError) as exc:
                if not self.config.get("probe"):
                    die(str(exc))
                self.report["mountns"] = f"{exc}"
                self.want.discard("mountns")
        from_reaper, to_program = os.pipe()  # (read end, write end)
        from_program, to_reaper = os.pipe()
        reaper = os.getpid()
        program = os.fork()
        if program == 0:
            orphan_guard(reaper)
            os.close(to_program)
            os.close(from_program)
            self._program(to_reaper, from_reaper, program_main)
            os._exit(0)
        os.close(to_reaper)
        os.close(from_reaper)
        self._reap(program, to_program, from_program)

    # --- the reaper's part: a root of our own ------------------------------------------------

    def _mount(self, source, target, fstype, flags, data=None):
        enc = lambda s: None if s is None else os.fsencode(s)  # noqa: E731
        _check(self.libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")

    def _bind_readonly(self, source, target):
        if os.path.isdir(source):
            os.makedirs(target, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "w").close()
        self._mount(source, target, None, MS_BIND | MS_REC)
        st = os.statvfs(source)
        # a read-only remount must keep the flags the source mount already locks
        locked = (MS_NOSUID if st.f_flag & os.ST_NOSUID else 0) | (MS_NODEV if st.f_flag & os.ST_NODEV else 0) \
            | (MS_NOEXEC if st.f_flag & os.ST_NOEXEC else 0)
        self._mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | locked)

    def _build_root(self, new_root):
        """A tmpfs root holding only what a Python program needs; pivots into it."""
        config = self.config
        self._mount(None, "/", None, MS_REC | MS_PRIVATE)
        self._mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
        inside = lambda path: os.path.join(new_root, path.lstrip("/"))  # noqa: E731
        for path in config["readonly"]:
            if os.path.exists(path):
                self._bind_readonly(path, inside(path))
        for link in ("bin", "lib", "lib32", "lib64", "libx32", "sbin"):
            host = "/" + link
            if os.path.islink(host):
                os.symlink(os.readlink(host), inside(host))
            elif os.path.isdir(host) and not os.path.exists(inside(host)):
                self._bind_readonly(host, inside(host))
        for hidden in config["hidden"]:  # site directories: nothing installed is importable
            if os.path.isdir(inside(hidden)):
                self._mount("tmpfs", inside(hidden), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=0555")
        os.makedirs(inside("/dev"))
        self._mount("tmpfs", inside("/dev"), "tmpfs", MS_NOSUID | MS_NOEXEC, "size=4k,mode=0755")
        for node in ("null", "zero", "urandom"):
            open(inside("/dev/" + node), "w").close()
            self._mount("/dev/" + node, inside("/dev/" + node), None, MS_BIND)
        megabytes = int(config["disk_mb"])
        for path, mode in (("/tmp", "1777"), ("/work", "0777")):
            os.makedirs(inside(path))
            self._mount("tmpfs", inside(path), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                        f"size={megabytes}m,nr_inodes=4096,mode={mode}")
        os.makedirs(inside("/proc"))
        # for the uid map; gone before the program runs
        self._mount("proc", inside("/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        os.makedirs(inside("/.old"))
        number = _PIVOT_ROOT.get(os.uname().machine)
        if number is None:
            raise SetupError(f"pivot_root: unknown syscall number on {os.uname().machine}")
        _check(self.libc.syscall(number, os.fsencode(new_root), os.fsencode(inside("/.old"))), "pivot_root")
        os.chdir("/")
        _check(self.libc.umount2(b"/.old", MNT_DETACH), "umount old root")
        os.rmdir("/.old")
        # The root itself read-only: nothing but /tmp and /work is writable, even by root here.
        self._mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)

    def _reap(self, program, to_program, from_program):
        """PID 1: answer the id-map handshake, hide /proc, then reap until the program ends."""
        if "userns" in self.want:
            if os.read(from_program, 1) == b"u":
                try:
                    uid, gid = self.config["outside_ids"]
                    _write(f"/proc/{program}/uid_map", f"{INSIDE_ID} {uid} 1\n")
                    _write(f"/proc/{program}/gid_map", f"{INSIDE_ID} {gid} 1\n")
                    os.write(to_program, b"k")
                except OSError as exc:
                    self.report["userns"] = f"id map: {exc}"
                    os.write(to_program, b"x")
        if os.path.ismount("/proc") and "mountns" in self.want:
            self.libc.umount2(b"/proc", MNT_DETACH)
        for fd in (to_program, from_program):
            os.close(fd)
        null = os.open("/dev/null", os.O_RDWR) if os.path.exists("/dev/null") else None
        for fd in (0, 1, 2, FRAMES_FD):  # the host sees EOF when the program closes
            if null is not None and fd != FRAMES_FD:
                os.dup2(null, fd)
            else:
                try:
                    os.close(fd)
                except OSError:
                    pass
        while True:
            try:
                pid, status = os.wait()
            except ChildProcessError:
                os._exit(SETUP_FAILED)
            if pid == program:
                os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))

    # --- the program's part: no privileges, then the filters --------------------------------

    def _enter_userns(self, to_reaper, from_reaper):
        uid, gid = self.config["outside_ids"]
        if os.geteuid() == 0 and self.config["host_root"]:
            os.setgroups([])
        # Unprivileged outside first: the user namespace is then owned by, and its kernel
        # counts (timers, inotify, pipes...) charged to, the run's outside id, not root.
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)
        _check(self.libc.unshare(CLONE_NEWUSER), "unshare(user namespace)")
        os.write(to_reaper, b"u")
        if os.read(from_reaper, 1) != b"k":
            raise SetupError("user namespace: the reaper could not write the id maps")
        os.setresgid(INSIDE_ID, INSIDE_ID, INSIDE_ID)
        os.setresuid(INSIDE_ID, INSIDE_ID, INSIDE_ID)
        drop_capabilities(self.libc)

    def _program(self, to_reaper, from_reaper, program_main):
        """Runs in the program process: drop everything, then run the program (or report)."""
        steps = [("userns", lambda: self._enter_userns(to_reaper, from_reaper)),
                 ("no_new_privs", lambda: _check(self.libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")),
                 ("landlock", self._landlock), ("rlimits", self._limits), ("seccomp", self._seccomp)]
        for name, step in steps:
            if name not in self.want and name not in ("no_new_privs", "rlimits"):
                continue
            try:
                step()
                self.report[name] = "ok"
            except Exception as exc:  # noqa: BLE001 - reported (probe) or fatal (run)
                self.report[name] = f"{type(exc).__name__}: {exc}"
                if not self.config.get("probe"):
                    die(f"{name}: {exc}")
        os.close(to_reaper)
        os.close(from_reaper)
        if self.config.get("probe"):
            os.write(1, json.dumps(self.report).encode())
            os._exit(0)
        os.environ.clear()
        os.chdir("/work" if os.path.isdir("/work") else self.config["fallback_workdir"])
        program_main(FRAMES_FD)

    def _landlock(self):
        from landlockpy import AccessFS, AccessNet, Scope

        if landlockpy.abi_version() < 1:
            raise SetupError("landlock: not supported by this kernel")
        read = AccessFS.EXECUTE | AccessFS.READ_FILE | AccessFS.READ_DIR
        write = read | AccessFS.WRITE_FILE | AccessFS.REMOVE_DIR | AccessFS.REMOVE_FILE | AccessFS.MAKE_DIR \
            | AccessFS.MAKE_REG | AccessFS.MAKE_SYM | AccessFS.TRUNCATE
        with landlockpy.Ruleset(handled_net=AccessNet.BIND_TCP | AccessNet.CONNECT_TCP,
                                scoped=Scope.ABSTRACT_UNIX_SOCKET | Scope.SIGNAL) as ruleset:
            for path in self.config["readonly"] + ["/dev"]:
                if os.path.isdir(path):
                    ruleset.allow_path(path, read)
                elif os.path.exists(path):
                    ruleset.allow_path(path, AccessFS.READ_FILE)
            for path in ("/dev/null", "/dev/zero"):
                ruleset.allow_path(path, AccessFS.READ_FILE | AccessFS.WRITE_FILE)
            for path in ("/work", "/tmp"):
                if os.path.isdir(path):
                    ruleset.allow_path(path, write)
            ruleset.restrict()

    def _seccomp(self):
        sc = pyseccomp
        denied = sc.ERRNO(errno.EPERM)
        rules = sc.SyscallFilter(defaction=sc.ALLOW)
        for name in DENIED:
            try:
                rules.add_rule(denied, name)
            except (OSError, ValueError, RuntimeError):
                pass  # a syscall this libseccomp does not know: this architecture has no such call
        # Threads only: clone without CLONE_THREAD would be a new process, and a thread may not
        # take a namespace of its own. clone3 passes its flags in memory the filter cannot read,
        # so it answers ENOSYS and libc falls back to clone.
        rules.add_rule(denied, "clone", sc.Arg(0, sc.MASKED_EQ, 0x00010000, 0))
        for flag in (CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET,
                     CLONE_NEWCGROUP):
            rules.add_rule(denied, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        rules.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        rules.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)  # another ABI's calls end the process, not a thread
        for call in ("socket", "socketpair"):
            rules.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), call, sc.Arg(0, sc.NE, socket.AF_UNIX))
        rules.load()

    def _limits(self):
        import resource

        limits = self.config["limits"]
        resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
        resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"], limits["memory_bytes"]))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_bytes"], limits["file_bytes"]))
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_MSGQUEUE, (0, 0))
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (0, 0))
        resource.setrlimit(resource.RLIMIT_SIGPENDING, (64, 64))  # posix timers and queued signals


DENIED = (
    # processes and what could reach another one
    "fork", "vfork", "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "pidfd_open", "pidfd_getfd", "pidfd_send_signal", "process_madvise", "process_mrelease",
    # mounts and namespaces
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
    "fspick", "mount_setattr", "unshare", "setns",
    # memory the address-space limit does not count: anonymous files, System V and POSIX IPC
    "memfd_create", "memfd_secret", "shmget", "shmat", "shmctl", "shmdt", "msgget", "msgsnd", "msgrcv", "msgctl",
    "semget", "semop", "semtimedop", "semctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
    "mq_notify", "mq_getsetattr", "vmsplice",
    # watching files other runs (or the host) open
    "inotify_init", "inotify_init1", "inotify_add_watch",
    # kernel facilities a program never needs
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "kexec_load", "kexec_file_load", "init_module", "finit_module",
    "delete_module", "reboot", "swapon", "swapoff", "acct", "settimeofday", "clock_settime", "adjtimex",
    "clock_adjtime", "sethostname", "setdomainname", "iopl", "ioperm", "quotactl", "quotactl_fd",
    "name_to_handle_at", "open_by_handle_at", "lookup_dcookie", "uselib", "vhangup", "syslog", "fanotify_init",
    "mbind", "set_mempolicy", "migrate_pages", "move_pages", "personality",
)
