"""The sandbox launcher: puts one process behind the operating system's walls, then runs it.

Started by the host as ``python -I -S -B _launcher.py CONFIG`` (an empty environment). This
file is trusted code: everything here happens before any model-written byte is read.

Processes::

    launcher (host PID namespace; waits, exits with the program's status)
      └─ reaper: PID 1 of a new PID namespace, in new mount, network, IPC and UTS
         namespaces. Builds the sandbox's root (tmpfs: the Python install and /usr
         read-only, an empty /tmp, a private /work, a minimal /dev, no /proc, the site
         directories hidden), pivots into it, and reaps. When it exits, the kernel kills
         every process left in the namespace — nothing outlives a run.
           └─ program: a new user namespace whose only uid/gid (1000) maps to an
              unprivileged outside id (no capabilities anywhere), no_new_privs, Landlock
              (files: read the install, write /work and /tmp; no TCP; no signals or
              abstract sockets outside the domain), rlimits, and a seccomp filter (no
              process creation, exec, ptrace, mount, namespaces, keyrings, BPF, io_uring,
              only AF_UNIX sockets...). Then it runs ``_child.main()``.

On a host running as root the mount and network setup needs no user namespace; on any
other host the launcher first enters one where it is root (unprivileged user namespaces).

With ``probe`` set, every mechanism is tried and a JSON report is printed instead.
Exit status 121 means the setup failed; its reason is on stderr.
"""

import json
import os
import signal
import sys

CONFIG = json.loads(sys.argv[1])
for _lib in CONFIG["libs"]:
    sys.path.insert(0, _lib)

import ctypes  # noqa: E402
import ctypes.util  # noqa: E402

import _child  # noqa: E402  (the program runner, imported while the host's files are still visible)

# ctypes.util.find_library runs `ldconfig -p` in a subprocess (milliseconds per call): the
# host resolved the libraries once and passes their paths.
_known_libraries = CONFIG["sonames"]
_find_library = ctypes.util.find_library
ctypes.util.find_library = lambda name: _known_libraries.get(name) or _find_library(name)

# Loaded now, while the host's loader cache is still visible (after the pivot it is not).
import landlockpy  # noqa: E402
import pyseccomp  # noqa: E402

_libc = ctypes.CDLL(_known_libraries.get("c") or None, use_errno=True)
_libc.mount.argtypes = (ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p)

CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC = 0x00020000, 0x04000000, 0x08000000
CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
SETUP_FAILED = 121
INSIDE_ID = 1000
_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217}

NAMESPACES = {"mountns": CLONE_NEWNS, "pidns": CLONE_NEWPID, "netns": CLONE_NEWNET, "ipcns": CLONE_NEWIPC}


class SetupError(Exception):
    """One mechanism could not be applied (the message says which and why)."""


def _check(result, what):
    if result != 0:
        err = ctypes.get_errno()
        raise SetupError(f"{what}: {os.strerror(err)}")


def _unshare(flags, what):
    _check(_libc.unshare(flags), f"unshare({what})")


def _mount(source, target, fstype, flags, data=None):
    enc = lambda s: None if s is None else os.fsencode(s)  # noqa: E731
    _check(_libc.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")


def _write(path, text):
    with open(path, "w") as handle:
        handle.write(text)


# --- the reaper's part: a root of our own ---------------------------------------------------

def _bind_readonly(source, target):
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "w").close()
    _mount(source, target, None, MS_BIND | MS_REC)
    st = os.statvfs(source)
    # a read-only remount must keep the flags the source mount already locks
    locked = (MS_NOSUID if st.f_flag & os.ST_NOSUID else 0) | (MS_NODEV if st.f_flag & os.ST_NODEV else 0) \
        | (MS_NOEXEC if st.f_flag & os.ST_NOEXEC else 0)
    _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | locked)


