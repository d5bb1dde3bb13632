"""One registry's agents as MCP servers over Streamable HTTP: ``/agents/<agent>/mcp``.

:func:`gateway_app` is the ASGI application (what each Ray Serve replica runs, see
:mod:`.deployment`): the official SDK's low-level server, stateless (every request stands
alone, so any replica answers any request and no sticky routing is needed), with JSON
responses. ``tools/list`` is the agent's visible set as the registry resolves it (its
shadows, restrictions and mode); ``tools/call`` runs the registry's whole pipeline as that
agent — its policies, guards, approvals, deadlines and session log — wherever the registry's
executors run the tool.

An ask goes to the client when it can answer one through the protocol (:mod:`.asks`): the
call keeps running in the replica that took it, held in the registry's approval queue
(:mod:`~dsh_actors.runtime.registry.held`), and the client's retry — on any replica —
answers the ask there and collects the result, hearing the progress its body reports
meanwhile when the retry asks for progress. Otherwise it waits in the approval queue
(answered from any process: ``dsh-actors approvals``), or is denied where the registry has
none. With a tokens file (:mod:`.access`) each request needs a bearer token bound to its
agent; the ``Host`` header is checked (DNS-rebinding protection) against the names the
gateway is reached by.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import os
import uuid
from typing import Any, AsyncIterator, Mapping

import mcp_types as types

from ..core.registry import RUN_CODE
from ..core.progress import Reports
from ..core.within import within
from ..runtime.registry.asking import AskingCalls, Handover
from . import asks
from .access import _AGENT_ID, Grants, TokenGate, agent_of, bearer_of, digest
from .front import STREAMS, GatewayFront
from ..core.definitions import object_schema
from .mcp_mapping import listed, mcp_result, unlisted

__all__ = ["AGENT_PATH", "GatewayConfig", "gateway_app"]

AGENT_PATH = "/agents/{agent}/mcp"
"""Where an agent's MCP endpoint is, under the application's route prefix."""


_TOOLS: contextvars.ContextVar[Mapping[str, Any] | None] = contextvars.ContextVar("dsh_gateway_tools", default=None)
"""The requesting agent's tools by name (its current plan's), for the SDK's synchronous
lookup of a tool's input schema (see :class:`_AgentTools`)."""


LOOPBACK_HOSTS = ["127.0.0.1:*", "localhost:*", "[::1]:*"]
"""The ``Host`` headers a gateway accepts unless told others: its loopback names."""


class GatewayConfig:
    """Which registry a gateway serves, who may call it, and how it is reached."""

    def __init__(self, registry: str, *, namespace: str | None = None, logs: str | None = None,
                 allowed_hosts: list[str] | None = None, tokens: Grants | None = None,
                 ask_ttl_s: float = 600.0, state_key: bytes | None = None, calls_here: bool = True) -> None:
        """``registry``: the name of a running registry (the gateway joins it as it is; it
        never makes one). ``logs``: a folder where each agent's session log is
        (``<logs>/<agent>.log`` on the node of the replica that took the call: a folder
        every node mounts keeps one log per agent), recording every call as the batch job
        does (one ``tool/result`` per call); ``None``: no log. ``allowed_hosts``: the
        ``Host`` headers accepted (DNS-rebinding protection; ``host:*`` for any port);
        by default the loopback names only, so a gateway reached by other names must list
        them. ``tokens``: grants from :func:`~.access.load_tokens` (``None``: no token
        needed). ``ask_ttl_s``: how long a client has to answer an ask put to it. ``state_key``:
        the secret sealing those asks' request state (at least 32 bytes; by default made
        now, and shared by every replica of the application made from this config).
        ``calls_here``: run each call's pipeline in the replica that took it (an executor of
        the registry's inside the replica: no hop to an executor actor per call; a body that
        declares Ray options still runs as a Ray task where its resources are); ``False``:
        on the registry's executor actors, as any other caller's calls. Either way the
        registry's ``abort_agents`` cancels an agent's running calls."""
        from ..runtime.wire import DEFAULT_NAMESPACE

        if state_key is not None and len(state_key) < 32:
            raise ValueError("state_key must be at least 32 bytes of secret randomness")
        self.registry, self.namespace = registry, namespace or DEFAULT_NAMESPACE
        self.logs = logs
        self.allowed_hosts = list(allowed_hosts) if allowed_hosts is not None else list(LOOPBACK_HOSTS)
        self.tokens = dict(tokens) if tokens is not None else None
        self.ask_ttl_s = float(ask_ttl_s)
        self.state_key = state_key or os.urandom(32)
        self.calls_here = bool(calls_here)


