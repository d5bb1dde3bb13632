"""What a batch job leaves on each node's disk, and who removes it.

A job's node-local files live under ``<scratch>/dsh-actors-jobs/<tag>/`` on each node that
ran its episodes: ``templates/<node>/`` (the workspace template, unpacked once),
``workspaces/<node>/<agent>/`` (each episode's) and ``logs/<node>/`` (each episode's log,
until it is sent back). An episode's workspace goes when the episode ends unless the job
keeps it (``--keep-workspaces``); when the job ends its runners remove the rest of their
node's (:func:`tidy`), so a clean job leaves only the workspaces it kept.

A job whose driver was killed tidies nothing. So every runner on a node claims its job's
folder (:func:`claim`: it names the Ray job that owns it and what that job keeps, and the
runner holds a shared lock on that mark for as long as it lives) and reaps its neighbours
(:func:`reap`): a folder whose job is no longer alive loses everything but its workspaces
at once, and its workspaces once they are older than ``KEEP_S`` — a kept workspace (and
one a killed job's episode was working in, unless that job kept none) is kept that long,
then nothing of a job is left. Two tests decide that a job is gone: no process holds its lock
(the kernel drops a killed runner's), and its cluster does not list it as running. The
lock is what protects a job of another Ray cluster that shares this machine's scratch
folder, which this cluster cannot see.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from pathlib import Path
from typing import Callable, Iterable

__all__ = ["KEEP_S", "claim", "reap", "tidy"]

KEEP_S = 7 * 24 * 3600.0
"""How long a kept workspace of a job that ended stays on its node (a week: long enough to
look at a failed episode, short enough that a fleet's disks do not fill)."""

_OWNER = "job"


def claim(root: Path, job_id: str, keep: str = "failed") -> int:
    """Mark ``root`` (this job's folder on this node) as this job's, which keeps ``keep``
    workspaces (``--keep-workspaces``); the descriptor that holds the claim (close it when
    this process no longer works in the folder; its death closes it too)."""
    owner = root / _OWNER
    while True:
        try:
            root.mkdir(parents=True, exist_ok=True)
            fd = os.open(owner, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except FileNotFoundError:  # a reaper removed the folder meanwhile
            continue
        fcntl.flock(fd, fcntl.LOCK_SH)  # waits while a reaper holds the mark
        try:
            if os.fstat(fd).st_ino == os.stat(owner).st_ino:  # still the mark at that path
                break
        except FileNotFoundError:
            pass
        os.close(fd)  # the reaper removed the mark this locked: claim the new one
    if os.fstat(fd).st_size == 0:
        os.pwrite(fd, f"{job_id}\n{keep}\n".encode(), 0)
    return fd


def tidy(root: Path, node: str, logs_sent: bool) -> None:
    """This job is over on ``node``: remove its template copy and (when they were sent back
    to the driver) its logs there, and every folder left empty."""
    shutil.rmtree(root / "templates" / node, ignore_errors=True)
    if logs_sent:
        shutil.rmtree(root / "logs" / node, ignore_errors=True)
    _prune_empty(root)


def reap(parent: Path, ours: Path, alive: Callable[[Iterable[str]], set[str]], now: float | None = None) -> list[Path]:
    """Reap the job folders under ``parent`` (other than ``ours``) whose jobs are not alive
    (``alive(ids)`` says which of the ids are): all but their workspaces now, their
    workspaces past ``KEEP_S``; the folders removed or trimmed."""
    now = time.time() if now is None else now
    folders = [p for p in _children(parent) if p != ours and (p / _OWNER).is_file()]
    marks = {p: _read(p / _OWNER) for p in folders}
    living = alive({owner for owner, _ in marks.values()})
    touched = []
    for folder, (owner, keep) in marks.items():
        if owner in living:
            continue
        try:
            fd = os.open(folder / _OWNER, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # a runner of it still works here (another cluster's job)
                continue
            _reap_one(folder, now, keeps=keep != "never")
            touched.append(folder)
        finally:
            os.close(fd)
    return touched


def _reap_one(folder: Path, now: float, keeps: bool) -> None:
    """Remove what a dead job left in ``folder`` (its mark locked by the caller): all but
    its workspaces, those past ``KEEP_S`` (all of them if it ``keeps`` none), and the
    folder once nothing else is left."""
    for child in _children(folder):
        if child.name == "workspaces":
            for workspace in (w for node in _children(child) for w in _children(node)):
                if not keeps or now - _mtime(workspace) > KEEP_S:
                    shutil.rmtree(workspace, ignore_errors=True)
        else:
            shutil.rmtree(child, ignore_errors=True)
    _prune_empty(folder)
    if [p.name for p in folder.iterdir()] == [_OWNER]:  # (the caller holds it open: folder is there)
        # Only ever rmdir: a restarted runner of this job may be making the folder anew
        # (it finds the mark it waited on unlinked and claims a new one).
        os.unlink(folder / _OWNER)
        try:
            os.rmdir(folder)
        except OSError:
            pass


def _read(path: Path) -> tuple[str, str]:
    """A mark's job id and what that job keeps."""
    try:
        lines = path.read_text().split()
    except OSError:
        lines = []
    return (lines[0] if lines else ""), (lines[1] if len(lines) > 1 else "failed")


def _children(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []


def _mtime(path: Path) -> float:
    try:
        return os.stat(path).st_mtime
    except OSError:
        return 0.0


def _prune_empty(root: Path) -> None:
    """Remove the empty folders under ``root``."""
    for folder, _, _ in sorted(os.walk(root), key=lambda entry: -len(entry[0])):
        if folder != str(root):
            try:
                os.rmdir(folder)
            except OSError:
                pass
