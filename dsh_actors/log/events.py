"""Session events: their shapes, the model-facing history, and replayed cards.

Durable events are JSON objects with a ``type``: :data:`EVENT_TYPES` gives each type's
required fields, :data:`EVENT_DOCS` what it records (``docs/episode-format.md`` lists
them, generated from both).

:func:`derive_messages` rebuilds what the model sees; :func:`replay_cards` re-renders
each call's cards from the log with the tools' presenters — deterministically, because
presenters are pure functions of the logged arguments and result (``meta`` included).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from ..core.errors import HarnessError
from ..core.jsonvalue import NotLosslessJSONError, detach
from ..core.types import ToolDefinition, ToolExecutionResult

__all__ = [
    "EVENT_DOCS",
    "EVENT_TYPES",
    "InvalidEventError",
    "check_event",
    "context_message_event",
    "derive_messages",
    "replay_cards",
    "tool_result_event",
]

EVENT_TYPES: dict[str, tuple[str, ...]] = {
    "tool/result": ("call_id", "name", "content", "is_error"),
    "tool/code-dispatch": ("parent_call_id", "sub_call_id", "name", "arguments", "is_error", "result_summary"),
    "context/message": ("contexts",),
    "approval/asked": ("id", "tool_name"),
    "approval/decided": ("id", "outcome"),
    "approval/policy": ("policy",),
    "system/prompt": ("content",),
    "user/message": ("content",),
    "assistant/message": ("content",),
    "turn/start": (),
    "turn/end": (),
}


EVENT_DOCS: dict[str, str] = {
    "tool/result": "one per call: its `arguments` as logged, `content`, `is_error`, and when present `error` "
                   "(`code`, `message`), `meta`, `additional_context`",
    "tool/code-dispatch": "a `run_code` sub-call (log only, never part of the model's history)",
    "context/message": "the step's additional context, after its results",
    "approval/asked": "an ask: its `id`, `tool_name`, and `call_id` and `reason` when known",
    "approval/decided": "its answer: `outcome` (`allowed-once`, `rejected`, `cancelled`, `expired`: nobody "
                        "answered in time)",
    "approval/policy": "an approval policy that answered",
    "system/prompt": "what a model's run was given, logged once when it starts (log only): the system prompt "
                     "(`content`) and the `tools` sent with each request (Chat Completions function schemas)",
    "user/message": "a user's message (`content`)",
    "assistant/message": "a model turn: `content`, `tool_calls` (`call_id`, `name`, `arguments` as the model wrote "
                         "them), and with `--token-ids` its `tokens` (`prompt_ids`, `completion_ids`, `logprobs`; or "
                         "`missing` with why)",
    "turn/start": "an episode's turn begins",
    "turn/end": "an episode's turn ends",
}
"""What each event type records (its required fields are :data:`EVENT_TYPES`)."""


class InvalidEventError(HarnessError, ValueError):
    """An event is not one of the session's event shapes, or not lossless JSON."""

    code = "INVALID_EVENT"


def check_event(event: Any) -> dict[str, Any]:
    """A detached copy of a valid event, or :class:`InvalidEventError`."""
    if not isinstance(event, Mapping) or not isinstance(event.get("type"), str):
        raise InvalidEventError("a session event is a mapping with a str 'type'")
    required = EVENT_TYPES.get(event["type"])
    if required is None:
        raise InvalidEventError(f"unknown session event type {event['type']!r}; known: {', '.join(EVENT_TYPES)}")
    missing = [key for key in required if key not in event]
    if missing:
        raise InvalidEventError(f"{event['type']} event is missing {missing}")
    try:
        return detach(event, path="event")
    except NotLosslessJSONError as exc:
        raise InvalidEventError(f"session events must be lossless JSON: {exc}") from None


def tool_result_event(arguments: Any, name: str, result: Mapping[str, Any]) -> dict[str, Any]:
    """The ``tool/result`` event for one call's final result."""
    event: dict[str, Any] = {
        "type": "tool/result", "call_id": result.get("call_id"), "name": name, "arguments": arguments,
        "content": result["content"], "is_error": result["is_error"],
    }
    for key in ("error", "meta", "additional_context"):
        if key in result:
            event[key] = result[key]
    return event


def context_message_event(contexts: list[Any]) -> dict[str, Any]:
    """The ``context/message`` event carrying a step's buffered additional context."""
    return {"type": "context/message", "contexts": contexts}


def _context_text(context: Mapping[str, Any]) -> str:
    content = context.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, Mapping) and b.get("type") == "text")
    return ""


def derive_messages(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The model-facing history: messages, tool results, and context after each step.

    Log-only events (code dispatch, approvals, turn markers) never surface.
    """
    messages: list[dict[str, Any]] = []
    for event in events:
        kind = event.get("type")
        if kind == "user/message":
            messages.append({"role": "user", "content": detach(event["content"])})
        elif kind == "assistant/message":
            message = {"role": "assistant", "content": detach(event["content"])}
            if "tool_calls" in event:
                message["tool_calls"] = detach(event["tool_calls"])
            messages.append(message)
        elif kind == "tool/result":
            message = {"role": "tool", "call_id": event["call_id"], "name": event["name"],
                       "content": detach(event["content"]), "is_error": event["is_error"]}
            if "error" in event:
                message["error"] = detach(event["error"])
            messages.append(message)
        elif kind == "context/message":
            texts = [_context_text(c) for c in event["contexts"] if isinstance(c, Mapping)]
            messages.append({"role": "user", "content": "\n\n".join(t for t in texts if t),
                             "contexts": detach(event["contexts"])})
    return messages


def replay_cards(events: Iterable[Mapping[str, Any]], tools: Mapping[str, ToolDefinition]) -> list[dict[str, Any]]:
    """Each logged call's pending and completed cards, rendered again by its tool's presenters.

    A tool that is not in ``tools`` (or has no presenter) gets ``None`` views: the UI's
    generic fallback. Presenters see exactly the logged arguments and result.
    """
    cards = []
    for event in events:
        if event.get("type") != "tool/result":
            continue
        definition = tools.get(event["name"])
        args = event.get("arguments")
        result = ToolExecutionResult({k: event[k] for k in ("content", "is_error", "meta") if k in event})
        call_view = definition.present_call(args) if definition and definition.present_call else None
        result_view = (definition.present_result(args, result)
                       if definition and definition.present_result else None)
        cards.append({"call_id": event["call_id"], "name": event["name"], "call": call_view, "result": result_view})
    return cards
