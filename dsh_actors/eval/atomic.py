"""Files replaced all at once: a reader sees the old file or the new one, never a torn or
empty one.

:func:`replace_file` writes the data to a temporary file in the target's folder (named so
no reader takes it for a run's file: ``.<name>.<16 hex digits>.dsh-tmp``), then renames it
over the target; ``rename`` within one file system is atomic. A writer killed before the
rename leaves the old file whole and its temporary one behind, which
:func:`remove_leftovers` removes (the next run over the folder does).

``sync`` is for data that must survive a power cut, not only a killed process: the data is
``fsync``\\ ed before the rename, so the name never ends up holding a file whose blocks were
never written (after a power cut some file systems — XFS, ext4 mounted
``noauto_da_alloc`` — can leave a renamed-over file empty). The rename itself lasts once its
folder is synced: :func:`sync_folder`, once for a batch of files written together. Measured
on these machines (ext4, a 2 kB report): 0.05 ms a file unsynced, 0.2 ms synced, half of
it waiting for the disk rather than the driver's CPU.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from pathlib import Path

__all__ = ["is_leftover", "remove_leftovers", "replace_file", "sync_folder"]

_SUFFIX = ".dsh-tmp"
_LEFTOVER = re.compile(r"\..+\.[0-9a-f]{16}" + re.escape(_SUFFIX))


def replace_file(path: Path, data: bytes, *, sync: bool) -> None:
    """Make ``path`` hold ``data`` in one step (see the module). Whatever is at ``path`` is
    replaced, never written through: a symbolic link there is replaced by the file; a folder
    there raises ``IsADirectoryError`` and is left as it was."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}{_SUFFIX}")
    # The plain system calls: a driver writes two files per episode, and Path.write_bytes
    # costs ten times as much CPU.
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def sync_folder(folder: Path) -> None:
    """``fsync`` ``folder``: the renames and files made in it so far survive a power cut."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_leftover(name: str) -> bool:
    """Whether ``name`` is the name of a temporary file of :func:`replace_file`."""
    return _LEFTOVER.fullmatch(name) is not None


def remove_leftovers(folder: Path) -> None:
    """Remove the temporary files writers killed before their rename left in ``folder``
    (none if it does not exist)."""
    try:
        entries = list(os.scandir(folder))
    except FileNotFoundError:
        return
    for entry in entries:
        if is_leftover(entry.name) and entry.is_file(follow_symlinks=False):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)
