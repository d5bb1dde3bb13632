"""The ``bash`` tool: run a shell command in the workspace, with a timeout and a terminal card.

The command runs with ``bash -c`` in the workspace root (its working directory — a
convenience, not a security boundary: use Code Mode's sandbox or a container for that),
with its output (stdout and stderr, interleaved) capped. A non-zero exit status is
reported in the text and in ``meta``; running past ``timeout_s`` or an abort of the
call's signal kills the command's process group.
"""

from __future__ import annotations

import asyncio
import os
import signal as signals
from typing import Any

from ..core.define import define_tool
from .fs import changes_state
from ..core.errors import ToolTimeoutError
from ..core.types import ToolDefinition, text_block
from .workspace import AgentWorkspaces, Workspace, workspaces

__all__ = ["bash_tool"]

MAX_OUTPUT_BYTES = 64 * 1024


def bash_tool(root: str | os.PathLike[str] | Workspace | AgentWorkspaces, *,
              default_timeout_s: float = 60.0) -> ToolDefinition:
    """The ``bash`` tool for the workspace at ``root`` (or each agent's own: pass
    :class:`~.workspace.AgentWorkspaces`)."""
    spaces = workspaces(root)

    async def run(args: Any, ctx: Any) -> Any:
        workspace = spaces.at(ctx)
        timeout_s = float(args.get("timeout_s", default_timeout_s))
        process = await asyncio.create_subprocess_exec(
            "bash", "-c", args["command"], cwd=str(workspace.root), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True,
        )
        waiter = asyncio.ensure_future(process.communicate())
        aborted = asyncio.ensure_future(ctx.signal.wait()) if ctx is not None and ctx.signal is not None else None
        try:
            done, _ = await asyncio.wait([w for w in (waiter, aborted) if w is not None], timeout=timeout_s,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            if aborted is not None:
                aborted.cancel()
        if waiter not in done:
            try:
                os.killpg(process.pid, signals.SIGKILL)
            except ProcessLookupError:
                pass
            await waiter
            if aborted is not None and aborted in done:
                raise RuntimeError(f"command stopped: {ctx.signal.reason}")
            raise ToolTimeoutError(timeout_s * 1000)
        output = waiter.result()[0][:MAX_OUTPUT_BYTES].decode("utf-8", errors="replace")
        code = process.returncode
        text = output + ("" if code == 0 else f"\n(exit status {code})")
        return {"content": [text_block(text)], "meta": {"exit_code": code}}

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
        present_call=lambda a: {"card": "terminal", "title": a["command"], "cwd": spaces.label,
                                **({"description": a["description"]} if "description" in a else {})},
        present_result=lambda a, r: None if not isinstance(r.get("meta"), dict) else {
            "card": "terminal", "output": r["content"][0]["text"] if r["content"] else "",
            "exit_code": r["meta"].get("exit_code", 0)},
    )
