"""An example tool plugin: ``dsh-actors eval EPISODES --tools dsh_actors.examples.tools_plugin:tools``.

A plugin is a list of tool definitions, or a function returning one; given the job's
places (each agent's environment, or — under ``--environments host`` — its workspace),
its tools act where the agent's own tools do: ``place_of(places)`` gives a call's place,
which reads, writes and runs commands inside the agent's environment (a link in the
workspace leads nowhere outside it). Copy this file next to your episodes, rename it, and
name it with ``--tools``.
"""

from __future__ import annotations

from typing import Any

from dsh_actors.tools import WorkspaceError
from dsh_actors.tools.places import place_of


def tools(places: Any) -> list[dict[str, Any]]:
    where = place_of(places)

    async def count_lines(args: Any, ctx: Any) -> list[dict[str, str]]:
        data = await (await where.place(ctx)).read(args["path"], 16 << 20)
        if data is None:
            raise WorkspaceError(f'no file at "{args["path"]}" in the workspace')
        return [{"type": "text", "text": f"{len(data.decode('utf-8', 'replace').splitlines())} lines"}]

    return [{"name": "count_lines", "description": "Count the lines of a file in the workspace.",
             "parameters": {"path": {"type": "string", "required": True}}, "execute": count_lines}]
