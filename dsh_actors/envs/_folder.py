"""Where a backend keeps what its environments need on the host, and who cleans it up.

One base folder per host user (``/tmp/dsh-envs-<uid>`` unless given), mode 0700, holding:

    uids/                        (root hosts) one lock file per environment uid ever used (in
                                 this user's default base folder, whatever folder a backend has)
    <pid>-<start>-<n>/           one backend's folder: its owner is process <pid> started at <start>
        root/                    an empty folder each environment mounts its own root over
        cgroups                  the parent cgroups it made, one path a line
        e<k>.sock                each live environment's socket

The environments never see any of it (the host's ``/tmp`` is not in their root, and the base
folder is hidden wherever it is). :func:`reap` removes what a backend whose process died
left (its processes died with it: parent-death signals); every backend reaps at start.
"""

from __future__ import annotations

import itertools
import os
import stat
from pathlib import Path

from . import _cgroups
from .contract import EnvironmentUnavailableError

__all__ = ["Folder", "base_folder", "reap"]

SOCKET_PATH_BYTES = 107
"""The longest socket path ``bind`` takes (``sun_path`` is 108 bytes with its NUL)."""

_made = itertools.count()


def _started(pid: int) -> str | None:
    """When process ``pid`` started (``None``: no such process), so a reused pid is not it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def base_folder(path: str | None = None) -> str:
    """The base folder, made 0700 if missing; refused if someone else made it."""
    base = path or os.path.join("/tmp", f"dsh-envs-{os.geteuid()}")
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(base)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o077:
        raise EnvironmentUnavailableError(
            f"{base} is not a folder of this user with mode 0700: another user may have made it to watch or "
            f"replace environment sockets; remove it, or give NativeBackend(folder=...) a folder of your own")
    os.makedirs(os.path.join(base, "uids"), mode=0o700, exist_ok=True)
    return base


class Folder:
    """One backend's folder in the base folder (see the module docs)."""

    def __init__(self, base: str) -> None:
        self.base = base
        pid = os.getpid()
        self.path = os.path.join(base, f"{pid}-{_started(pid)}-{next(_made)}")
        os.mkdir(self.path, 0o700)
        self.stage = os.path.join(self.path, "root")
        os.mkdir(self.stage, 0o755)
        # A uid is the host's, not a folder's: backends given folders of their own still
        # claim theirs in one place, or two environments could run as one uid at once.
        self.uid_locks = os.path.join(base_folder(), "uids")

    def socket(self, name: str) -> str:
        path = os.path.join(self.path, f"{name}.sock")
        if len(os.fsencode(path)) > SOCKET_PATH_BYTES:
            raise EnvironmentUnavailableError(f"socket paths under {self.base} are too long for bind(): "
                                              f"give NativeBackend(folder=...) a shorter one")
        return path

    def record_cgroups(self, paths: list[str]) -> None:
        Path(self.path, "cgroups").write_text("".join(f"{p}\n" for p in paths))

    def remove(self) -> None:
        _remove(self.path)


def _remove(folder: str) -> None:
    """Remove a backend's folder: its cgroups (emptied first), sockets, root, itself."""
    try:
        parents = Path(folder, "cgroups").read_text().split()
    except OSError:
        parents = []
    for parent in parents:
        if os.path.basename(parent).startswith(_cgroups.PARENT_PREFIX):
            _cgroups.kill_all(parent)
            _cgroups.remove_tree(parent)
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                os.rmdir(entry.path)
            else:
                os.unlink(entry.path)
        except OSError:
            pass
    try:
        os.rmdir(folder)
    except OSError:
        pass


def reap(folder: str | None = None) -> list[str]:
    """Remove what backends whose process died left in the base ``folder`` (default: this
    user's): their environments' sockets, their cgroups (any process still in one is
    killed first), their folders. Returns the folders removed. Safe to run at any time:
    a live backend's folder is left alone."""
    base = folder or os.path.join("/tmp", f"dsh-envs-{os.geteuid()}")
    removed: list[str] = []
    try:
        entries = list(os.scandir(base))
    except OSError:
        return removed
    for entry in entries:
        pid_text, _, rest = entry.name.partition("-")
        start = rest.rpartition("-")[0]
        if not pid_text.isdigit() or not entry.is_dir(follow_symlinks=False):
            continue
        if _started(int(pid_text)) == start:
            continue  # its owner is alive
        _remove(entry.path)
        removed.append(entry.path)
    return removed
