"""What an MCP client sees of a tool and of a call's result (no Ray, no HTTP here).

A definition becomes an MCP ``Tool``: its name, description and arguments' JSON Schema, and
the hints an MCP client reads from ``annotations`` — taken from the definition's ``extras``
(``read_only``, ``destructive``, ``idempotent``, ``open_world``: booleans; absent, the client's
defaults stand). A result becomes a ``CallToolResult``: its content blocks, ``is_error``, the
``structured_content`` its ``meta`` carries (as an MCP server's result does through
:mod:`~dsh_actors.runtime.mcp_adapter`), and in ``_meta`` under ``dsh`` the call's id, its
error (``{name, code}``) and its whole ``meta``, so a client that knows dsh keeps the code.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import mcp_types as types

from ..core import jsonvalue
from ..core.definitions import hints_of, object_schema
from ..core.errors import ToolNotFoundError
from ..core.registry import RUN_CODE
from ..core.types import ToolDefinition, ToolExecutionResult

__all__ = ["HINTS", "listed", "mcp_result", "mcp_tool", "unlisted"]

HINTS = {"read_only": "read_only_hint", "destructive": "destructive_hint", "idempotent": "idempotent_hint",
         "open_world": "open_world_hint"}
"""``extras`` key of a definition -> the MCP tool annotation it sets."""


def mcp_tool(definition: ToolDefinition) -> types.Tool:
    """``definition`` as an MCP client lists it."""
    hints: dict[str, Any] = {HINTS[key]: value for key, value in hints_of(definition).items()}
    return types.Tool(name=definition.name, description=definition.description, input_schema=object_schema(definition),
                      annotations=types.ToolAnnotations(**hints) if hints else None)


def listed(definitions: list[ToolDefinition], mode: str, sdk: str | None = None) -> list[types.Tool]:
    """What an agent's ``tools/list`` holds in its registry's ``mode``: its visible tools
    (``native``); ``run_code`` alone, the ``tools:sdk`` text (``sdk``) closing its
    description, as a model in Code Mode sees it (``code``); or both (``both``)."""
    tools = []
    for definition in definitions:
        tool = mcp_tool(definition)
        if definition.name == RUN_CODE:
            if mode == "native":
                continue
            if sdk:
                tool.description = f"{tool.description or ''}\n\n{sdk}".strip()
        elif mode == "code":
            continue
        tools.append(tool)
    return tools


def unlisted(name: str) -> types.CallToolResult:
    """The answer to a call of a tool the agent's ``tools/list`` does not hold (in Code
    Mode, a tool only a program may call): an error with the pipeline's code for an unknown
    tool (``UNKNOWN_TOOL``) and its message."""
    error = ToolNotFoundError(name)
    return types.CallToolResult(content=[types.TextContent(type="text", text=str(error))], is_error=True,
                                _meta={"dsh": {"error": {"name": type(error).__name__, "code": error.code}}})


def _block(block: Any) -> types.ContentBlock:
    """One content block: text and images as they are, anything else as its JSON text."""
    if isinstance(block, Mapping):
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            return types.TextContent(type="text", text=block["text"])
        if kind == "image" and isinstance(block.get("data"), str):
            return types.ImageContent(type="image", data=block["data"],
                                      mime_type=str(block.get("mimeType") or block.get("mime_type") or "image/png"))
    return types.TextContent(type="text", text=json.dumps(jsonvalue.thaw(block), default=str))


def mcp_result(result: ToolExecutionResult) -> types.CallToolResult:
    """``result`` as an MCP ``tools/call`` answers it."""
    meta = jsonvalue.thaw(result.meta) if result.meta is not None else None
    structured = meta.get("structured_content") if isinstance(meta, dict) else None
    dsh: dict[str, Any] = {"call_id": result.call_id}
    if result.error is not None:
        dsh["error"] = jsonvalue.thaw(result.error)
    if meta is not None:
        dsh["meta"] = meta
    return types.CallToolResult(content=[_block(b) for b in result.content], is_error=bool(result.is_error),
                                structured_content=structured, _meta={"dsh": dsh})
