"""The gateway's front: every POST to an agent's endpoint passes here before the SDK's server.

Two things it does that the SDK's stateless JSON mode does not:

- **A client that goes away cancels its call.** At the current protocol revision a client
  cancels by closing its request (there is no session a ``notifications/cancelled`` could
  name the request in), and the SDK answering in JSON does not watch for that. The front
  reads the request's body itself, then watches the connection while the request is
  handled: when the client disconnects, the handling is cancelled, and with it the call
  (its signal is aborted wherever it runs).
- **The common call skips the SDK's per-request machinery.** A ``tools/call`` of the
  current revision that passes every check the SDK makes (DNS rebinding, content type,
  ``Accept``, the routing headers against the body, an ``Mcp-Param-*`` header against the
  tool's schema — each with the SDK's own function), from a client that cannot answer an
  ask (so no request state is sealed or opened), is answered here: its parameters
  validated by the SDK's per-version models, the call run through the registry's pipeline,
  its result shaped by the SDK's per-version serializer and stamped with the server's
  identity, as the SDK's server does.
- **Progress.** Such a call that carries a ``progressToken`` hears its body's
  ``ctx.report_progress`` (:mod:`~dsh_actors.core.progress`) as ``notifications/progress``
  on an event stream, then its answer — the SDK's JSON mode has no way to send them.

Everything else — and every request one of those checks would refuse — goes to the SDK,
which answers it (refusals included) as it always does; a request among those that carries
a ``progressToken`` and accepts an event stream goes to the SDK's event-stream face
(``streaming``), so its reports reach it there. The SDK's per-request dispatch cost
several times the pipeline's own work per call.

The SDK pieces it reuses are some of its private ones; an SDK without them leaves every
request to the SDK (:data:`AVAILABLE`).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Awaitable, Callable, Mapping

__all__ = ["AVAILABLE", "GatewayFront"]

try:
    from mcp.server._streamable_http_modern import _SSE_HEADERS, _sse_event, _to_jsonrpc_response, _write
    from mcp.server.runner import modern_error_data
    from mcp.server.streamable_http import check_accept_headers
    from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE, TransportSecurityMiddleware
    from mcp.shared.inbound import (InboundModernRoute, classify_inbound_request, find_duplicated_routing_header,
                                    validate_mcp_param_headers)
    from mcp_types import SERVER_INFO_META_KEY, CallToolRequestParams, JSONRPCError, JSONRPCNotification
    from mcp_types import methods as _methods
    from mcp_types.version import MODERN_PROTOCOL_VERSIONS
    AVAILABLE = True
except ImportError:  # another SDK release: every request goes to the SDK
    AVAILABLE = False

from ..core.progress import Reports
from .access import agent_of

_MCP_PARAM = "mcp-param-"
_TOOLS_CALL = "tools/call"

Answer = Callable[..., Awaitable[Any]]
"""``(agent, validated call params, protocol version, progress sink or None)`` -> the call's
``CallToolResult``."""

STREAMS = "dsh.streams"
"""Set in the ASGI scope of a request the SDK answers with an event stream (it asked for
progress): its call's reports then go to the SDK's session."""
PING_S = 15.0
"""An event stream idle this long gets a comment line, so a proxy's idle timeout keeps it."""


