"""Terminal rendering of presentation cards (live during ``eval``, and ``dsh-actors show``).

A card is drawn from the tool's own views — the pending call view and the completed
result view — falling back to the generic card (tool name, raw arguments, result text)
when the tool presents nothing. Pure text: no terminal control codes, so logs stay
readable.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

__all__ = ["render_card"]

_WIDTH = 100


def _cut(text: str) -> str:
    """``text`` on one card line: cut at the card's width, with the size it had said."""
    return text if len(text) <= _WIDTH else f"{text[: _WIDTH - 1]}… ({len(text):,} chars)"


def _clip(text: str, lines: int = 12) -> list[str]:
    rows = text.splitlines() or [""]
    shown = [_cut(r) for r in rows[:lines]]
    if len(rows) > lines:
        shown.append(f"… ({len(rows) - lines} more lines)")
    return shown


def _result_text(result: Mapping[str, Any]) -> str:
    return "\n".join(b.get("text", f"[{b.get('type')} content]") for b in result.get("content", [])
                     if isinstance(b, Mapping))


def render_card(name: str, arguments: Any, call_view: Mapping[str, Any] | None,
                result_view: Mapping[str, Any] | None, result: Mapping[str, Any]) -> str:
    """One call as a few lines of text."""
    status = "✗" if result.get("is_error") else "✓"
    code = result.get("error", {}).get("code") if isinstance(result.get("error"), Mapping) else None
    call_view = call_view or {"card": "generic", "title": name, "raw_input": arguments}
    card = call_view.get("card")
    title_lines = str(call_view.get("title", name)).splitlines() or [""]
    title = _cut(title_lines[0]) + (" …" if len(title_lines) > 1 else "")
    head = f"{status} {name}: {title}"
    lines = [head + (f"  [{code}]" if code else "")]
    if card == "terminal":
        if call_view.get("description"):  # under the head line: the card's first line is always its head
            lines.append(_cut(f"  # {call_view['description']}"))
        if call_view.get("cwd"):
            lines.append(_cut(f"  cwd {call_view['cwd']}"))
    elif card == "generic" and "raw_input" in call_view:
        lines.append(_cut("  input " + json.dumps(call_view["raw_input"], ensure_ascii=False)))
    if result_view and result_view.get("card") == "terminal":
        lines += ["  │ " + row for row in _clip(result_view.get("output", _result_text(result)))]
        if "exit_code" in result_view:
            lines.append(f"  exit {result_view['exit_code']}")
    elif result_view and result_view.get("card") == "diff":
        for diff in result_view.get("diffs", []):
            lines.append(_cut(f"  ~ {diff['path']}"))
            old = (diff.get("old_text") or "").splitlines()
            new = diff.get("new_text", "").splitlines()
            lines += ([_cut("  - " + r) for r in old if r not in new][:8]
                      + [_cut("  + " + r) for r in new if r not in old][:8])
    else:
        text = result_view.get("content") if result_view and result_view.get("content") else None
        body = _result_text({"content": text}) if text else _result_text(result)
        lines += ["  │ " + row for row in _clip(body, 6)]
    return "\n".join(lines)
