"""``dsh-actors replay LOGS --policies P``: what would this policy set have done?

Every recorded call in the session logs runs again through the full pipeline with the
named policies loaded — as the same agent, with the same arguments — but no tool runs
for real: each tool is stood in for by its *recorded* result (an error result is
reproduced as an error with the recorded text). Policies therefore see exactly what
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


def _stand_in(name: str, recorded: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    def execute(args: Any, ctx: Any) -> Any:
        event = recorded[ctx.call_id]
        if event["is_error"]:
            text = "\n".join(b.get("text", "") for b in event["content"] if isinstance(b, Mapping))
            raise _Recorded(text[len("Error: "):] if text.startswith("Error: ") else text)
        result = {"content": thaw(event["content"])}
        if "meta" in event:
            result["meta"] = thaw(event["meta"])
        return result

    return {"name": name, "description": f"recorded {name}", "parameters": {"type": "object"}, "execute": execute}


def _outcome(result: Mapping[str, Any]) -> str:
    if not result["is_error"]:
        return "ok"
    error = result.get("error")
    return f"error {error['code']}" if isinstance(error, Mapping) else "denied"


def _text(result: Mapping[str, Any]) -> str:
    return "\n".join(b.get("text", "") for b in result.get("content", []) if isinstance(b, Mapping))


async def _replay_one(path: Path, policies: list[str]) -> list[dict[str, Any]]:
    events = [e for e in read_records(path) if e.get("type") == "tool/result"]
    agent = path.stem
    recorded = {e["call_id"]: e for e in events}
    registry = InMemoryRegistry()
    for name in sorted({e["name"] for e in events}):
        registry.register(_stand_in(name, recorded))
    for event_name, listener in policy_listeners(policies):
        registry.on(event_name, listener)
    rows = []
    for event in events:
        if event.get("arguments") is None:
            continue  # the call never had valid arguments: nothing to replay
        result: ToolExecutionResult = await registry.execute(
            call_id=event["call_id"], name=event["name"], arguments=thaw(event["arguments"]), agent=agent)
        before = "ok" if not event["is_error"] else (
            f"error {event['error']['code']}" if isinstance(event.get("error"), Mapping) else "denied")
        after = _outcome(result)
        if (before == "ok") != (after == "ok"):  # allowed then, refused now — or the reverse
            rows.append({"log": str(path), "call_id": event["call_id"], "name": event["name"],
                         "recorded": before, "replayed": after, "text": _text(result)[:200]})
    return rows


def replay_logs(paths: list[str | Path], policies: list[str]) -> list[dict[str, Any]]:
    """The calls whose outcome differs under ``policies`` (recorded vs replayed)."""
    rows: list[dict[str, Any]] = []
    for path in paths:
        rows.extend(asyncio.run(_replay_one(Path(path), policies)))
    return rows
