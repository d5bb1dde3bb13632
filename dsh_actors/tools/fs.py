"""File tools: ``read_file``, ``write_file``, ``edit_file`` — confined to a workspace root.

Cards: reads are generic (kind ``read``, with the file's location); writes and edits show
a diff — at call time what the arguments say, at result time the hunks actually applied
(kept in the result's ``meta`` so a replay renders the same card).
"""

from __future__ import annotations

import os
from typing import Any

from ..core.define import define_tool
from ..core.types import ToolDefinition, text_block
from .places import Place, place_of, relative_path
from .workspace import AgentWorkspaces, Workspace, WorkspaceError, applied_hunks

__all__ = ["fs_tools"]

MAX_READ_BYTES = 256 * 1024
MAX_EDIT_BYTES = 4 * 1024 * 1024
"""The largest file ``write_file`` diffs against and ``edit_file`` edits (whole, in memory)."""



def reads_only(args: object) -> bool:
    """A call that only reads: it may run alongside the others of its step."""
    return True


def changes_state(args: object) -> bool:
    """A call that writes or runs commands: it runs alone."""
    return False


def fs_tools(root: "str | os.PathLike[str] | Workspace | AgentWorkspaces | Any") -> list[ToolDefinition]:
    """The three file tools for ``root``: each agent's environment (an environments
    resolver; the files are read and written inside its walls), or — opted into — the
    host's workspace at a path, a :class:`Workspace` or each agent's own
    (:class:`AgentWorkspaces`)."""
    places = place_of(root)

    async def existing(ctx: Any, path: str) -> tuple[Place, str]:
        place = await places.place(ctx)
        data = await place.read(path, MAX_READ_BYTES)
        if data is None:
            raise WorkspaceError(f'no file at "{path}" in the workspace')
        return place, data.decode("utf-8", errors="replace")

    async def read(args: Any, ctx: Any) -> Any:
        _, data = await existing(ctx, args["path"])
        lines = data.splitlines(keepends=True)
        start = int(args.get("offset", 1)) - 1 if "offset" in args else 0
        if start < 0:
            raise WorkspaceError("offset is 1-based: the first line is 1")
        end = start + int(args["limit"]) if "limit" in args else len(lines)
        return [text_block("".join(lines[start:end]))]

    async def write(args: Any, ctx: Any) -> Any:
        place = await places.place(ctx)
        rel = relative_path(place.root, args["path"])
        old = await place.read(rel, MAX_EDIT_BYTES)
        await place.write(rel, args["content"].encode("utf-8"))
        before = None if old is None else old.decode("utf-8", errors="replace")
        diffs = ([{"path": rel, "old_text": None, "new_text": args["content"]}] if before is None
                 else applied_hunks(rel, before, args["content"]))
        verb = "created" if before is None else "overwrote"
        return {"content": [text_block(f"{verb} {rel} ({len(args['content'])} characters)")], "meta": {"diffs": diffs}}

    async def edit(args: Any, ctx: Any) -> Any:
        place = await places.place(ctx)
        rel = relative_path(place.root, args["path"])
        data = await place.read(rel, MAX_EDIT_BYTES + 1)
        if data is None:
            raise WorkspaceError(f'no file at "{args["path"]}" in the workspace')
        if len(data) > MAX_EDIT_BYTES:
            raise WorkspaceError(f'"{args["path"]}" is larger than {MAX_EDIT_BYTES} bytes; edit it with bash')
        before = data.decode("utf-8")
        count = before.count(args["old_text"]) if args["old_text"] else 0
        if count == 0:
            raise WorkspaceError(f'old_text was not found in "{args["path"]}"; read the file and copy the exact text')
        if count > 1 and not args.get("replace_all"):
            raise WorkspaceError(f'old_text occurs {count} times in "{args["path"]}"; add context or set replace_all')
        after = before.replace(args["old_text"], args["new_text"], -1 if args.get("replace_all") else 1)
        await place.write(rel, after.encode("utf-8"))
        return {"content": [text_block(f"edited {rel}: {count if args.get('replace_all') else 1} replacement(s)")],
                "meta": {"diffs": applied_hunks(rel, before, after)}}

    def result_diff(args: Any, result: Any) -> Any:
        meta = result.get("meta")
        if result.get("is_error") or not isinstance(meta, dict) or not isinstance(meta.get("diffs"), list):
            return None
        return {"card": "diff", "diffs": meta["diffs"]}

    return [
        define_tool(
            name="read_file", description="Read a text file in the workspace.",
            parameters={"path": {"type": "string", "required": True, "description": "Path inside the workspace."},
                        "offset": {"type": "number", "description": "First line to read (1-based)."},
                        "limit": {"type": "number", "description": "How many lines to read."}},
            execute=read,
            is_concurrency_safe=reads_only,
            present_call=lambda a: {"card": "generic", "title": a["path"], "kind": "read",
                                    "locations": [{"path": a["path"], **({"line": int(a["offset"])} if "offset" in a and int(a["offset"]) >= 1 else {})}]},
        ),
        define_tool(
            name="write_file", description="Create or overwrite a text file in the workspace.",
            parameters={"path": {"type": "string", "required": True, "description": "Path inside the workspace."},
                        "content": {"type": "string", "required": True, "description": "The whole new content."}},
            execute=write,
            is_concurrency_safe=changes_state,
            present_call=lambda a: {"card": "diff", "title": a["path"],
                                    "diffs": [{"path": a["path"], "old_text": None, "new_text": a["content"]}]},
            present_result=result_diff,
        ),
        define_tool(
            name="edit_file", description="Replace exact text in a file in the workspace.",
            parameters={"path": {"type": "string", "required": True, "description": "Path inside the workspace."},
                        "old_text": {"type": "string", "required": True, "description": "Exact text to replace."},
                        "new_text": {"type": "string", "required": True, "description": "Replacement text."},
                        "replace_all": {"type": "boolean", "description": "Replace every occurrence."}},
            execute=edit,
            is_concurrency_safe=changes_state,
            present_call=lambda a: {"card": "diff", "title": a["path"],
                                    "diffs": [{"path": a["path"], "old_text": a["old_text"], "new_text": a["new_text"]}]},
            present_result=result_diff,
        ),
    ]
