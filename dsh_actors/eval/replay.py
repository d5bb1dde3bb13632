"""``dsh-actors replay LOGS --policies P``: what would this policy set have done?

Every recorded call in the session logs — native calls and ``run_code`` sub-calls —
runs again through the full pipeline with the named policies loaded, as the same agent
(the one the log's ``turn/start`` names; else the file's name) with the same arguments,
but no tool runs for real: each tool is stood in for by its *recorded* result (an error
result is reproduced as an error with the recorded text; a sub-call by its logged
summary). Policies therefore see exactly what
happened, and nothing happens twice. The report lists, call by call, where the outcome
differs: a call that was allowed and would now be denied or blocked, or the reverse.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Mapping

from ..core.jsonvalue import thaw
from ..inmemory import InMemoryRegistry
from ..core.types import ToolExecutionResult
from ..log import read_records
from .policies import policy_listeners

__all__ = ["replay_logs"]


class _Recorded(Exception):
    """Raised by a stand-in tool to reproduce a recorded error result."""


def _recorded(event: Mapping[str, Any]) -> tuple[bool, str, dict[str, Any]]:
    """``(is_error, text, result)`` of a logged call or sub-call."""
    if event.get("type") == "tool/code-dispatch":
        return bool(event["is_error"]), str(event["result_summary"]), {"content": [
            {"type": "text", "text": str(event["result_summary"])}]}
    text = "\n".join(b.get("text", "") for b in event["content"] if isinstance(b, Mapping))
    result = {"content": thaw(event["content"])}
    if "meta" in event:
        result["meta"] = thaw(event["meta"])
    return bool(event["is_error"]), text, result


def _stand_in(name: str, recorded: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    def execute(args: Any, ctx: Any) -> Any:
        is_error, text, result = _recorded(recorded[ctx.call_id])
        if is_error:
            raise _Recorded(text[len("Error: "):] if text.startswith("Error: ") else text)
        return result

    return {"name": name, "description": f"recorded {name}", "parameters": {"type": "object"}, "execute": execute}


def _call_id(event: Mapping[str, Any]) -> str:
    return str(event["sub_call_id"] if event.get("type") == "tool/code-dispatch" else event["call_id"])


def _outcome(result: Mapping[str, Any]) -> str:
    if not result["is_error"]:
        return "ok"
    error = result.get("error")
    return f"error {error['code']}" if isinstance(error, Mapping) else "denied"


def _text(result: Mapping[str, Any]) -> str:
    return "\n".join(b.get("text", "") for b in result.get("content", []) if isinstance(b, Mapping))


async def _replay_one(path: Path, policies: list[str]) -> list[dict[str, Any]]:
    records = read_records(path)
    events = [e for e in records if e.get("type") in ("tool/result", "tool/code-dispatch")]
    agent = next((str(e["agent"]) for e in records if e.get("type") == "turn/start" and e.get("agent")), path.stem)
    recorded = {_call_id(e): e for e in events}
    registry = InMemoryRegistry()
    for name in sorted({e["name"] for e in events}):
        registry.register(_stand_in(name, recorded))
    for event_name, listener in policy_listeners(policies):
        registry.on(event_name, listener)
    rows = []
    for event in events:
        if event.get("arguments") is None or event["name"] == "run_code":
            continue  # no valid arguments: nothing to replay; a run's sub-calls are replayed one by one
        result: ToolExecutionResult = await registry.execute(
            call_id=_call_id(event), name=event["name"], arguments=thaw(event["arguments"]), agent=agent)
        before = "ok" if not event["is_error"] else (
            f"error {event['error']['code']}" if isinstance(event.get("error"), Mapping) else "denied")
        after = _outcome(result)
        if (before == "ok") != (after == "ok"):  # allowed then, refused now — or the reverse
            rows.append({"log": str(path), "call_id": _call_id(event), "name": event["name"], "agent": agent,
                         "recorded": before, "replayed": after, "text": _text(result)[:200]})
    return rows


def replay_logs(paths: list[str | Path], policies: list[str]) -> list[dict[str, Any]]:
    """The calls whose outcome differs under ``policies`` (recorded vs replayed). An
    unknown policy name raises ``ValueError`` before any log is read."""
    policy_listeners(policies)
    rows: list[dict[str, Any]] = []
    for path in paths:
        rows.extend(asyncio.run(_replay_one(Path(path), policies)))
    return rows
