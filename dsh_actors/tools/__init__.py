"""Reference tools: ``bash`` and the file tools, confined to a workspace root."""

from .bash import bash_tool
from .fs import fs_tools
from .workspace import AgentWorkspaces, Workspace, WorkspaceError, applied_hunks

__all__ = ["AgentWorkspaces", "Workspace", "WorkspaceError", "applied_hunks", "bash_tool", "fs_tools",
           "reference_tools"]


def reference_tools(root: "str | Workspace | AgentWorkspaces") -> list:
    """Every shipped reference tool for the workspace at ``root`` (bash, then the file
    tools); with :class:`AgentWorkspaces`, each agent works in its own."""
    return [bash_tool(root), *fs_tools(root)]