def gateway_app(config: GatewayConfig) -> Any:
    """The ASGI application serving ``config``'s registry (the SDK's Starlette app, with its
    lifespan, behind the gateway's own ASGI layers)."""
    from mcp.server.lowlevel import Server
    from mcp.server.request_state import RequestStateBoundary, RequestStateSecurity
    from mcp.server.transport_security import TransportSecuritySettings

    calls = _Calls(config)

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        agent = _agent(ctx)
        mode = await calls.mode()
        visible = await calls.registry.visible(agent)
        sdk = await calls.registry.sdk(agent) if mode != "native" else None
        return types.ListToolsResult(tools=listed(visible, mode, sdk))

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult | types.InputRequiredResult:
        agent, capabilities = _agent(ctx), ctx.session.client_capabilities
        if not _streams_progress(ctx):
            return await calls.answer(agent, params, ctx.protocol_version, capabilities)
        async with _reporting_to(ctx.session) as sink:
            return await calls.answer(agent, params, ctx.protocol_version, capabilities, sink)

    def input_schema(name: str) -> Mapping[str, Any] | None:
        tools = _TOOLS.get()
        definition = tools.get(name) if tools is not None else None
        return _header_schema(definition) if definition is not None else None

    # The SDK checks a call's Mcp-Param-* headers against its tool's input schema; by default
    # it lists the agent's tools on every call to find it. This reads it from the agent's
    # plan, which _AgentTools made current for the request.
    server: Server[Any] = Server("dsh-actors", version=_version(), on_list_tools=list_tools, on_call_tool=call_tool,
                                 get_tool_input_schema=input_schema,
                                 instructions="Tools of one dsh-actors agent: every call runs through its policies.")
    # The SDK opens an OpenTelemetry span per request; each call already has its span from the
    # pipeline (with the agent, tool and outcome), so the request's is dropped: it cost about
    # as much as the call's whole pipeline. (By name: the class is in a private module.)
    server.middleware[:] = [m for m in server.middleware if type(m).__name__ != "OpenTelemetryMiddleware"]
    # The asks' request state, sealed under the config's key (every replica has it) and bound
    # to the caller's token, so one client cannot answer another's ask.
    security = RequestStateSecurity(keys=[config.state_key], ttl=config.ask_ttl_s, bind_principal=_principal)
    server.middleware.append(RequestStateBoundary(security, default_audience=f"dsh-actors/{config.registry}"))
    transport = TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=config.allowed_hosts,
                                          allowed_origins=[f"http://{h}" for h in config.allowed_hosts]
                                          + [f"https://{h}" for h in config.allowed_hosts])
    # Two faces of the SDK's app: JSON replies, and event streams for a request the front
    # leaves to the SDK that asks for progress (a client that answers asks, an older
    # revision's). One lifespan runs both session managers.
    app: Any = server.streamable_http_app(streamable_http_path=AGENT_PATH, stateless_http=True, json_response=True,
                                          transport_security=transport, host="0.0.0.0")
    replies = server.session_manager
    streams: Any = server.streamable_http_app(streamable_http_path=AGENT_PATH, stateless_http=True,
                                              json_response=False, transport_security=transport, host="0.0.0.0")
    app.router.lifespan_context = lambda _app: _running(replies, server.session_manager)

    async def answer(agent: str, params: types.CallToolRequestParams, version: str,
                     progress: Any = None) -> types.CallToolResult:
        return await calls.answer(agent, params, version, None, progress)  # type: ignore[return-value]  # no asks

    # Outermost first: the token, the agent's tools for the request, the front (see .front).
    app = GatewayFront(app, answer=answer, input_schema=input_schema, security=transport,
                       server_info=server.server_info_stamp, streaming=streams)
    app = _AgentTools(app, calls)
    return TokenGate(app, grants=config.tokens) if config.tokens is not None else app