class GatewayFront:
    """ASGI middleware in front of the SDK's app (see the module docs). ``answer`` runs a
    call as an agent; ``input_schema`` is the tool's schema for the ``Mcp-Param-*`` check
    (the one the SDK's server is given); ``server_info`` the stamp the SDK puts on a result."""

    def __init__(self, app: Any, *, answer: Answer, input_schema: Callable[[str], Any],
                 security: Any, server_info: dict[str, Any], streaming: Any = None) -> None:
        self.app, self.answer, self.input_schema = app, answer, input_schema
        self.streaming = streaming  # the SDK's app answering with event streams (None: app for all)
        self.server_info = server_info  # only ever serialized, never changed: one copy for every reply
        self.security = TransportSecurityMiddleware(security) if AVAILABLE else None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            return await self.app(scope, receive, send)
        agent = agent_of(scope)
        if agent is None:  # the SDK's app refuses an invalid agent
            return await self.app(scope, receive, send)
        body, more = await _read_body(receive, DEFAULT_MAX_REQUEST_BODY_SIZE if AVAILABLE else 4 << 20)
        if body is None:
            return  # the client left before its request was whole
        if more:  # over the SDK's limit: it refuses, reading the rest itself
            return await self.app(scope, _Replay(body, receive, more=True), send)
        sent = _Sent(send)
        await _unless_disconnected(self._handle(scope, body, agent, receive, sent), receive, sent)

    async def _handle(self, scope: dict[str, Any], body: bytes, agent: str, receive: Any, send: Any) -> None:
        request = await self._fast(scope, body) if AVAILABLE else None
        if request is None:
            app = self.streaming if self.streaming is not None and _asks_progress(scope, body) else self.app
            return await app(scope, _Replay(body, receive), send)
        request_id, params, version, token = request
        if token is not None:
            return await self._with_progress(scope, receive, send, token, request_id, agent, params, version)
        try:
            result = await self._result(agent, params, version)
        except Exception as exc:  # noqa: BLE001 - the SDK's mapping of a handler's failure to its error reply
            return await _write(JSONRPCError(jsonrpc="2.0", id=request_id, error=modern_error_data(exc)),
                                scope, _Replay(b"", receive), send)
        # What the SDK's reply model dumps to, without the model: the result is already its wire form.
        reply = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}, separators=(",", ":")).encode()
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(reply)).encode()), (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": reply})

    async def _with_progress(self, scope: dict[str, Any], receive: Any, send: Any, token: Any, request_id: Any,
                             agent: str, params: Any, version: str) -> None:
        """A call whose client asked for progress: a plain JSON answer if its body reports
        none; else an event stream (as the SDK's own: committed at the first report, a ping
        while idle), its reports as ``notifications/progress``, then the answer."""
        reports = Reports()
        call = asyncio.ensure_future(_to_jsonrpc_response(request_id, self._result(agent, params, version, reports.sink)))
        streaming = False
        try:
            async for report in reports.during(call, idle_s=PING_S):
                if not streaming:
                    await send({"type": "http.response.start", "status": 200, "headers": _SSE_HEADERS})
                    streaming = True
                event = b": ping\r\n\r\n" if report is None else _progress_event(token, *report)
                await send({"type": "http.response.body", "body": event, "more_body": True})
            reply = call.result()
        finally:
            call.cancel()  # the client left (this task cancelled): the call with it
        if not streaming:
            return await _write(reply, scope, _Replay(b"", receive), send)
        await send({"type": "http.response.body", "body": _sse_event(reply), "more_body": False})

    async def _result(self, agent: str, params: Any, version: str, progress: Any = None) -> dict[str, Any]:
        result = await self.answer(agent, params, version, progress)
        dumped = _methods.serialize_server_result(
            _TOOLS_CALL, version, result.model_dump(by_alias=True, mode="json", exclude_none=True))
        if dumped.get("resultType") is None:
            dumped["resultType"] = "complete"
        meta = dumped.get("_meta")  # the server's identity, unless the result names one (as the SDK stamps it)
        if meta is None or (isinstance(meta, dict) and meta.get(SERVER_INFO_META_KEY) is None):
            dumped["_meta"] = {**(meta or {}), SERVER_INFO_META_KEY: self.server_info}
        return dumped  # type: ignore[no-any-return]

    async def _fast(self, scope: dict[str, Any], body: bytes) -> tuple[Any, Any, str, Any] | None:
        """``(request id, params, protocol version, progress token)`` when this request is a
        call the front answers (every check the SDK makes passes), else ``None``."""
        from starlette.requests import Request

        headers = _headers(scope)
        version = headers.get("mcp-protocol-version")
        if version not in MODERN_PROTOCOL_VERSIONS:
            return None
        try:
            decoded = json.loads(body)
        except (ValueError, RecursionError):
            return None
        if not (isinstance(decoded, dict) and decoded.get("jsonrpc") == "2.0" and decoded.get("method") == _TOOLS_CALL
                and _is_id(decoded.get("id")) and isinstance(decoded.get("params"), dict)):
            return None
        meta = decoded["params"].get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        request = Request(scope)
        if await self.security.validate_request(request, is_post=True) is not None:  # type: ignore[union-attr]
            return None
        json_ok, events_ok = check_accept_headers(request)
        if not json_ok or (token is not None and not events_ok):
            return None
        if find_duplicated_routing_header(request.headers.items()) is not None:
            return None
        verdict = classify_inbound_request(decoded, headers=headers)
        if not isinstance(verdict, InboundModernRoute) or _may_answer_asks(verdict.client_capabilities):
            return None
        try:
            _methods.validate_client_request(_TOOLS_CALL, verdict.protocol_version, decoded["params"])
            params = CallToolRequestParams.model_validate(decoded["params"])
        except Exception:  # noqa: BLE001 - invalid params: the SDK answers them
            return None
        if params.request_state is not None or params.input_responses is not None:
            return None
        arguments = params.arguments or {}
        if arguments or any(name.startswith(_MCP_PARAM) for name in headers):
            schema = self.input_schema(params.name)  # None: no tool, or one that names no header
            if schema is not None and validate_mcp_param_headers(schema, arguments, request.headers) is not None:
                return None
        return decoded["id"], params, verdict.protocol_version, token


def _is_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def _may_answer_asks(capabilities: Any) -> bool:
    """Whether the client declares elicitation: its asks go the SDK's way (sealed state)."""
    return not isinstance(capabilities, Mapping) or capabilities.get("elicitation") is not None


def _headers(scope: dict[str, Any]) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}


