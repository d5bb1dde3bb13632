"""Tool-owned UI presentation: card-tagged render intents and their validation.

A tool's ``present_call(args)`` returns a *call view* (the pending card) and its
``present_result(args, result)`` a *result view* (the completed card); ``None`` means
"fall back to the generic card". Views are JSON data tagged by ``card``:

Call views::

    {"card": "generic", "title", "kind"?, "raw_input"?, "content"?, "locations"?}
    {"card": "terminal", "title", "description"?, "cwd"?}
    {"card": "diff", "title", "diffs", "locations"?}

Result views::

    {"card": "generic", "title"?, "content"?}
    {"card": "terminal", "title"?, "output"?, "exit_code"?, "signal"?}
    {"card": "diff", "title"?, "diffs"}

``kind`` is one of read/edit/delete/move/search/execute/fetch/other; a location is
``{"path", "line"?}`` (1-based); a file diff is ``{"path", "old_text": str | None,
"new_text"}`` (``None`` for a new file).
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from .errors import HarnessError
from .jsonvalue import NotLosslessJSONError, detach

__all__ = [
    "TOOL_KINDS",
    "PresentationError",
    "validate_call_view",
    "validate_result_view",
]

TOOL_KINDS = ("read", "edit", "delete", "move", "search", "execute", "fetch", "other")


class PresentationError(HarnessError, ValueError):
    """A presenter returned something that is not a valid view."""

    code = "INVALID_VIEW"


def _str(view: Mapping[str, Any], key: str, required: bool) -> None:
    if key not in view:
        if required:
            raise PresentationError(f'{view.get("card")} view needs a str "{key}"')
        return
    if not isinstance(view[key], str):
        raise PresentationError(f'view field "{key}" must be a str')


def _int(view: Mapping[str, Any], key: str) -> None:
    if key in view and (not isinstance(view[key], int) or isinstance(view[key], bool)):
        raise PresentationError(f'view field "{key}" must be an int')


def _locations(view: Mapping[str, Any]) -> None:
    if "locations" not in view:
        return
    locations = view["locations"]
    if not isinstance(locations, list):
        raise PresentationError('"locations" must be a list of {path, line?}')
    for location in locations:
        if not isinstance(location, Mapping) or not isinstance(location.get("path"), str):
            raise PresentationError('each location needs a str "path"')
        line = location.get("line")
        if "line" in location and (not isinstance(line, int) or isinstance(line, bool) or line < 1):
            raise PresentationError('a location "line" must be a 1-based int')
        _no_extra(location, {"path", "line"}, "location")


def _diffs(view: Mapping[str, Any]) -> None:
    diffs = view.get("diffs")
    if not isinstance(diffs, list):
        raise PresentationError('a diff view needs "diffs": a list of {path, old_text, new_text}')
    for diff in diffs:
        if not isinstance(diff, Mapping) or not isinstance(diff.get("path"), str):
            raise PresentationError('each file diff needs a str "path"')
        if "old_text" not in diff or not (diff["old_text"] is None or isinstance(diff["old_text"], str)):
            raise PresentationError('a file diff needs "old_text": a str, or None for a new file')
        if not isinstance(diff.get("new_text"), str):
            raise PresentationError('a file diff needs a str "new_text"')
        _no_extra(diff, {"path", "old_text", "new_text"}, "file diff")


def _content(view: Mapping[str, Any]) -> None:
    if "content" not in view:
        return
    content = view["content"]
    if not isinstance(content, list) or not all(
        isinstance(block, Mapping) and isinstance(block.get("type"), str) for block in content
    ):
        raise PresentationError('"content" must be a list of content blocks')


def _no_extra(view: Mapping[str, Any], allowed: set[str], what: str) -> None:
    extra = sorted(str(k) for k in view if k not in allowed)
    if extra:
        raise PresentationError(f"{what} has unknown field(s) {extra}; allowed: {sorted(allowed)}")


def _generic_call(view: Mapping[str, Any]) -> None:
    _str(view, "title", True)
    if "kind" in view and view["kind"] not in TOOL_KINDS:
        raise PresentationError(f'"kind" must be one of {", ".join(TOOL_KINDS)}')
    _content(view)
    _locations(view)
    _no_extra(view, {"card", "title", "kind", "raw_input", "content", "locations"}, "generic call view")


def _terminal_call(view: Mapping[str, Any]) -> None:
    _str(view, "title", True)
    _str(view, "description", False)
    _str(view, "cwd", False)
    _no_extra(view, {"card", "title", "description", "cwd"}, "terminal call view")


def _diff_call(view: Mapping[str, Any]) -> None:
    _str(view, "title", True)
    _diffs(view)
    _locations(view)
    _no_extra(view, {"card", "title", "diffs", "locations"}, "diff call view")


def _generic_result(view: Mapping[str, Any]) -> None:
    _str(view, "title", False)
    _content(view)
    _no_extra(view, {"card", "title", "content"}, "generic result view")


def _terminal_result(view: Mapping[str, Any]) -> None:
    _str(view, "title", False)
    _str(view, "output", False)
    _int(view, "exit_code")
    _str(view, "signal", False)
    _no_extra(view, {"card", "title", "output", "exit_code", "signal"}, "terminal result view")


def _diff_result(view: Mapping[str, Any]) -> None:
    _str(view, "title", False)
    _diffs(view)
    _no_extra(view, {"card", "title", "diffs"}, "diff result view")


_CALL_CARDS: dict[str, Callable[[Mapping[str, Any]], None]] = {
    "generic": _generic_call, "terminal": _terminal_call, "diff": _diff_call,
}
_RESULT_CARDS: dict[str, Callable[[Mapping[str, Any]], None]] = {
    "generic": _generic_result, "terminal": _terminal_result, "diff": _diff_result,
}


def _validate(view: object, cards: Mapping[str, Callable[[Mapping[str, Any]], None]], what: str) -> dict[str, Any] | None:
    if view is None:
        return None
    if not isinstance(view, Mapping):
        raise PresentationError(f"a {what} must be a mapping tagged by 'card', or None")
    card = view.get("card")
    check = cards.get(card) if isinstance(card, str) else None
    if check is None:
        raise PresentationError(f'unknown {what} card {card!r}; expected one of {", ".join(cards)}')
    check(view)
    try:
        return detach(view)
    except NotLosslessJSONError as exc:
        raise PresentationError(f"a {what} must be JSON data: {exc}") from None


def validate_call_view(view: object) -> dict[str, Any] | None:
    """A detached copy of a valid call view (``None`` passes), or :class:`PresentationError`."""
    return _validate(view, _CALL_CARDS, "call view")


def validate_result_view(view: object) -> dict[str, Any] | None:
    """A detached copy of a valid result view (``None`` passes), or :class:`PresentationError`."""
    return _validate(view, _RESULT_CARDS, "result view")
