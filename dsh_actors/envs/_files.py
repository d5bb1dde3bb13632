"""The file tools' side in an environment: paths resolved by the kernel, beneath the workspace.

Runs in the environment's init (a top-level module there): inside its mount namespace,
as its unprivileged uid, under its Landlock rules. Every path is opened with ``openat2``
relative to a descriptor of the workspace with ``RESOLVE_BENEATH`` (the kernel refuses any
step, ``..`` or link, that would leave it, and re-checks against renames racing the
lookup), ``RESOLVE_NO_MAGICLINKS`` (no ``/proc/self/fd/...`` jumps) and
``RESOLVE_NO_XDEV`` (no crossing into a mount inside it, such as a hidden path). A folder
made for a write is made one component at a time, each relative to a descriptor of its
parent that was itself opened beneath the workspace, so a component swapped for a link
meanwhile can only make the next step fail. Failures are ``PathRefused`` with a message
for the model; the init turns them into ``ENV_PATH``.
"""

import ctypes
import errno
import os
import stat

SYS_OPENAT2 = 437  # the same number on every architecture (a system call added after the unified table)
RESOLVE_NO_XDEV, RESOLVE_NO_MAGICLINKS, RESOLVE_BENEATH = 0x01, 0x02, 0x08
BENEATH = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV


class PathRefused(Exception):
    """A path the file tools cannot use (the message says why, in the model's terms)."""


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_REASONS = {
    errno.ENOENT: "no such file or folder", errno.EXDEV: "it leads outside the workspace",
    errno.ELOOP: "a link the file tools do not follow there (a write never goes through one)",
    errno.ENOTDIR: "a part of it is not a folder", errno.EISDIR: "it is a folder",
    errno.EACCES: "permission denied", errno.EPERM: "permission denied", errno.ENAMETOOLONG: "the name is too long",
    errno.EAGAIN: "the kernel asked to retry (a rename raced the lookup)",
}


class Workspace:
    """The workspace as the init holds it: a descriptor and the host path it is bound at."""

    def __init__(self, lib, path):
        self.lib, self._syscall = lib, lib.syscall
        self.path = path.rstrip("/") or "/"
        self.fd = os.open(self.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def relative(self, path):
        """``path`` (relative to the workspace, or absolute inside it) as a relative path."""
        if not isinstance(path, str) or not path or "\0" in path:
            raise PathRefused("a path is a non-empty string")
        if path.startswith("/"):
            if path.rstrip("/") == self.path:
                return "."
            if not path.startswith(self.path + "/"):
                raise PathRefused(f"{path} is outside the workspace ({self.path})")
            path = path[len(self.path) + 1:]
        return path.strip("/") or "."

    def open(self, path, flags, parent=None):
        """``openat2`` of ``path`` beneath the workspace (or beneath the folder ``parent``,
        a descriptor); ``PathRefused`` with the reason."""
        how = _OpenHow(flags | os.O_CLOEXEC, 0o666 if flags & os.O_CREAT else 0, BENEATH)
        fd = self._syscall(SYS_OPENAT2, self.fd if parent is None else parent, os.fsencode(path), ctypes.byref(how),
                           ctypes.sizeof(how))
        if fd < 0:
            code = ctypes.get_errno()
            raise PathRefused(f"{path}: {_REASONS.get(code, os.strerror(code))}")
        return fd

    def directory(self, path):
        """A descriptor of folder ``path`` inside the workspace (a command's working folder)."""
        return self.open(self.relative(path), os.O_PATH | os.O_DIRECTORY)

    def read(self, path, limit):
        """At most ``limit`` bytes of regular file ``path``."""
        fd = self.open(self.relative(path), os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise PathRefused(f"{path} is not a regular file")
            chunks, left = [], limit
            while left > 0:
                chunk = os.read(fd, min(left, 1 << 20))
                if not chunk:
                    break
                chunks.append(chunk)
                left -= len(chunk)
            return b"".join(chunks)
        except OSError as exc:
            raise PathRefused(f"{path}: {_REASONS.get(exc.errno, exc.strerror)}") from None
        finally:
            os.close(fd)

    def write(self, path, data, allowance):
        """Write ``data`` to ``path`` (its folders made), if at most ``allowance`` bytes.
        Returns ``False`` (and writes nothing) when ``data`` is over it."""
        relative = self.relative(path)
        if relative == ".":
            raise PathRefused("the workspace itself is a folder")
        if len(data) > allowance:
            return False
        folder, _, name = relative.rpartition("/")
        parent = self._folders(folder) if folder else os.dup(self.fd)
        try:
            fd = self.open(name, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, parent)
        finally:
            os.close(parent)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise PathRefused(f"{path} is not a regular file")
            os.ftruncate(fd, 0)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError as exc:
            if exc.errno == errno.EFBIG:
                return False
            raise PathRefused(f"{path}: {_REASONS.get(exc.errno, exc.strerror)}") from None
        finally:
            os.close(fd)
        return True

    def _folders(self, folder):
        """A descriptor of ``folder``, each missing component made inside its parent."""
        current = os.dup(self.fd)
        try:
            for part in folder.split("/"):
                if part in ("", "."):
                    continue
                try:
                    step = self.open(part, os.O_PATH | os.O_DIRECTORY, current)
                except PathRefused:
                    try:
                        os.mkdir(part, 0o777, dir_fd=current)  # one component: never through a link
                    except FileExistsError:
                        pass
                    except OSError as exc:
                        raise PathRefused(f"{folder}: {_REASONS.get(exc.errno, exc.strerror)}") from None
                    step = self.open(part, os.O_PATH | os.O_DIRECTORY, current)
                os.close(current)
                current = step
            return current
        except BaseException:
            os.close(current)
            raise
