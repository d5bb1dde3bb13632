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
from ..core.types import ToolDefinition, ToolExecutionResult

__all__ = ["HINTS", "mcp_result", "mcp_tool"]

HINTS = {"read_only": "read_only_hint", "destructive": "destructive_hint", "idempotent": "idempotent_hint",
         "open_world": "open_world_hint"}
"""``extras`` key of a definition -> the MCP tool annotation it sets."""


def mcp_tool(definition: ToolDefinition) -> types.Tool:
    """``definition`` as an MCP client lists it."""
    schema = jsonvalue.thaw(definition.parameters)
    if not isinstance(schema, dict) or schema.get("type") != "object":
        schema = {"type": "object", **(schema if isinstance(schema, dict) else {})}  # MCP wants an object root
    hints = {field: definition.extras[key] for key, field in HINTS.items()
             if isinstance(definition.extras.get(key), bool)}
    return types.Tool(name=definition.name, description=definition.description, input_schema=schema,
                      annotations=types.ToolAnnotations(**hints) if hints else None)


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