async def _read_body(receive: Any, limit: int) -> tuple[bytes | None, bool]:
    """The request's body (``None``: the client disconnected first), and whether more is
    left unread because it passed ``limit``."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None, False
        chunk = message.get("body", b"")
        chunks.append(chunk)
        size += len(chunk)
        more = bool(message.get("more_body", False))
        if not more or size > limit:
            return b"".join(chunks), more


def _asks_progress(scope: dict[str, Any], body: bytes) -> bool:
    """Whether a request carries a progress token and accepts an event stream, the only
    way its reports can reach it (marked in its scope, :data:`STREAMS`, for the handler)."""
    if b"progressToken" not in body or not any(
            name == b"accept" and b"text/event-stream" in value for name, value in scope.get("headers", ())):
        return False
    scope[STREAMS] = True
    return True


class _Replay:
    """A ``receive`` that gives the body already read, then what the connection says next
    (an app reading past the body waits for the disconnect, as it would have)."""

    def __init__(self, body: bytes, receive: Any, *, more: bool = False) -> None:
        self.body: bytes | None = body
        self.receive, self.more = receive, more

    async def __call__(self) -> dict[str, Any]:
        if self.body is not None:
            body, self.body = self.body, None
            return {"type": "http.request", "body": body, "more_body": self.more}
        return await self.receive()  # type: ignore[no-any-return]


class _Sent:
    """A ``send`` that knows when the whole answer went out."""

    def __init__(self, send: Any) -> None:
        self.send, self.done = send, False

    async def __call__(self, message: dict[str, Any]) -> None:
        await self.send(message)
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.done = True


async def _unless_disconnected(handling: Awaitable[None], receive: Any, sent: _Sent) -> None:
    """Run ``handling`` in this task; should the client disconnect before the whole answer
    went out, cancel it (the body is read, so the next message on the connection is its
    end). One watching task, not two tasks raced: this runs on every request."""
    this = asyncio.current_task()
    assert this is not None
    left = finished = False

    def client_left(watch: "asyncio.Future[None]") -> None:
        nonlocal left
        if not finished and not watch.cancelled() and watch.exception() is None:
            left = True
            this.cancel()

    watch = asyncio.ensure_future(_disconnect(receive, sent))
    watch.add_done_callback(client_left)
    try:
        await handling
    except asyncio.CancelledError:
        if not left:
            raise
        this.uncancel()  # the cancellation was ours, and it is done with
    finally:
        finished = True  # a callback already scheduled must not cancel what this task does next
        watch.cancel()


async def _disconnect(receive: Any, sent: _Sent) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    if sent.done:  # the server's closing after its answer, not a client leaving
        await asyncio.Event().wait()


def _progress_event(token: Any, progress: float, total: float | None, message: str | None) -> bytes:
    """One report as the event stream carries it: a ``notifications/progress`` event."""
    note = {"progressToken": token, "progress": progress, "total": total, "message": message}
    return _sse_event(JSONRPCNotification(jsonrpc="2.0", method="notifications/progress",
                                          params={k: v for k, v in note.items() if v is not None}))
