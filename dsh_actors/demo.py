"""A short tour: register tools and policies, run calls through the pipeline, print cards.

``python -m dsh_actors demo`` runs it. Each call prints its pending card (from the tool's
``present_call``), the model-facing result, and its completed card (``present_result``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Callable

from .core.decisions import accept, block, deny
from .core.define import define_tool, tool
from .core.registry import InMemoryRegistry
from .core.types import ToolDefinition, ToolExecutionResult, text_block

__all__ = ["demo_calls", "demo_tools", "install_demo_policies", "main", "render_call"]


@tool(description="Add two integers.")
def add(a: int, b: int) -> str:
    return str(a + b)


def _shell_body(args: Any, ctx: Any) -> Any:
    # A pretend shell: it never runs anything, so the demo is safe anywhere.
    output = f"$ {args['command']}\n(pretend output of {args['command'].split()[0]})"
    return {"content": [text_block(output)], "meta": {"exit_code": 0}}


def demo_tools() -> list[ToolDefinition]:
    """The demo's tools: a typed tool, a terminal-card tool and a diff-card tool."""
    shell = define_tool(
        name="shell",
        description="Run a shell command (pretend).",
        parameters={
            "command": {"type": "string", "required": True, "description": "The command to run."},
            "description": {"type": "string", "description": "One-line summary for the UI."},
        },
        execute=_shell_body,
        present_call=lambda args: {"card": "terminal", "title": args["command"],
                                   **({"description": args["description"]} if "description" in args else {})},
        present_result=lambda args, result: {
            "card": "terminal", "output": result["content"][0].get("text", ""),
            **({"exit_code": result["meta"]["exit_code"]} if isinstance(result.get("meta"), dict) else {}),
        },
        timeout_ms=5_000,
    )
    write = define_tool(
        name="write_note",
        description="Write a note (kept in memory).",
        parameters={"path": {"type": "string", "required": True}, "text": {"type": "string", "required": True}},
        execute=lambda args, ctx: [text_block(f"wrote {len(args['text'])} characters to {args['path']}")],
        present_call=lambda args: {"card": "diff", "title": args["path"],
                                   "diffs": [{"path": args["path"], "old_text": None, "new_text": args["text"]}]},
    )
    return [add, shell, write]


def install_demo_policies(registry: InMemoryRegistry, audit: list[str]) -> None:
    """A deny gate, a guard, a redacting post-execute listener and an audit observer."""

    async def no_rm(execution: Any, call_next: Callable[[], Any]) -> Any:
        if execution.name == "shell" and execution.arguments.get("command", "").startswith("rm "):
            return deny("destructive commands are not allowed in the demo")
        return await call_next()

    async def redact(execution: Any, result: ToolExecutionResult, call_next: Callable[[], Any]) -> Any:
        if "password" in result.text:
            return block("the output contained a secret and was withheld; do not print secrets")
        return accept()

    registry.on("tools/pre-execute", no_rm)
    registry.on("tools/post-execute", redact)
    registry.scope("agent-2").guard(lambda e: "agent-2 may not write notes" if e.name == "write_note" else None)
    registry.on("tools/result", lambda e, r: audit.append(f"{e.agent}/{e.call_id}: {'error' if r.is_error else 'ok'}"))


def demo_calls() -> list[dict[str, Any]]:
    """The scripted calls the demo makes."""
    return [
        {"call_id": "1", "name": "add", "arguments": {"a": 2, "b": 40}, "agent": "agent-1"},
        {"call_id": "2", "name": "add", "arguments": {"a": "2", "b": 40}, "agent": "agent-1"},
        {"call_id": "3", "name": "shell", "arguments": {"command": "ls -la", "description": "List files"},
         "agent": "agent-1"},
        {"call_id": "4", "name": "shell", "arguments": {"command": "rm -rf /"}, "agent": "agent-1"},
        {"call_id": "5", "name": "shell", "arguments": {"command": "cat password.txt"}, "agent": "agent-1"},
        {"call_id": "6", "name": "write_note", "arguments": {"path": "notes.md", "text": "hello"}, "agent": "agent-1"},
        {"call_id": "7", "name": "write_note", "arguments": {"path": "notes.md", "text": "hello"}, "agent": "agent-2"},
        {"call_id": "8", "name": "teleport", "arguments": {}, "agent": "agent-1"},
    ]


def render_call(definition: ToolDefinition | None, call: dict[str, Any], result: ToolExecutionResult) -> str:
    """Text for one call: pending card, result, completed card (generic fallback when None)."""
    args = call["arguments"]
    pending = definition.present_call(args) if definition and definition.present_call else None
    done = None
    if definition and definition.present_result:
        done = definition.present_result(args, {k: result[k] for k in ("content", "is_error", "meta") if k in result})
    pending = pending or {"card": "generic", "title": call["name"], "raw_input": args}
    status = "error" if result.is_error else "ok"
    lines = [
        f"[{call['agent']}] call {call['call_id']}: {call['name']}",
        f"  card    {json.dumps(pending)}",
        f"  result  ({status}) {result.text}" + (f"  {dict(result.error)}" if result.error else ""),
    ]
    if done:
        lines.append(f"  done    {json.dumps(done)}")
    return "\n".join(lines)


async def run_demo() -> list[str]:
    registry = InMemoryRegistry()
    for definition in demo_tools():
        registry.register(definition)
    audit: list[str] = []
    install_demo_policies(registry, audit)
    out = []
    for call in demo_calls():
        result = await registry.execute(call)
        out.append(render_call(registry.get(call["name"], call["agent"]), call, result))
    out.append("audit: " + ", ".join(audit))
    return out


def main() -> int:
    for block_ in asyncio.run(run_demo()):
        print(block_)
    return 0