class _AgentTools:
    """ASGI middleware: the requesting agent's tools (its current plan's, fetched once per
    plan in this process) in :data:`_TOOLS` for the request, before the SDK handles it."""

    def __init__(self, app: Any, calls: "_Calls") -> None:
        self.app, self.calls = app, calls

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        agent = agent_of(scope)
        if agent is not None:
            _TOOLS.set(await self.calls.tools(agent))
        await self.app(scope, receive, send)


_TELL_S = 10.0
"""How long a replica's first call waits for the registry to hear of the replica (a registry
that answers nothing that long: the call goes on, and an abort may miss it)."""


class _Calls:
    """A replica's way to the registry: calls as an agent (logged or not), and calls whose
    ask is put to the client (held in the approval queue until the client's retry)."""

    def __init__(self, config: GatewayConfig) -> None:
        from ..runtime.client import ToolRegistry

        self.config = config
        self.registry = ToolRegistry(config.registry, config.namespace)  # joins the running one when first asked
        self.logs: dict[str, Any] = {}  # agent -> its session log, opened at its first call here
        self.asking = AskingCalls(config.registry, config.namespace, ttl_s=config.ask_ttl_s)
        self._mode: str | None = None
        self._core: Any = None  # the executor running calls in this replica (calls_here)
        self._telling: Any = None  # the registry being told of it (its future)
        self._told_to = -1  # the incarnation of the registry's actor that has heard of it

    async def tools(self, agent: str) -> Mapping[str, Any] | None:
        """``agent``'s tools by name as of now (``None`` when they cannot be had: the
        request's own handling then says why): ``registry.tools(agent)``, read from this
        process's plan cache directly — on every request, where a response's task would
        cost about 20 µs (4 % of a call)."""
        from ..runtime.caller.owner import owner

        try:
            plan = await owner(self.config.registry, self.config.namespace).plans.current_plan(agent)
            return plan.tools if plan is not None else await self.registry.tools(agent)  # (its plan lost: asked)
        except Exception:  # noqa: BLE001 - a registry gone: the request's own handling says so
            return None

    async def _serve_calls_here(self) -> None:
        """Make this process an executor of the registry's for calls made on this event
        loop (the replica's): they then run here, not on an executor actor. Returns once
        the registry has heard of it (again, when it is a new registry actor), so its
        ``abort_agents`` reaches every call that runs here."""
        from ..runtime.caller.owner import owner

        link = owner(self.config.registry, self.config.namespace).link
        if self._told_to == link.incarnation:
            return  # (every call but the first: one comparison)
        if self._core is None:
            from ..runtime.executor.executor import ExecutorCore

            self._core = ExecutorCore(self.config.registry, self.config.namespace)
            self._telling = self._core.serve_as_guest()
        elif self._telling is not None and self._telling.done():
            self._telling = self._core.tell_registry()  # a new registry actor, which knows no guests
        if self._telling is not None:  # (a failure is logged; the call says why it fails itself)
            await asyncio.wait({self._telling}, timeout=_TELL_S)
        self._told_to = link.incarnation

    async def answer(self, agent: str, params: types.CallToolRequestParams, version: str | None,
                     capabilities: types.ClientCapabilities | None,
                     progress: Any = None) -> types.CallToolResult | types.InputRequiredResult:
        """A ``tools/call`` as ``agent``: the retry that answers an ask, or a call, put to the
        client as a question should its policy ask and the client answer asks (it speaks
        ``version`` of the protocol and declares ``capabilities``). ``progress``: where its
        body's progress goes (a :data:`~dsh_actors.core.progress.ProgressSink`)."""
        if params.request_state is not None:
            return await self.resume(agent, params.request_state, params.input_responses, progress)
        if params.name != RUN_CODE and await self.mode() == "code":
            return unlisted(params.name)  # behind run_code: a program calls it, as the model would
        call = {"call_id": f"mcp-{uuid.uuid4().hex[:16]}", "name": params.name, "arguments": params.arguments or {}}
        if not asks.client_answers(version, capabilities):
            return mcp_result(await self.run(agent, call, progress))
        return await self.run_or_ask(agent, call, progress)

    async def mode(self) -> str:
        """The registry's mode (asked once, off the loop: the client asks it blocking)."""
        if self._mode is None:
            self._mode = await asyncio.to_thread(lambda: self.registry.mode)
        return self._mode

    async def run(self, agent: str, call: dict[str, Any], progress: Any = None) -> Any:
        """The call as ``agent``, with a signal of its own: should the client go away (its
        request dropped, which is how MCP clients cancel a call), the call is cancelled and
        its signal aborted — a body sees it wherever it runs, even a plain one in a thread.
        ``progress`` hears its body's progress, when the body runs here (``calls_here``)."""
        from ..core.progress import progress_to
        from ..core.signal import AbortController

        if self.config.calls_here:
            await self._serve_calls_here()
        controller = AbortController()
        try:
            if progress is None:
                result = await self._execute(agent, {**call, "signal": controller.signal})
            else:
                with progress_to(progress):
                    result = await self._execute(agent, {**call, "signal": controller.signal})
        except asyncio.CancelledError:
            controller.abort("the MCP client cancelled the call (its request was dropped)")
            raise
        if (result.get("error") or {}).get("code") == "CANCELLED":
            # cancelled where it ran (the registry aborted its agent's calls): a body still
            # running on a thread hears it through its signal, as on an executor
            controller.abort(result.text or "the call was cancelled")
        return result

    async def _execute(self, agent: str, call: dict[str, Any]) -> Any:
        if self.config.logs is None:
            return await self.registry.execute(call, agent=agent)
        from ..runtime.step import agent_step

        [result] = await agent_step(self.registry.scope(agent), await self._session(agent), [call])  # logged
        return result

    async def _session(self, agent: str) -> Any:
        from ..runtime.session.client import SessionLog

        if agent not in self.logs:
            os.makedirs(self.config.logs or ".", exist_ok=True)
            path = os.path.join(self.config.logs or ".", f"{agent}.log")
            self.logs[agent] = await SessionLog.open_async(self.registry.session_id(agent), path)
        return self.logs[agent]

    async def run_or_ask(self, agent: str, call: dict[str, Any],
                         progress: Any = None) -> types.CallToolResult | types.InputRequiredResult:
        """Run the call; should its policy ask, answer with the question instead and hold
        the call (it goes on waiting for its ask) until the client's retry collects it (and
        hears its progress, which is made only once the ask is answered)."""
        handover = Handover(progress) if progress is not None else None
        kind, value = await self.asking.run_or_ask(call["call_id"], self.run(agent, call, handover), handover)
        return mcp_result(value) if kind == "done" else asks.question(agent, call["call_id"], value)

    async def resume(self, agent: str, state_text: str, responses: Mapping[str, Any] | None,
                     progress: Any = None) -> types.CallToolResult:
        """The client's retry with its answer to an ask: the ask is answered, the held
        call's result collected (on whichever replica holds it), its progress meanwhile
        going to ``progress`` (when the retry asked for it)."""
        from mcp.shared.exceptions import MCPError

        from ..core.errors import error_result
        from ..core.types import ToolExecutionResult
        from ..runtime.errors import WorkerCrashedError

        try:
            state = asks.state_of(state_text, agent)
        except ValueError as exc:
            raise MCPError(types.INVALID_PARAMS, str(exc)) from None
        # "died" when the replica holding the call died: its ask is then cancelled, so the call
        # never runs with nobody to see it
        status, held = await self.asking.answer(state["call_id"], state["ask"], asks.answer_of(responses), progress)
        if status == "gone":
            raise MCPError(types.INTERNAL_ERROR, "the registry's approval queue is gone, and the call waiting for "
                                                 "this answer with it; call the tool again")
        if status == "unknown":
            raise MCPError(types.INVALID_PARAMS, "no call waits for this answer (it was answered already, or "
                                                 "dropped); call the tool again")
        if status == "late":
            raise MCPError(types.INTERNAL_ERROR, f"the call did not end within {self.config.ask_ttl_s:g} s of its "
                                                 "answer; its result is lost to this request")
        if status == "died":
            held = {**error_result(WorkerCrashedError(
                "the gateway replica holding the call died before it ended; call the tool again")),
                "call_id": state["call_id"]}
        return mcp_result(ToolExecutionResult(held))


