"""An example tool plugin: ``dsh-actors eval EPISODES --tools dsh_actors.examples.tools_plugin:tools``.

A plugin is a list of tool definitions, or a function returning one; given the job's
:class:`~dsh_actors.tools.AgentWorkspaces`, its tools work in each agent's own copy of the
workspace. Copy this file next to your episodes, rename it, and name it with ``--tools``.
"""

from __future__ import annotations

from typing import Any

from dsh_actors.tools import AgentWorkspaces


def tools(workspaces: AgentWorkspaces) -> list[dict[str, Any]]:
    def count_lines(args: Any, ctx: Any) -> list[dict[str, str]]:
        text = workspaces.at(ctx).resolve(args["path"]).read_text()
        return [{"type": "text", "text": f"{len(text.splitlines())} lines"}]

    return [{"name": "count_lines", "description": "Count the lines of a file in the workspace.",
             "parameters": {"path": {"type": "string", "required": True}}, "execute": count_lines}]
