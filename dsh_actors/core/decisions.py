"""Pre- and post-execute decisions: constructors, and run-time validation as exact unions.

Pre-execute (``tools/pre-execute`` returns one)::

    {"kind": "allow"}
    {"kind": "deny", "reason": str}
    {"kind": "ask"} | {"kind": "ask", "reason": str}

Post-execute (``tools/post-execute`` returns one)::

    {"kind": "accept", "content"?: [blocks], "additional_context"?: [contexts]}
    {"kind": "block", "feedback": str | [blocks], "additional_context"?: [contexts]}

Listeners are untrusted code: a value with an unknown ``kind``, a malformed field, or
an extra key is not a decision, and the call fails closed with a
:class:`~dsh_actors.core.errors.MalformedDecisionError` (``MALFORMED_DECISION``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .errors import MalformedDecisionError

__all__ = [
    "accept",
    "allow",
    "ask",
    "block",
    "deny",
    "parse_content",
    "parse_hook_contexts",
    "parse_post_decision",
    "parse_pre_decision",
]

PRE_STAGE = "tools/pre-execute"
POST_STAGE = "tools/post-execute"


def allow() -> dict[str, Any]:
    """Let the call proceed (guards still run)."""
    return {"kind": "allow"}


def deny(reason: str) -> dict[str, Any]:
    """Refuse the call; the model sees ``Error: <reason>``."""
    return {"kind": "deny", "reason": reason}


def ask(reason: str | None = None) -> dict[str, Any]:
    """Route the call through the approval seam (deny when none is mounted)."""
    return {"kind": "ask"} if reason is None else {"kind": "ask", "reason": reason}


def accept(content: list[Any] | None = None, additional_context: list[Any] | None = None) -> dict[str, Any]:
    """Keep the result, optionally replacing its content and attaching context."""
    decision: dict[str, Any] = {"kind": "accept"}
    if content is not None:
        decision["content"] = content
    if additional_context is not None:
        decision["additional_context"] = additional_context
    return decision


def block(feedback: str | list[Any], additional_context: list[Any] | None = None) -> dict[str, Any]:
    """Turn the result into an error whose content is the corrective ``feedback``."""
    decision: dict[str, Any] = {"kind": "block", "feedback": feedback}
    if additional_context is not None:
        decision["additional_context"] = additional_context
    return decision


def _fields(value: object, stage: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise MalformedDecisionError(stage, f"expected a mapping with a 'kind', got {type(value).__name__}")
    return value


def _exact_keys(decision: Mapping[str, Any], allowed: set[str], stage: str) -> None:
    extra = sorted(str(key) for key in decision if key not in allowed)
    if extra:
        kind = decision.get("kind")
        raise MalformedDecisionError(stage, f"unexpected field(s) {extra} on a {kind!r} decision")


def parse_pre_decision(value: object) -> dict[str, Any]:
    """Validate a pre-execute decision; returns a normalised plain dict or raises."""
    decision = _fields(value, PRE_STAGE)
    kind = decision.get("kind")
    if kind == "allow":
        _exact_keys(decision, {"kind"}, PRE_STAGE)
        return {"kind": "allow"}
    if kind == "deny":
        _exact_keys(decision, {"kind", "reason"}, PRE_STAGE)
        reason = decision.get("reason")
        if not isinstance(reason, str):
            raise MalformedDecisionError(PRE_STAGE, "a 'deny' decision needs a str 'reason'")
        return {"kind": "deny", "reason": reason}
    if kind == "ask":
        _exact_keys(decision, {"kind", "reason"}, PRE_STAGE)
        if "reason" in decision:
            if not isinstance(decision["reason"], str):
                raise MalformedDecisionError(PRE_STAGE, "an 'ask' decision's 'reason' must be a str")
            return {"kind": "ask", "reason": decision["reason"]}
        return {"kind": "ask"}
    raise MalformedDecisionError(PRE_STAGE, f"unknown kind {kind!r} (expected allow, deny or ask)")


def parse_content(value: object, what: str, stage: str) -> list[Any]:
    """Validate a list of content blocks (each a mapping with a str ``type``)."""
    if not isinstance(value, list):
        raise MalformedDecisionError(stage, f"{what} must be a list of content blocks")
    for index, block_ in enumerate(value):
        if not isinstance(block_, Mapping) or not isinstance(block_.get("type"), str):
            raise MalformedDecisionError(stage, f"{what}[{index}] must be a content block with a str 'type'")
        if block_["type"] == "text" and not isinstance(block_.get("text"), str):
            raise MalformedDecisionError(stage, f"{what}[{index}] is a text block without a str 'text'")
    return list(value)


def parse_hook_contexts(value: object, what: str, stage: str) -> list[Any]:
    """Validate a list of hook contexts (each a mapping with ``content`` and ``source``)."""
    if not isinstance(value, list):
        raise MalformedDecisionError(stage, f"{what} must be a list of contexts")
    for index, context in enumerate(value):
        if not isinstance(context, Mapping) or "content" not in context:
            raise MalformedDecisionError(stage, f"{what}[{index}] must be a mapping with 'content'")
        if not isinstance(context.get("source"), Mapping):
            raise MalformedDecisionError(stage, f"{what}[{index}] needs a 'source' mapping (who attached it)")
    return list(value)


def parse_post_decision(value: object) -> dict[str, Any]:
    """Validate a post-execute decision; returns a normalised plain dict or raises.

    A ``block`` feedback given as a str becomes one text block.
    """
    decision = _fields(value, POST_STAGE)
    kind = decision.get("kind")
    if kind == "accept":
        _exact_keys(decision, {"kind", "content", "additional_context"}, POST_STAGE)
        out: dict[str, Any] = {"kind": "accept"}
        if "content" in decision:
            out["content"] = parse_content(decision["content"], "accept content", POST_STAGE)
    elif kind == "block":
        _exact_keys(decision, {"kind", "feedback", "additional_context"}, POST_STAGE)
        feedback = decision.get("feedback")
        if isinstance(feedback, str):
            feedback = [{"type": "text", "text": feedback}]
        out = {"kind": "block", "feedback": parse_content(feedback, "block feedback", POST_STAGE)}
    else:
        raise MalformedDecisionError(POST_STAGE, f"unknown kind {kind!r} (expected accept or block)")
    if "additional_context" in decision:
        out["additional_context"] = parse_hook_contexts(
            decision["additional_context"], f"{kind} additional_context", POST_STAGE
        )
    return out
