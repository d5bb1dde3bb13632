"""A short tour on Ray: tools, policies (plain and a policy actor), calls from two agents.

``python -m dsh_actors demo`` runs it on the current Ray cluster, or on a local instance
it starts on its own. The calls run concurrently, each as a Ray task through the policy
chain; each prints its pending card (``present_call``), the model-facing result, and its
completed card (``present_result``).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Callable

import ray

from .core.decisions import accept, block, deny
from .core.define import define_tool, tool
from .core.types import ToolDefinition, ToolExecutionResult, text_block
from .runtime import CONTINUE, ToolRegistry, actor_listener

__all__ = ["CallBudget", "demo_calls", "demo_tools", "main", "render_call", "run_demo"]


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


@ray.remote(num_cpus=0)
class CallBudget:
    """A policy actor: a per-agent call budget shared by every execution in the fleet."""

    def __init__(self, limits: dict[str, int], default: int = 100) -> None:
        self.limits = limits
        self.default = default
        self.used: dict[str, int] = {}
        self.audit: list[str] = []

    def check(self, execution: Any) -> Any:
        agent = execution.agent or "(no agent)"
        self.used[agent] = self.used.get(agent, 0) + 1
        limit = self.limits.get(agent, self.default)
        if self.used[agent] > limit:
            return deny(f"{agent} has used its budget of {limit} calls")
        return CONTINUE

    def observe(self, execution: Any, result: Any) -> None:
        self.audit.append(f"{execution.agent}/{execution.call_id}: {'error' if result.is_error else 'ok'}")

    def report(self) -> list[str]:
        return sorted(self.audit)


async def no_rm(execution: Any, call_next: Callable[[], Any]) -> Any:
    """A plain pre-execute gate, shipped into every execution task."""
    if execution.name == "shell" and execution.arguments.get("command", "").startswith("rm "):
        return deny("destructive commands are not allowed in the demo")
    return await call_next()


async def redact(execution: Any, result: ToolExecutionResult, call_next: Callable[[], Any]) -> Any:
    """A plain post-execute listener that withholds secrets."""
    if "password" in result.text:
        return block("the output contained a secret and was withheld; do not print secrets")
    return accept()


def no_notes_for_agent_2(execution: Any) -> str | None:
    return "agent-2 may not write notes" if execution.name == "write_note" else None


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


async def run_demo(registry: ToolRegistry) -> list[str]:
    """Register the tools and policies on ``registry``, run the calls concurrently, render them."""
    for tool_definition in demo_tools():
        await registry.register(tool_definition)
    budget = CallBudget.remote({"agent-3": 2})  # type: ignore[attr-defined]
    await registry.on("tools/pre-execute", no_rm)
    await registry.on("tools/pre-execute", actor_listener(budget, "check"))
    await registry.on("tools/post-execute", redact)
    await registry.on("tools/result", actor_listener(budget, "observe"))
    await registry.scope("agent-2").guard(no_notes_for_agent_2)
    calls = demo_calls()
    results = list(await asyncio.gather(*(registry.scope(c["agent"]).execute(c) for c in calls)))
    # agent-3 then makes three calls in a row against a budget of two.
    for n in range(3):
        call = {"call_id": f"9.{n + 1}", "name": "add", "arguments": {"a": n, "b": 1}, "agent": "agent-3"}
        calls.append(call)
        results.append(await registry.scope("agent-3").execute(call))
    out = []
    for call, result in zip(calls, results):
        definition = await registry.get(str(call["name"]), str(call["agent"]))
        out.append(render_call(definition, call, result))
    audit: list[str] = []
    for _ in range(100):  # observers are fire-and-forget: wait until the actor heard every call
        audit = await budget.report.remote()
        if len(audit) == len(calls):
            break
        await asyncio.sleep(0.05)
    out.append("audit (policy actor): " + ", ".join(audit))
    return out


def main() -> int:
    registry = ToolRegistry.connect("demo")
    try:
        for block_ in asyncio.run(run_demo(registry)):
            print(block_)
    finally:
        registry.shutdown()
    return 0
