"""What an environment's init gives up before it serves, so every command inherits it.

Trusted code, imported by the warm parent (``_zygote.py``) as a top-level module. The
init applies these once, after its root is built; commands are spawned from it (``vfork``
and ``exec``: nothing runs between them), so each one starts with exactly the init's
walls and can only add to them:

- **an unprivileged uid, no capabilities**: the environment's own uid (a root host) or uid
  1000 of a user namespace mapped to the backend's (an ordinary user); the bounding and
  ambient sets emptied, so no exec (setuid or file capabilities) gains one back;
- **no_new_privs**: what Landlock and seccomp need, and setuid bits are ignored;
- **Landlock**: read and execute anywhere it can see; write only its workspace, ``/tmp``,
  ``/dev/shm`` and the harmless devices; no signal to, or abstract socket of, a process
  outside the environment; and, where it has no network namespace of its own, no TCP but
  to the ports its egress names;
- **seccomp**: no ptrace or reading other processes' memory, mounts, namespaces, keyrings,
  BPF, perf, userfaultfd, io_uring, kernel modules, clocks, reboot or swap; no socket but
  unix, IPv4, IPv6 and netlink (never ``AF_VSOCK``: the way to this machine's hypervisor);
  no ``fallocate`` (space no write counted: :data:`DENIED_WITH`);
- **rlimits**: no core files, each file at most the disk bound, processes per uid.

The seccomp program is compiled once per backend (:func:`compile_filter`, in the warm
parent) and loaded by each init with one ``prctl``.
"""

import ctypes
import errno
import os
import resource

import landlockpy
import pyseccomp
from landlockpy import AccessFS, AccessNet, Scope

import _walls  # Code Mode's walls: the C library, constants, dropping capabilities

PR_SET_DUMPABLE, PR_SET_NAME, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 4, 15, 22, 2

DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty")
"""The device nodes an environment has (its whole ``/dev`` beside ``shm`` and links)."""

DENIED = (
    # other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "process_madvise",
    # mounts and namespaces
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount",
    "fspick", "mount_setattr", "unshare", "setns",
    # kernel facilities a command line never needs, each a known way into the kernel
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "kexec_load", "kexec_file_load", "init_module", "finit_module",
    "delete_module", "reboot", "swapon", "swapoff", "acct", "settimeofday", "clock_settime", "adjtimex",
    "clock_adjtime", "iopl", "ioperm", "quotactl", "quotactl_fd", "name_to_handle_at", "open_by_handle_at",
    "lookup_dcookie", "uselib", "vhangup", "syslog", "fanotify_init", "personality",
)
"""System calls that answer ``EPERM`` inside an environment."""

DENIED_WITH = {"fallocate": errno.EOPNOTSUPP, "clone3": errno.ENOSYS}
"""Calls that answer another error, which callers handle: ``fallocate`` reserves disk
space without writing it (so the disk bound, which counts bytes written, would not see
it): without it ``posix_fallocate`` writes zeros. ``clone3`` passes its flags in memory
the filter cannot read: without it the C library falls back to ``clone``, whose flags it
can (no new namespace)."""

SOCKET_FAMILIES = (1, 2, 10, 16)
"""The socket families a command may open: ``AF_UNIX``, ``AF_INET``, ``AF_INET6`` and
``AF_NETLINK`` (``ip`` and ``ss`` inside its own network namespace)."""

_NAMESPACE_FLAGS = (0x00020000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000, 0x02000000,
                    0x00000080)  # mount, uts, ipc, user, pid, net, cgroup, time


def retitle(lib, name):
    """Show ``name`` as this process's command line and name: every command may read
    ``/proc/<pid>/cmdline`` of its init and spawner, and the warm parent's was its whole
    configuration (host paths). Its bytes are overwritten in place (children inherit it)."""
    fields = open("/proc/self/stat").read().rsplit(")", 1)[1].split()
    start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end
    title = name.encode()[:max(0, end - start - 1)]
    ctypes.memmove(start, title + b"\0" * (end - start - len(title)), end - start)
    lib.prctl(PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


def compile_filter():
    """The seccomp program of every environment (BPF bytes), compiled by libseccomp."""
    sc = pyseccomp
    rules = sc.SyscallFilter(defaction=sc.ALLOW)
    for name in DENIED:
        try:
            rules.add_rule(sc.ERRNO(errno.EPERM), name)
        except (OSError, ValueError, RuntimeError):
            pass  # a call this architecture does not have
    for name, code in DENIED_WITH.items():
        rules.add_rule(sc.ERRNO(code), name)
    for flag in _NAMESPACE_FLAGS:
        rules.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    for family in range(max(SOCKET_FAMILIES) + 1):
        if family not in SOCKET_FAMILIES:
            rules.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.EQ, family))
    rules.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.GT, max(SOCKET_FAMILIES)))
    rules.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)  # a 32-bit call would bypass the table
    try:
        rules.set_attr(sc.Attr.CTL_OPTIMIZE, 2)  # a binary tree: every system call of every command walks it
    except (OSError, ValueError, RuntimeError):
        pass  # libseccomp before 2.5: a linear list, slower but the same rules
    read, write = os.pipe()
    with os.fdopen(write, "wb") as sink:
        rules.export_bpf(sink)
    with os.fdopen(read, "rb") as source:
        return source.read()


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load_filter(lib, program):
    """Install the compiled program on this process (needs no_new_privs first)."""
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if lib.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        raise _walls.SetupError(f"seccomp: {os.strerror(ctypes.get_errno())}")


