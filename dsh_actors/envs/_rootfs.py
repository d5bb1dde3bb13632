"""An environment's root: the host's system read-only, its workspace, and nothing else.

Run by the environment's init, still privileged, in the mount namespace it unshared (and as
PID 1 of its own PID namespace, for ``/proc``): what every environment has while it waits
as a spare (:meth:`Root.prepare`), the rest once it is asked for (:meth:`Root.complete`).
The root is built on an empty tmpfs
from an allow-list, never by hiding parts of the host's: what is not listed does not exist
inside (the host's ``/tmp`` with Ray's session folder and every other workspace,
``/var/tmp``, ``/run``, ``/root``, ``/home``, ``/mnt``, ``/sys``, the host's ``/dev`` and
``/dev/shm``, the backends' folders and their sockets)::

    /usr /etc /bin /sbin /lib*   the host's, read-only, nosuid, nodev (recursively: the new
                                 mount API clones each tree and sets it read-only at once)
    <workspace>                  the host folder, read-write, nosuid, nodev, at its host path
    /tmp                         a private tmpfs of ``tmp_mb`` (its pages count as memory)
    /dev                         null zero full random urandom tty, fd links, a tiny /dev/shm
    /proc                        a procfs of the environment's own PID namespace
    /etc/passwd /etc/group       the environment's user (its uid has a name)
    /etc/hosts                   with the names of its egress destinations, when it has some
    /home /root /run /var /sys   empty

Paths the spec hides (``hidden``) that would still show under those (inside ``/etc`` or the
workspace) are covered with an empty read-only tmpfs, or an empty file. Then the root
pivots, the host's tree is detached, and the root tmpfs itself becomes read-only.
"""

import ctypes
import os

import _walls
from _confine import DEVICES
from _walls import MNT_DETACH, MS_BIND, MS_NODEV, MS_NOEXEC, MS_NOSUID, MS_PRIVATE, MS_RDONLY, MS_REC, MS_REMOUNT

SYS_OPEN_TREE, SYS_MOVE_MOUNT, SYS_MOUNT_SETATTR = 428, 429, 442  # the same on every architecture
OPEN_TREE_CLONE, AT_RECURSIVE, AT_EMPTY_PATH, MOVE_MOUNT_F_EMPTY_PATH = 1, 0x8000, 0x1000, 0x4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 0x1, 0x2, 0x4

EMPTY_DIRS = ("/home", "/root", "/run", "/var", "/mnt", "/sys", "/proc", "/dev", "/tmp")

ROOT_TMPFS = "size=1m,nr_inodes=4096,mode=0755"
"""The root's own tmpfs: only folders, links and a few small files live in it."""

DEV_TMPFS = "size=64k,nr_inodes=64,mode=0755"


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64), ("propagation", ctypes.c_uint64),
                ("userns_fd", ctypes.c_uint64)]


