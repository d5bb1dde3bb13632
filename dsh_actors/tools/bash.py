"""The ``bash`` tool: run a shell command in the workspace, with a timeout and a terminal card.

The command runs with ``bash -c`` in the call's place (:mod:`.places`): inside its agent's
episode environment — the walls are the environment's — or, opted into, on the host in
the workspace. Its output (stdout and stderr, interleaved) is capped. A non-zero exit
status is reported in the text and in ``meta``; running past ``timeout_s`` (``ENV_WALL``)
or a bound of its environment (``ENV_MEMORY``, ``ENV_PROCESSES``, ``ENV_CPU``,
``ENV_DISK``) ends the call with that code, every process of the command killed; an abort
of the call's signal kills them too (``CANCELLED``).
"""

from __future__ import annotations

import os
from typing import Any

from ..core.define import define_tool
from ..core.types import ToolDefinition
from .fs import changes_state
from .places import command_text, place_of
from .workspace import AgentWorkspaces, Workspace

__all__ = ["bash_tool"]

MAX_OUTPUT_BYTES = 64 * 1024


def bash_tool(root: "str | os.PathLike[str] | Workspace | AgentWorkspaces | Any", *,
              default_timeout_s: float = 60.0) -> ToolDefinition:
    """The ``bash`` tool for ``root``: each agent's environment (an environments resolver),
    or — opted into — the host's workspace at a path, a :class:`Workspace` or each agent's
    own (:class:`AgentWorkspaces`)."""
    places = place_of(root)

    async def run(args: Any, ctx: Any) -> Any:
        place = await places.place(ctx)
        result = await place.run(args["command"], timeout_s=float(args.get("timeout_s", default_timeout_s)),
                                 max_output=MAX_OUTPUT_BYTES, signal=getattr(ctx, "signal", None))
        return command_text(result, args["command"])

    return define_tool(
        name="bash",
        description="Run a shell command in the workspace (bash -c). Output is stdout and stderr combined.",
        parameters={
            "command": {"type": "string", "required": True, "description": "The command to run."},
            "description": {"type": "string", "description": "One-line summary shown in the UI."},
            "timeout_s": {"type": "number", "description": f"Seconds before it is killed (default {default_timeout_s:g})."},
        },
        execute=run,
        is_concurrency_safe=changes_state,
        present_call=lambda a: {"card": "terminal", "title": a["command"], "cwd": places.label,
                                **({"description": a["description"]} if "description" in a else {})},
        present_result=lambda a, r: None if not isinstance(r.get("meta"), dict) else {
            "card": "terminal", "output": r["content"][0]["text"] if r["content"] else "",
            "exit_code": r["meta"].get("exit_code", 0)},
    )