def drop_privileges(lib, uid):
    """Become ``uid`` (``None``: keep this user namespace's uid) with no capability left."""
    if uid is not None:
        for cap in range(64):  # the bounding set first: emptying it needs a capability
            lib.prctl(_walls.PR_CAPBSET_DROP, cap, 0, 0, 0)
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
    _walls.drop_capabilities(lib)
    lib.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # no same-uid /proc/1/* access, no ptrace
    if lib.prctl(_walls.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise _walls.SetupError("no_new_privs: refused")


def set_limits(*, file_bytes, processes, memory_bytes=None):
    """rlimits every command inherits (``memory_bytes``: only where no cgroup bounds memory)."""
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
    if memory_bytes is not None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))


SYS_LANDLOCK_CREATE_RULESET, SYS_LANDLOCK_ADD_RULE, SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446  # every architecture
LANDLOCK_RULE_PATH_BENEATH, LANDLOCK_RULE_NET_PORT = 1, 2

_ABI = landlockpy.abi_version()
_FS_ALL = int(landlockpy.fs_for_abi(_ABI)) if _ABI >= 1 else 0
_FS_READ = int(AccessFS.EXECUTE | AccessFS.READ_FILE | AccessFS.READ_DIR) & _FS_ALL
_FS_DEVICE = int(AccessFS.READ_FILE | AccessFS.WRITE_FILE) & _FS_ALL
_NET_TCP = int(AccessNet.BIND_TCP | AccessNet.CONNECT_TCP) & int(landlockpy.net_for_abi(_ABI)) if _ABI >= 4 else 0
_SCOPES = int(Scope.ABSTRACT_UNIX_SOCKET | Scope.SIGNAL) & int(landlockpy.scope_for_abi(_ABI)) if _ABI >= 6 else 0
# The rights, as numbers, computed once in the warm parent: an init applies its rules with
# three system calls through ctypes (landlockpy's typed rulesets cost 3 ms in a fresh fork).


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPort(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def landlock(lib, *, writable, extra_writable_fds=(), tcp_ports=None):
    """Restrict this process (and so every command) with Landlock: read and execute what it
    sees, write ``writable`` (paths) and ``extra_writable_fds`` (folders) and the devices; no
    signal to, or abstract socket of, a process outside; and ``tcp_ports`` (a tuple) only
    where the environment shares the host's network: connect to those ports, bind none."""
    if _ABI < 1:
        raise _walls.SetupError("landlock: not supported by this kernel")
    syscall = lib.syscall

    def check(result, what):
        if result < 0:
            raise _walls.SetupError(f"landlock {what}: {os.strerror(ctypes.get_errno())}")
        return result

    attr = _RulesetAttr(_FS_ALL, _NET_TCP if tcp_ports is not None else 0, _SCOPES)
    ruleset = check(syscall(SYS_LANDLOCK_CREATE_RULESET, ctypes.byref(attr), ctypes.sizeof(attr), 0), "ruleset")
    try:
        def allow(fd, access, what):
            rule = _PathBeneath(access, fd)
            check(syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_PATH_BENEATH, ctypes.byref(rule), 0), what)

        rules = [("/", _FS_READ)] + [(path, _FS_ALL) for path in writable] + \
            [(path, _FS_DEVICE) for path in DEVICES if os.path.exists(path)]
        for path, access in rules:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            try:
                allow(fd, access, path)
            finally:
                os.close(fd)
        for fd in extra_writable_fds:
            allow(fd, _FS_ALL, f"descriptor {fd}")
        for port in tcp_ports or ():
            rule = _NetPort(int(AccessNet.CONNECT_TCP), port)
            check(syscall(SYS_LANDLOCK_ADD_RULE, ruleset, LANDLOCK_RULE_NET_PORT, ctypes.byref(rule), 0), "port")
        check(syscall(SYS_LANDLOCK_RESTRICT_SELF, ruleset, 0), "restrict_self")
    finally:
        os.close(ruleset)