class Root:
    """Builds one environment's root under ``stage`` (an empty folder on the host)."""

    def __init__(self, lib, stage):
        self.lib, self.stage = lib, stage.rstrip("/")

    def inside(self, path):
        return self.stage + "/" + path.lstrip("/")

    def _check(self, result, what):
        if result < 0:
            raise _walls.SetupError(f"{what}: {os.strerror(ctypes.get_errno())}")
        return result

    def mount(self, source, target, fstype, flags, data=None):
        enc = lambda s: None if s is None else os.fsencode(s)  # noqa: E731
        self._check(self.lib.mount(enc(source), enc(target), enc(fstype), flags, enc(data)), f"mount {target}")

    def tmpfs(self, target, options, flags=MS_NOSUID | MS_NODEV):
        os.makedirs(target, exist_ok=True)
        self.mount("tmpfs", target, "tmpfs", flags, options)

    def bind_tree(self, source, target, attributes):
        """Clone the mount tree at ``source`` (submounts too), give it ``attributes``
        everywhere in it, and attach it at ``target``."""
        syscall = self.lib.syscall
        tree = self._check(syscall(SYS_OPEN_TREE, -100, os.fsencode(source),
                                   OPEN_TREE_CLONE | os.O_CLOEXEC | AT_RECURSIVE), f"open_tree {source}")
        try:
            attr = _MountAttr(attributes, 0, 0, 0)
            self._check(syscall(SYS_MOUNT_SETATTR, tree, b"", AT_EMPTY_PATH | AT_RECURSIVE, ctypes.byref(attr),
                                ctypes.sizeof(attr)), f"mount_setattr {source}")
            self._check(syscall(SYS_MOVE_MOUNT, tree, b"", -100, os.fsencode(target), MOVE_MOUNT_F_EMPTY_PATH),
                        f"move_mount {target}")
        finally:
            os.close(tree)

    def prepare(self, *, readonly, shm_mb):
        """What every environment of the backend has, made before one is asked for (a
        spare's init does it): the root tmpfs, ``/tmp``, the host's system, ``/dev``, ``/proc``."""
        self.mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing propagates back to the host
        self.tmpfs(self.stage, ROOT_TMPFS)
        if not os.path.ismount(self.stage):  # never build on the host's own folder
            raise _walls.SetupError(f"the root's tmpfs is not mounted at {self.stage}")
        for path in EMPTY_DIRS:
            os.makedirs(self.inside(path), exist_ok=True)
        self.tmpfs(self.inside("/tmp"), "size=1m,mode=1777")  # first: a read-only path may be in it; sized later
        for path in readonly:
            if os.path.islink(path):
                os.symlink(os.readlink(path), self.inside(path))
            elif os.path.isdir(path):
                os.makedirs(self.inside(path), exist_ok=True)
                self.bind_tree(path, self.inside(path), MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
        self._dev(shm_mb)
        self.mount("proc", self.inside("/proc"), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)

    def complete(self, *, workspace, tmp_mb, hidden, files):
        """What makes it this environment's: its ``/tmp`` size, its workspace, the paths it
        hides, its files over ``/etc``; then the pivot."""
        self.mount(None, self.inside("/tmp"), None, MS_REMOUNT | MS_NOSUID | MS_NODEV, f"size={tmp_mb}m,mode=1777")
        os.makedirs(self.inside(workspace), exist_ok=True)
        self.bind_tree(workspace, self.inside(workspace), MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV)
        for path in hidden:
            self._hide(path)
        for path, text in files.items():
            self._file_over(path, text)
        self._pivot()

    def _dev(self, shm_mb):
        dev = self.inside("/dev")
        self.mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, DEV_TMPFS)
        for node in DEVICES:
            if os.path.exists(node):
                open(self.inside(node), "w").close()
                self.mount(node, self.inside(node), None, MS_BIND)
        for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                             ("stderr", "/proc/self/fd/2")):
            os.symlink(target, os.path.join(dev, name))
        self.tmpfs(os.path.join(dev, "shm"), f"size={shm_mb}m,mode=1777")

    def _hide(self, path):
        """Cover ``path`` if it shows inside (never through a link: a link itself is no leak)."""
        target = self.inside(path)
        try:
            if os.path.islink(target) or not os.path.lexists(target):
                return
            if os.path.isdir(target):
                self.tmpfs(target, "size=4k,nr_inodes=1,mode=0555", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
            else:
                self._file_over(path, "")
        except OSError as exc:
            raise _walls.SetupError(f"cannot hide {path}: {exc}") from None

    def _file_over(self, path, text):
        """Mount a read-only file holding ``text`` over ``path`` (its source unlinked after)."""
        source = self.inside("/.dsh-" + path.strip("/").replace("/", "-"))
        with open(source, "w") as handle:
            handle.write(text)
        target = self.inside(path)
        if not os.path.lexists(target):
            open(target, "w").close()
        self.mount(source, target, None, MS_BIND)
        self.mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
        os.unlink(source)

    def _pivot(self):
        number = _walls._PIVOT_ROOT.get(os.uname().machine)
        if number is None:
            raise _walls.SetupError(f"pivot_root: unknown system call number on {os.uname().machine}")
        old = self.inside("/.old")
        os.makedirs(old)
        self._check(self.lib.syscall(number, os.fsencode(self.stage), os.fsencode(old)), "pivot_root")
        os.chdir("/")
        self._check(self.lib.umount2(b"/.old", MNT_DETACH), "umount the host's root")
        os.rmdir("/.old")
        # read-only as a mount (the superblock cannot be: the files bound over /etc are unlinked)
        self.mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