@contextlib.asynccontextmanager
async def _running(*managers: Any) -> AsyncIterator[None]:
    """Run the SDK's session managers for as long as the app lives."""
    async with contextlib.AsyncExitStack() as stack:
        for manager in managers:
            await stack.enter_async_context(manager.run())
        yield


def _streams_progress(ctx: Any) -> bool:
    """Whether this request asked for progress and came to the SDK's event-stream face
    (see :class:`~.front.GatewayFront`): only then can a report reach its client."""
    request = getattr(ctx, "request", None)
    meta = (ctx.params or {}).get("_meta") if isinstance(ctx.params, Mapping) else None
    return (request is not None and bool(request.scope.get(STREAMS)) and isinstance(meta, Mapping)
            and meta.get("progressToken") is not None)


@contextlib.asynccontextmanager
async def _reporting_to(session: Any) -> AsyncIterator[Any]:
    """A progress sink (callable from any thread) whose reports go, in order, to the SDK's
    ``session`` as ``notifications/progress`` of the request it serves."""
    reports, ended = Reports(), asyncio.get_running_loop().create_future()

    async def pump() -> None:
        async for report in reports.during(ended):
            if report is not None:  # (always: no idle_s)
                await session.report_progress(*report)

    pumping = asyncio.ensure_future(pump())
    try:
        yield reports.sink
    finally:
        reports.close()  # the request's stream ends (a call held for an ask reports to the queue by now)
        ended.set_result(None)  # the pump sends what came before, then stops
        try:
            await within(pumping, PUMP_DRAIN_S)  # (cancelled when it takes longer)
        except Exception:  # noqa: BLE001 - a client too slow to read, or gone: its result goes on
            pumping.cancel()


