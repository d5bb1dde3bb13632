"""Escapes through the kernel's own doors: mounts, namespaces, /proc, /dev, privileges,
and the system calls a shell never needs. Each is refused, and the host is unchanged."""

import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)


def python(code):
    """A command running ``code`` in the environment's python3 (quoted for bash)."""
    return "python3 -c " + "'" + code.replace("'", "'\\''") + "'"


def test_commands_run_as_an_unprivileged_uid_with_no_capabilities_and_no_new_privileges(envs, env):
    status = dict(line.split(":\t", 1) for line in envs.sh(env, "cat /proc/self/status").output.decode().splitlines()
                  if ":\t" in line)
    assert status["Uid"].split()[0] == str(env.uid) and env.uid >= 300_000
    for caps in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(status[caps], 16) == 0, caps
    assert status["NoNewPrivs"].strip() == "1" and status["Seccomp"].strip() == "2"


def test_remounting_unmounting_and_mounting_are_refused(envs, env):
    for attempt in ("mount -o remount,rw /", "mount -o remount,rw /usr", f"umount -l {env.spec.workspace}",
                    "umount -l /tmp", "mount -t tmpfs none /mnt", "mount --bind / /mnt", "mount -t proc proc /mnt"):
        assert envs.sh(env, attempt).exit_code != 0, attempt
    assert envs.sh(env, "echo x > /mnt/probe").exit_code != 0


def test_new_namespaces_chroot_and_setns_are_refused(envs, env):
    for attempt in ("unshare -U true", "unshare -Ur true", "unshare -m true", "unshare -n true", "unshare -p -f true",
                    "chroot / true", "nsenter -t 1 -m true", "nsenter -t 1 -n true",
                    python("import os; os.setns(os.open('/proc/1/ns/mnt', os.O_RDONLY), 0)")):
        assert envs.sh(env, attempt).exit_code != 0, attempt


def test_proc_shows_the_environments_own_processes_only(envs, env):
    host_pid = os.getpid()
    listed = envs.sh(env, "ls /proc | grep -E '^[0-9]+$'").output.split()
    assert b"1" in listed and len(listed) < 20
    assert envs.sh(env, f"cat /proc/{host_pid}/cmdline").exit_code != 0 or host_pid in (int(p) for p in listed)
    assert b"pytest" not in envs.sh(env, "cat /proc/*/cmdline 2>/dev/null").output


def test_the_inits_root_environment_and_descriptors_are_off_limits(envs, env):
    for attempt in ("ls /proc/1/root/", "cat /proc/1/environ", "ls -l /proc/1/fd", "cat /proc/1/mem",
                    "cat /proc/1/maps", f"ls {env.spec.workspace}/../../../proc/1/root/etc"):
        assert envs.sh(env, attempt).exit_code != 0, attempt
    assert envs.sh(env, "readlink /proc/self/root").output == b"/\n"


def test_writes_to_proc_sys_are_refused_and_the_host_is_unchanged(envs, env):
    """Each attempt would be harmless had it worked (a sysrq help line, a swappiness one off)."""
    swappiness = Path("/proc/sys/vm/swappiness")
    before = swappiness.read_text()
    try:
        for attempt in ("echo 1 > /proc/sys/vm/drop_caches", f"echo {int(before) ^ 1} > /proc/sys/vm/swappiness",
                        f"sysctl -w vm.swappiness={int(before) ^ 1}", "echo h > /proc/sysrq-trigger",
                        "echo pwned > /proc/sys/kernel/hostname", "hostname pwned"):
            assert envs.sh(env, attempt).exit_code != 0, attempt
        assert swappiness.read_text() == before
        assert envs.sh(env, "hostname").output == b"env\n"
    finally:
        if swappiness.read_text() != before:
            swappiness.write_text(before)


def test_dev_holds_only_harmless_devices_and_mknod_is_refused(envs, env):
    listed = set(envs.sh(env, "ls -A /dev").output.split())
    assert listed <= {b"null", b"zero", b"full", b"random", b"urandom", b"tty", b"fd", b"stdin", b"stdout", b"stderr",
                      b"shm"}
    for attempt in ("mknod /tmp/mem c 1 1", "mknod /tmp/disk b 254 0", "cat /dev/mem", "cat /dev/vda", "cat /dev/kmsg",
                    "ls /dev/disk", "echo x > /dev/tty"):
        assert envs.sh(env, attempt).exit_code != 0, attempt
    assert envs.sh(env, "head -c 4 /dev/urandom | wc -c; echo hi > /dev/null").output == b"4\n"


def test_dev_shm_is_tiny_and_its_own(envs, env):
    assert envs.sh(env, "head -c 64M /dev/zero > /dev/shm/big").exit_code != 0
    assert not any(name.startswith("big") for name in os.listdir("/dev/shm"))


def test_system_calls_a_shell_never_needs_are_refused(envs, env):
    calls = {"bpf": 321, "perf_event_open": 298, "keyctl": 250, "io_uring_setup": 425, "userfaultfd": 323,
             "ptrace": 101, "init_module": 175, "kexec_load": 246, "open_by_handle_at": 304, "add_key": 248}
    code = ("import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True); results = []\n"
            f"for name, number in {calls!r}.items():\n"
            "    results.append((name, libc.syscall(number, 0, 0, 0, 0, 0), ctypes.get_errno()))\n"
            "print(results)")
    results = eval(envs.sh(env, python(code)).output)  # noqa: S307 - our own print of a list of tuples
    assert all(returned == -1 and err in (1, 38) for _, returned, err in results), results  # EPERM or ENOSYS


def test_ptrace_of_any_process_is_refused(envs, env):
    attempt = python("import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
                     "print(libc.ptrace(16, 1, 0, 0), ctypes.get_errno())")  # PTRACE_ATTACH to the init
    assert envs.sh(env, attempt).output.split() == [b"-1", b"1"]
    assert envs.sh(env, "sleep 30 & strace -p $! -o /dev/null; echo $?").output.strip() != b"0"


def test_the_cgroup_tree_is_not_reachable(envs, env):
    assert envs.sh(env, "ls /sys/fs/cgroup").exit_code != 0
    assert envs.sh(env, "mount -t cgroup2 none /tmp").exit_code != 0


def test_a_command_inherits_no_descriptor_but_its_stdin_stdout_and_stderr(envs, env):
    """Not the environment's listening socket, its status socket, its cgroup folders or the
    spawner's pipes: with any of them a command could pose as its environment, or leave its
    bounds."""
    listed = set(envs.sh(env, "ls /proc/$$/fd; true").output.split())  # the command's bash, seen by ls
    assert {b"0", b"1", b"2"} <= listed <= {b"0", b"1", b"2", b"255"}  # 255: bash's own, if any
