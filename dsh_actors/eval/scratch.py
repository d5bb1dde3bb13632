"""What a batch job leaves on each node's disk, and who removes it.

A job's node-local files live under ``<scratch>/dsh-actors-jobs/<tag>/`` on each node that
ran its episodes: ``templates/<node>/`` (the workspace template, unpacked once),
``workspaces/<node>/<agent>/`` (each episode's) and ``logs/<node>/`` (each episode's log,
until it is sent back). An episode's workspace goes when the episode ends unless the job
keeps it (``--keep-workspaces``); when the job ends its runners remove the rest of their
node's (:func:`tidy`), so a clean job leaves only the workspaces it kept.

A job whose driver was killed tidies nothing. So every job's first runner on a node claims
its folder (:func:`claim`: the Ray job that owns it) and reaps its neighbours
(:func:`reap`): a folder whose job is no longer alive loses everything but its workspaces
at once, and its workspaces once they are older than ``KEEP_S`` — a kept workspace is
kept that long, then nothing of a job is left.
"""

from __future__ import annotations

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


def claim(root: Path, job_id: str) -> None:
    """Mark ``root`` (this job's folder on this node) as this job's."""
    root.mkdir(parents=True, exist_ok=True)
    owner = root / _OWNER
    if not owner.exists():
        owner.write_text(job_id)


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
    owners = {p: (p / _OWNER).read_text().strip() for p in folders}
    living = alive(set(owners.values()))
    touched = []
    for folder, owner in owners.items():
        if owner in living:
            continue
        for child in _children(folder):
            if child.name == "workspaces":
                for workspace in (w for node in _children(child) for w in _children(node)):
                    if now - _mtime(workspace) > KEEP_S:
                        shutil.rmtree(workspace, ignore_errors=True)
            elif child.name != _OWNER:
                shutil.rmtree(child, ignore_errors=True)
        _prune_empty(folder, keep_owner=False)
        touched.append(folder)
    return touched


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


def _prune_empty(root: Path, keep_owner: bool = True) -> None:
    """Remove the empty folders under ``root`` (and ``root`` itself, once nothing but its
    owner mark is left, unless ``keep_owner``)."""
    for folder, _, _ in sorted(os.walk(root), key=lambda entry: -len(entry[0])):
        if folder != str(root):
            try:
                os.rmdir(folder)
            except OSError:
                pass
    left = [p.name for p in root.iterdir()] if root.is_dir() else []
    if not keep_owner and left in ([], [_OWNER]):
        shutil.rmtree(root, ignore_errors=True)