PUMP_DRAIN_S = 10.0
"""How long a call's last reports may take to reach its client before its result is sent."""


_HEADER_SCHEMAS: dict[int, tuple[Any, Mapping[str, Any] | None]] = {}


def _header_schema(definition: Any) -> Mapping[str, Any] | None:
    """``definition``'s input schema when it names a header (``x-mcp-header``) an
    ``Mcp-Param-*`` header must match, else ``None`` (no header to check: the check is
    skipped); kept per definition, which is frozen."""
    held = _HEADER_SCHEMAS.get(id(definition))
    if held is None or held[0] is not definition:
        schema = object_schema(definition)
        held = (definition, schema if "x-mcp-header" in json.dumps(schema) else None)
        if len(_HEADER_SCHEMAS) >= 4096:
            _HEADER_SCHEMAS.clear()
        _HEADER_SCHEMAS[id(definition)] = held
    return held[1]


def _principal(ctx: Any) -> str | None:
    """Whose asks' state this is: the caller's bearer token (its digest), if it sent one."""
    request = getattr(ctx, "request", None)
    token = bearer_of(request.headers) if request is not None else None
    return digest(token) if token is not None else None


def _agent(ctx: Any) -> str:
    """The agent named by the request's path (``/agents/<agent>/mcp``)."""
    request = getattr(ctx, "request", None)
    agent = getattr(request, "path_params", {}).get("agent") if request is not None else None
    if not isinstance(agent, str) or not _AGENT_ID.match(agent):
        from mcp.shared.exceptions import MCPError

        raise MCPError(types.INVALID_PARAMS, f"no agent in the endpoint's path (expected {AGENT_PATH})")
    return agent


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dsh-actors")
    except PackageNotFoundError:
        return "0"