def _build_root(new_root):
    """A tmpfs root holding only what a Python program needs; returns nothing, pivots into it."""
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    inside = lambda path: os.path.join(new_root, path.lstrip("/"))  # noqa: E731
    for path in CONFIG["readonly"]:
        if os.path.exists(path):
            _bind_readonly(path, inside(path))
    for link in ("bin", "lib", "lib32", "lib64", "libx32", "sbin"):
        host = "/" + link
        if os.path.islink(host):
            os.symlink(os.readlink(host), inside(host))
        elif os.path.isdir(host) and not os.path.exists(inside(host)):
            _bind_readonly(host, inside(host))
    for hidden in CONFIG["hidden"]:  # site directories: nothing installed is importable
        if os.path.isdir(inside(hidden)):
            _mount("tmpfs", inside(hidden), "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV, "size=4k,mode=0555")
    os.makedirs(inside("/dev"))
    _mount("tmpfs", inside("/dev"), "tmpfs", MS_NOSUID | MS_NOEXEC, "size=4k,mode=0755")
    for node in ("null", "zero", "urandom"):
        open(inside("/dev/" + node), "w").close()
        _mount("/dev/" + node, inside("/dev/" + node), None, MS_BIND)
    megabytes = int(CONFIG["disk_mb"])
    for path, mode in (("/tmp", "1777"), ("/work", "0777")):
        os.makedirs(inside(path))
        _mount("tmpfs", inside(path), "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, f"size={megabytes}m,mode={mode}")
    os.makedirs(inside("/proc"))
    _mount("proc", inside("/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)  # for the uid map; gone before the program runs
    os.makedirs(inside("/.old"))
    number = _PIVOT_ROOT.get(os.uname().machine)
    if number is None:
        raise SetupError(f"pivot_root: unknown syscall number on {os.uname().machine}")
    _check(_libc.syscall(number, os.fsencode(new_root), os.fsencode(inside("/.old"))), "pivot_root")
    os.chdir("/")
    _check(_libc.umount2(b"/.old", MNT_DETACH), "umount old root")
    os.rmdir("/.old")


# --- the program's part: no privileges, then the filters ------------------------------------

def _landlock():
    from landlockpy import AccessFS, AccessNet, Scope

    if landlockpy.abi_version() < 1:
        raise SetupError("landlock: not supported by this kernel")
    read = AccessFS.EXECUTE | AccessFS.READ_FILE | AccessFS.READ_DIR
    write = read | AccessFS.WRITE_FILE | AccessFS.REMOVE_DIR | AccessFS.REMOVE_FILE | AccessFS.MAKE_DIR \
        | AccessFS.MAKE_REG | AccessFS.MAKE_SYM | AccessFS.TRUNCATE
    with landlockpy.Ruleset(handled_net=AccessNet.BIND_TCP | AccessNet.CONNECT_TCP,
                            scoped=Scope.ABSTRACT_UNIX_SOCKET | Scope.SIGNAL) as ruleset:
        for path in CONFIG["readonly"] + ["/dev"]:
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


_DENIED = (
    # processes and what could reach another one
    "fork", "vfork", "execve", "execveat", "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "pidfd_open", "pidfd_getfd", "pidfd_send_signal", "process_madvise", "process_mrelease",
    # mounts and namespaces
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
    "fspick", "mount_setattr", "unshare", "setns",
    # kernel facilities a program never needs
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "kexec_load", "kexec_file_load", "init_module", "finit_module",
    "delete_module", "reboot", "swapon", "swapoff", "acct", "settimeofday", "clock_settime", "adjtimex",
    "clock_adjtime", "sethostname", "setdomainname", "iopl", "ioperm", "quotactl", "quotactl_fd",
    "name_to_handle_at", "open_by_handle_at", "lookup_dcookie", "uselib", "vhangup", "syslog", "fanotify_init",
    "mbind", "set_mempolicy", "migrate_pages", "move_pages", "personality",
)


def _seccomp():
    import errno
    import socket

    sc = pyseccomp

    denied = sc.ERRNO(errno.EPERM)
    rules = sc.SyscallFilter(defaction=sc.ALLOW)
    for name in _DENIED:
        try:
            rules.add_rule(denied, name)
        except (OSError, ValueError, RuntimeError):
            pass  # a syscall this libseccomp does not know: this architecture has no such call
    # Threads only: clone without CLONE_THREAD would be a new process. clone3 passes its
    # flags in memory the filter cannot read, so it answers ENOSYS and libc falls back to clone.
    rules.add_rule(denied, "clone", sc.Arg(0, sc.MASKED_EQ, 0x00010000, 0))
    rules.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    for call in ("socket", "socketpair"):
        rules.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), call, sc.Arg(0, sc.NE, socket.AF_UNIX))
    rules.load()


def _limits():
    import resource

    limits = CONFIG["limits"]
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"], limits["memory_bytes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_bytes"], limits["file_bytes"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _enter_program_userns(to_reaper, from_reaper, report):
    if os.geteuid() == 0 and CONFIG["host_root"]:
        os.setgroups([])
    _unshare(CLONE_NEWUSER, "user namespace")
    os.write(to_reaper, b"u")
    if os.read(from_reaper, 1) != b"k":
        raise SetupError("user namespace: the reaper could not write the id maps")
    os.setresgid(INSIDE_ID, INSIDE_ID, INSIDE_ID)
    os.setresuid(INSIDE_ID, INSIDE_ID, INSIDE_ID)
    report["userns"] = "ok"


def _program(to_reaper, from_reaper, want, report):
    """Runs in the program process: drop everything, then run the child (or report)."""
    steps = [("userns", lambda: _enter_program_userns(to_reaper, from_reaper, report)),
             ("no_new_privs", lambda: _check(_libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")),
             ("landlock", _landlock), ("rlimits", _limits), ("seccomp", _seccomp)]
    for name, step in steps:
        if name not in want and name not in ("no_new_privs", "rlimits"):
            continue
        try:
            step()
            report[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - reported (probe) or fatal (run)
            report[name] = f"{type(exc).__name__}: {exc}"
            if not CONFIG.get("probe"):
                _die(f"{name}: {exc}")
    os.close(to_reaper)
    os.close(from_reaper)
    if CONFIG.get("probe"):
        os.write(1, json.dumps(report).encode())
        os._exit(0)
    os.environ.clear()
    os.chdir("/work" if os.path.isdir("/work") else CONFIG["fallback_workdir"])
    _child.main(CONFIG["frames_fd"])
    _child.finish()


def _die(message):
    try:
        os.write(2, f"dsh-sandbox setup failed: {message}\n".encode())
    finally:
        os._exit(SETUP_FAILED)


def _reap(program, to_program, from_program, want, report):
    """PID 1: answer the id-map handshake, hide /proc, then reap until the program ends."""
    if "userns" in want:
        if os.read(from_program, 1) == b"u":
            try:
                uid, gid = CONFIG["outside_ids"]
                _write(f"/proc/{program}/uid_map", f"{INSIDE_ID} {uid} 1\n")
                _write(f"/proc/{program}/gid_map", f"{INSIDE_ID} {gid} 1\n")
                os.write(to_program, b"k")
            except OSError as exc:
                report["userns"] = f"id map: {exc}"
                os.write(to_program, b"x")
    if os.path.ismount("/proc") and "mountns" in want:
        _libc.umount2(b"/proc", MNT_DETACH)
    for fd in (to_program, from_program):
        os.close(fd)
    null = os.open("/dev/null", os.O_RDWR) if os.path.exists("/dev/null") else None
    for fd in (0, 1, 2, CONFIG["frames_fd"]):  # the host sees EOF when the program closes
        if null is not None and fd != CONFIG["frames_fd"]:
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


def main():
    want = set(CONFIG["mechanisms"])
    report = {"host_root": CONFIG["host_root"]}
    flags = 0
    for name, flag in NAMESPACES.items():
        if name in want:
            flags |= flag
    if flags and not CONFIG["host_root"]:
        flags |= CLONE_NEWUSER  # unprivileged: become root of a namespace of our own first
    try:
        if flags:
            _unshare(flags | (CLONE_NEWUTS if flags & CLONE_NEWNS else 0), "namespaces")
        if flags & CLONE_NEWUSER:
            uid, gid = os.getuid(), os.getgid()
            _write("/proc/self/setgroups", "deny")
            _write("/proc/self/uid_map", f"0 {uid} 1\n")
            _write("/proc/self/gid_map", f"0 {gid} 1\n")
        for name in NAMESPACES:
            if name in want:
                report[name] = "ok"
    except SetupError as exc:
        if not CONFIG.get("probe"):
            _die(str(exc))
        for name, flag in NAMESPACES.items():  # which one is missing?
            if name in want:
                report[name] = "ok" if _can_unshare(flag) else f"unshare: {exc}"
        want -= {n for n in NAMESPACES if report.get(n) != "ok"}
    reaper = os.fork() if "pidns" in want else 0
    if reaper:
        _, status = os.waitpid(reaper, 0)
        os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))
    if "pidns" in want:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the host kills the launcher: we go too
    if "mountns" in want:
        try:
            _libc.sethostname(b"sandbox", 7)
            _build_root(CONFIG["root"])
            report["mountns"] = "ok"
        except (SetupError, OSError) as exc:
            if not CONFIG.get("probe"):
                _die(str(exc))
            report["mountns"] = f"{exc}"
            want.discard("mountns")
    from_reaper, to_program = os.pipe()  # (read end, write end)
    from_program, to_reaper = os.pipe()
    program = os.fork()
    if program == 0:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        os.close(to_program)
        os.close(from_program)
        _program(to_reaper, from_reaper, want, report)
        os._exit(0)
    os.close(to_reaper)
    os.close(from_reaper)
    _reap(program, to_program, from_program, want, report)


def _can_unshare(flag):
    child = os.fork()
    if child == 0:
        os._exit(0 if _libc.unshare(flag | (0 if CONFIG["host_root"] else CLONE_NEWUSER)) == 0 else 1)
    return os.waitpid(child, 0)[1] == 0


if __name__ == "__main__":
    main()
