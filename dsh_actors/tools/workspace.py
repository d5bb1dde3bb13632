"""A workspace root that file tools stay inside, and applied-hunk diffs for their cards."""

from __future__ import annotations

import difflib
import os
from pathlib import Path
from typing import Any

from ..core.errors import HarnessError

__all__ = ["AgentWorkspaces", "Workspace", "WorkspaceError", "applied_hunks", "node_folder", "workspaces"]


class WorkspaceError(HarnessError):
    """A path escapes the workspace, or names something that is not there."""

    code = "WORKSPACE"


class Workspace:
    """Resolves model-given paths (relative to the root, or absolute inside it)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise ValueError(f"workspace root {self.root} is not a directory")

    def resolve(self, path: str) -> Path:
        """The real path inside the root, or :class:`WorkspaceError` (symlinks followed)."""
        candidate = Path(path)
        full = (candidate if candidate.is_absolute() else self.root / candidate).resolve()
        if full != self.root and self.root not in full.parents:
            raise WorkspaceError(f'path "{path}" escapes the workspace ({self.root}); use a path inside it')
        return full

    def relative(self, path: Path) -> str:
        return str(path.relative_to(self.root)) if path != self.root else "."

    def at(self, ctx: Any) -> "Workspace":
        """The workspace a call works in: this one, whoever calls."""
        return self

    @property
    def label(self) -> str:
        return str(self.root)


def node_folder() -> str:
    """This process's node, as a folder name (``local`` outside Ray): node-local files of
    a job go under it, so a call that ran on another node finds nothing rather than
    another node's copy."""
    try:
        import ray

        if ray.is_initialized():
            return ray.get_runtime_context().get_node_id()[:16]
    except Exception:  # noqa: BLE001 - no node to name
        pass
    return "local"


class AgentWorkspaces:
    """One workspace per agent: a call works in ``parent/<agent id>`` (which must exist),
    so agents running at once never see each other's files. ``per_node``: in
    ``parent/<node>/<agent id>`` on the node the call runs on (:func:`node_folder`), for a
    job whose episodes keep their workspaces on their own node's disk."""

    def __init__(self, parent: str | os.PathLike[str], *, per_node: bool = False) -> None:
        self.root = Path(parent).resolve()
        self.per_node = per_node

    @property
    def parent(self) -> Path:
        """Where this process's agents' workspaces are."""
        return self.root / node_folder() if self.per_node else self.root

    def at(self, ctx: Any) -> Workspace:
        agent = getattr(ctx, "agent", None)
        if not isinstance(agent, str) or not agent or Path(agent).name != agent or agent in (".", ".."):
            raise WorkspaceError(f"agent id {agent!r} cannot name a workspace; use a plain name")
        parent = self.parent
        try:
            return Workspace(parent / agent)
        except ValueError:
            raise WorkspaceError(f"no workspace for agent {agent!r} under {parent}") from None

    @property
    def label(self) -> str:
        return f"{self.root}/<node>/<agent>" if self.per_node else f"{self.root}/<agent>"


def workspaces(root: "str | os.PathLike[str] | Workspace | AgentWorkspaces") -> "Workspace | AgentWorkspaces":
    """A tool's workspace(s): one root for every caller, or :class:`AgentWorkspaces`."""
    return root if isinstance(root, (Workspace, AgentWorkspaces)) else Workspace(root)


def applied_hunks(path: str, before: str, after: str, context: int = 3) -> list[dict[str, Any]]:
    """The changed regions with ``context`` lines around them, as file diffs for a card."""
    old, new = before.splitlines(keepends=True), after.splitlines(keepends=True)
    hunks = []
    for group in difflib.SequenceMatcher(a=old, b=new, autojunk=False).get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        hunks.append({"path": path, "old_text": "".join(old[first[1]:last[2]]),
                      "new_text": "".join(new[first[3]:last[4]])})
    return hunks
