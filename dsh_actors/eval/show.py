"""``dsh-actors show LOG``: a session log re-rendered as the cards its calls made."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..agent.model import content_text
from ..core.jsonvalue import thaw
from ..render import render_card
from ..tools import reference_tools
from ..log import replay_cards

__all__ = ["show_log"]


def _said(content: Any, limit: int = 2000) -> str:
    """What a model turn said, as one card line or a few (long text cut, its size said)."""
    text = content_text(content).strip()
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} chars)"


def _kept_workspace(log: Path) -> tuple[Path | None, str | None]:
    """Where the run kept the workspace of the episode of a run folder's ``log``, and the
    node it is on (its report says; ``None`` when the job did not keep it)."""
    report = log.resolve().parent.parent / "reports" / f"{log.stem}.json"
    try:
        fields = json.loads(report.read_text())
        where, node = fields.get("workspace"), fields.get("node")
    except (OSError, ValueError, AttributeError):
        return None, None
    return (Path(where) if isinstance(where, str) else None), (node if isinstance(node, str) else None)


def show_log(path: str | Path, workspace: str | Path | None = None) -> tuple[str, str | None]:
    """``dsh-actors show LOG``: a session log re-rendered — each call as a card, with the
    user's messages, approvals and ``run_code`` sub-calls where they happened. Returns the
    text and, for a damaged log, a sentence on what is damaged, where and what was
    recovered (what is recoverable is still shown)."""
    from ..log import scan_log

    scan = scan_log(Path(path).read_bytes(), path, recover_after=True)
    kept, node = _kept_workspace(Path(path))
    here = kept if kept is not None and kept.is_dir() else None
    root = str(workspace or here or Path(path).resolve().parent)
    tools = {d.name: d for d in reference_tools(root)}
    parts = []
    for events in (scan.records, scan.after):
        cards = iter(replay_cards(events, tools))
        for event in events:
            kind = event.get("type")
            if kind == "tool/result":
                card = next(cards)
                parts.append(render_card(event["name"], thaw(event.get("arguments")), card["call"], card["result"], event))
            elif kind == "system/prompt":
                parts.append(f"· system prompt: {len(str(event['content'])):,} characters, "
                             f"{len(event.get('tools') or [])} tool(s) offered")
            elif kind == "user/message":
                parts.append(f"» user: {event['content']}")
            elif kind == "assistant/message" and _said(event.get("content")):
                parts.append(f"« assistant: {_said(event.get('content'))}")
            elif kind == "approval/asked":
                parts.append(f"? approval asked for {event['tool_name']} ({event['id']})"
                             + (f": {event['reason']}" if event.get("reason") else ""))
            elif kind == "approval/decided":
                parts.append(f"? approval {event['outcome']} ({event['id']})")
            elif kind == "tool/code-dispatch":
                mark = "✗" if event["is_error"] else "✓"
                args = json.dumps(thaw(event["arguments"]), ensure_ascii=False)
                parts.append(f"  ↳ {mark} {event['name']}({args}) — {event['result_summary']}")
        if events is scan.records and scan.damaged:
            parts.append(f"!! damaged bytes {scan.end}-{scan.resumes_at}: events there are lost")
    if kept is not None:
        place = "on this machine" if here is not None else f"on node {node or '(unknown)'}, not here"
        parts.append(f"· workspace kept at {kept} ({place})")
    return "\n".join(parts), (scan.describe(path) if scan.damaged or scan.torn_bytes else None)
