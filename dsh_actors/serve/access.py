"""Who may call which agent's endpoint: bearer tokens bound to agent ids (no Ray here).

A tokens file is a JSON object mapping each token to the agents it may use (a list of agent
ids, or ``"*"`` for every agent)::

    {"3f9c…": ["alice", "bob"], "77aa…": "*"}

The gateway keeps only each token's SHA-256, and :class:`TokenGate` (ASGI middleware in
front of the MCP app) refuses a request for ``/agents/<agent>/mcp`` without a known token
(401) or whose token is not bound to ``<agent>`` (403), before the MCP server sees it.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Awaitable, Callable, Mapping

__all__ = ["ANY_AGENT", "Grants", "TokenGate", "agent_of", "bearer_of", "digest", "load_tokens"]

ANY_AGENT = "*"

Grants = Mapping[str, "frozenset[str]"]
"""A token's SHA-256 (hex) -> the agents it may use (``{"*"}``: any)."""

_AGENT_IN_PATH = re.compile(r"/agents/([^/]+)/mcp/?$")
_AGENT_ID = re.compile(r"^[A-Za-z0-9._:@-]{1,200}$")
"""An agent id an endpoint may name (another is refused as invalid params)."""


_NAMED = "dsh.agent"
"""Where :func:`agent_of` keeps its finding in a request's ASGI scope."""


def agent_of(scope: dict[str, Any]) -> str | None:
    """The agent an HTTP request's path names (``/agents/<agent>/mcp``), if it names a valid
    one, else ``None``; found once per request (each layer of the gateway asks)."""
    if _NAMED not in scope:
        found = _AGENT_IN_PATH.search(scope.get("path", "")) if scope["type"] == "http" else None
        scope[_NAMED] = found.group(1) if found is not None and _AGENT_ID.match(found.group(1)) else None
    return scope[_NAMED]  # type: ignore[no-any-return]


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def load_tokens(path: str) -> dict[str, frozenset[str]]:
    """A tokens file as grants. ``ValueError`` saying what is wrong with it."""
    try:
        with open(path) as handle:
            data = json.load(handle)
    except OSError as exc:
        raise ValueError(f"cannot read the tokens file {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ValueError(f"the tokens file {path} is not JSON: {exc}") from None
    if not isinstance(data, dict) or not data:
        raise ValueError(f'the tokens file {path} must be a JSON object {{"<token>": ["<agent>", ...] or "*"}}')
    grants = {}
    for token, agents in data.items():
        if len(token) < 16:
            raise ValueError(f"a token in {path} is shorter than 16 characters: use long random tokens "
                             '(python -c "import secrets; print(secrets.token_urlsafe(32))")')
        if agents == ANY_AGENT:
            agents = [ANY_AGENT]
        if not isinstance(agents, list) or not agents or not all(isinstance(a, str) and a for a in agents):
            raise ValueError(f'each token in {path} maps to a list of agent ids or "*"; one maps to {agents!r}')
        grants[digest(token)] = frozenset(agents)
    return grants


def bearer_of(headers: Mapping[str, str] | Any) -> str | None:
    """The bearer token of an ``Authorization`` header, or ``None``."""
    value = headers.get("authorization") if headers is not None else None
    if not isinstance(value, str):
        return None
    scheme, _, token = value.partition(" ")
    return (token.strip() or None) if scheme.lower() == "bearer" else None


class TokenGate:
    """ASGI middleware: requests for an agent's endpoint need a token bound to that agent."""

    def __init__(self, app: Callable[..., Awaitable[None]], grants: Grants) -> None:
        self.app, self.grants = app, grants

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        agent = agent_of(scope)  # (an invalid one: the MCP app refuses the request)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        token = bearer_of(headers)
        agents = self.grants.get(digest(token)) if token is not None else None
        if agents is None:
            return await _refuse(send, 401, "a bearer token from the gateway's tokens file is needed")
        if agent is not None and ANY_AGENT not in agents and agent not in agents:
            return await _refuse(send, 403, f'this token may not use agent "{agent}"')
        return await self.app(scope, receive, send)


async def _refuse(send: Any, status: int, message: str) -> None:
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="dsh-actors"'))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
