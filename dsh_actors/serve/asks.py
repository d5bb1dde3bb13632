"""An ask put to the MCP client: the protocol's input-required round trip (no Ray here).

A client of the 2026-07-28 revision that declares form elicitation answers an ask itself:
the gateway's first answer to ``tools/call`` is an ``InputRequiredResult`` carrying one
elicitation (allow this call once?) and a ``requestState`` naming the call and its ask;
the client shows the question, then retries the same call with its answer and that state.
The SDK's :class:`~mcp.server.request_state.RequestStateBoundary` seals the state under
the gateway's key (shared by every replica, so any replica takes the retry) and binds it to
the tool, its arguments and the caller's token; what this module reads back is the
plaintext the gateway minted. A client that speaks neither gets the approval queue.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import mcp_types as types
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

__all__ = ["APPROVAL", "answer_of", "client_answers", "question", "state_of"]

APPROVAL = "approval"
"""The key of the one input request an ask makes."""

ALLOW_FIELD = "allow"


def client_answers(protocol_version: str | None, capabilities: types.ClientCapabilities | None) -> bool:
    """Whether this request's client answers an ask through the protocol: it speaks the
    input-required round trip and declares form elicitation (or elicitation with no mode,
    which means form)."""
    if protocol_version not in MODERN_PROTOCOL_VERSIONS or capabilities is None:
        return False
    elicitation = capabilities.elicitation
    return elicitation is not None and (elicitation.form is not None or elicitation.url is None)


def question(agent: str, call_id: str, ask: Mapping[str, Any]) -> types.InputRequiredResult:
    """The input-required answer for a call whose policy asked (``ask``: the approval
    queue's pending entry, with its ``id``, ``tool_name`` and ``reason``)."""
    reason = f": {ask['reason']}" if ask.get("reason") else ""
    message = f'Agent "{agent}" asks to run tool "{ask["tool_name"]}"{reason}. Allow this call once?'
    schema = {"type": "object", "required": [ALLOW_FIELD], "properties": {
        ALLOW_FIELD: {"type": "boolean", "title": "Allow this call once", "default": False}}}
    request = types.ElicitRequest(params=types.ElicitRequestFormParams(message=message, requested_schema=schema))
    state = json.dumps({"agent": agent, "call_id": call_id, "ask": ask["id"]})
    return types.InputRequiredResult(input_requests={APPROVAL: request}, request_state=state)


def state_of(text: str, agent: str) -> dict[str, str]:
    """The state a retry carries back (unsealed: the gateway minted it), checked against the
    endpoint's agent. ``ValueError`` when it is not one of the gateway's asks of that agent."""
    try:
        state = json.loads(text)
    except ValueError:
        raise ValueError("the request state is not one an ask of this gateway made") from None
    if not isinstance(state, dict) or not all(isinstance(state.get(k), str) for k in ("agent", "call_id", "ask")):
        raise ValueError("the request state is not one an ask of this gateway made")
    if state["agent"] != agent:
        raise ValueError(f'the request state belongs to agent "{state["agent"]}", not "{agent}"')
    return state


def answer_of(responses: Mapping[str, Any] | None) -> str:
    """The queue's outcome for the client's answer: ``allowed-once`` only for an accepted
    form whose ``allow`` is true; a decline, a dismissal or no answer rejects."""
    response = (responses or {}).get(APPROVAL)
    if isinstance(response, Mapping):
        action, content = response.get("action"), response.get("content")
    else:
        action, content = getattr(response, "action", None), getattr(response, "content", None)
    if action == "accept" and isinstance(content, Mapping) and content.get(ALLOW_FIELD) is True:
        return "allowed-once"
    return "rejected"
