"""Traces of the pipeline (OpenTelemetry's GenAI conventions), at no cost when nobody listens.

Every call is one ``execute_tool {name}`` span (``gen_ai.operation.name``,
``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.type``, ``error.type`` when
it failed, ``dsh.decision`` when a policy decided), with a child span per stage that has
work to do: ``pre_execute``, ``approval`` (an ask's wait), ``guards``, ``dispatch`` (the
``tools/execute`` chain and the body) and ``post_execute``. Arguments and results are
attributes only when ``DSH_TRACE_CONTENT=1`` (the conventions make them opt-in).

Nothing here costs more than a check of the global tracer provider until one is
configured (by the caller, or in each of the runtime's processes from its environment:
:mod:`.trace_export`, which also says where the spans go).
The trace context crosses processes as a W3C ``traceparent`` carrier (:func:`carrier`),
which the runtime puts in each call's envelope: its parent is the caller's current span,
or, for a Code Mode sub-call, its ``run_code`` call's span (:func:`carrier` with the
parent's token; :func:`open_elsewhere` where a queue actor hosts the run).

Pure: only ``opentelemetry-api``; the runtime adds metrics through :func:`on_denial`.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from typing import Any, Awaitable, Callable, Iterator

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

__all__ = ["TRACER", "agent_span", "carrier", "chat_span", "decided", "on_denial", "open_elsewhere", "record_chat",
           "record_result", "span_from", "staged", "tool_span", "tracing"]

TRACER = trace.get_tracer("dsh_actors")
_UNSET = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
_OFF = contextlib.nullcontext()
_MISSING = object()
_open: dict[Any, Span] = {}  # execute_tool spans open in this process, by their execution's token
_denial_sinks: list[Callable[[str, str, str], None]] = []
_CONTENT_LIMIT = 4096


def tracing() -> bool:
    """Whether a tracer provider is configured in this process.

    Read from the API's global directly: ``get_tracer_provider()`` looks up an environment
    variable on every call (≈0.7 µs), and this runs several times per call."""
    provider = getattr(trace, "_TRACER_PROVIDER", _MISSING)
    if provider is _MISSING:  # an API without that global: the public (slower) way
        return not isinstance(trace.get_tracer_provider(), _UNSET)
    return provider is not None and not isinstance(provider, _UNSET)


async def staged(name: str, work: Awaitable[Any]) -> Any:
    """Await ``work`` inside the stage's child span (the pipeline calls this only when
    tracing, so an untraced call awaits its stages with nothing in between)."""
    with TRACER.start_as_current_span(name):
        return await work


def _content(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= _CONTENT_LIMIT else text[:_CONTENT_LIMIT] + f"… ({len(text)} characters)"


@contextlib.contextmanager
def tool_span(execution: Any, parent: Mapping[str, str] | None = None) -> Iterator[Span | None]:
    """The call's ``execute_tool`` span, a child of ``parent`` (a carrier) or of the
    current span; ``None`` when not tracing. :func:`record_result` on it at the end."""
    if not tracing():
        yield None
        return
    context = propagate.extract(parent) if parent else None
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": str(execution.name),
                  "gen_ai.tool.call.id": str(execution.call_id), "gen_ai.tool.type": "function"}
    if execution.agent is not None:
        attributes["dsh.agent"] = str(execution.agent)
    if os.environ.get("DSH_TRACE_CONTENT") == "1":
        attributes["gen_ai.tool.call.arguments"] = _content(execution.arguments)
    with TRACER.start_as_current_span(f"execute_tool {execution.name}", context=context, kind=SpanKind.INTERNAL,
                                      attributes=attributes) as span:
        token = execution.token
        _open[token] = span
        try:
            yield span
        finally:
            _open.pop(token, None)


@contextlib.contextmanager
def open_elsewhere(token: Any, parent: Mapping[str, str] | None) -> Iterator[None]:
    """While a call whose span is open in another process has its sub-calls made in this one
    (a ``run_code`` hosted by a Code Mode queue): :func:`carrier` of its ``token`` is that
    span (``parent``: its carrier), so the sub-calls are its children here too."""
    if not tracing() or not parent:
        yield
        return
    _open[token] = trace.get_current_span(propagate.extract(parent))
    try:
        yield
    finally:
        _open.pop(token, None)


def record_result(span: Span | None, result: Mapping[str, Any]) -> None:
    """Mark the call's span with how it ended (``error.type``: its code, or ``denied``)."""
    if span is None:
        return
    if result.get("is_error"):
        error = result.get("error")
        code = error.get("code") if isinstance(error, Mapping) else None
        span.set_attribute("error.type", str(code or "denied"))
        span.set_status(Status(StatusCode.ERROR, str(code or "denied by a policy")))
    if os.environ.get("DSH_TRACE_CONTENT") == "1":
        span.set_attribute("gen_ai.tool.call.result", _content(result.get("content")))


def decided(execution: Any, where: str, kind: str) -> None:
    """A policy decided at ``where`` (``pre_execute``, ``approval``, ``guards``,
    ``post_execute``): ``deny`` / ``block`` are counted by the sinks; the call's span notes it."""
    if tracing():
        span = _open.get(execution.token)
        if span is not None:
            span.set_attribute("dsh.decision", f"{kind} ({where})")
    for sink in _denial_sinks:
        sink(where, kind, str(execution.name))


def on_denial(sink: Callable[[str, str, str], None]) -> None:
    """Hear every denial and block as ``sink(stage, kind, tool)`` (the runtime's metrics)."""
    if sink not in _denial_sinks:
        _denial_sinks.append(sink)


def carrier(parent_token: Any = None) -> dict[str, str] | None:
    """The trace context to send with a call: its parent call's span when that call is
    open here (a Code Mode sub-call's ``run_code``), else the current span; ``None`` when
    not tracing or there is no span."""
    if not tracing():
        return None
    span = _open.get(parent_token) if parent_token is not None else None
    span = span if span is not None else trace.get_current_span()
    if not span.get_span_context().is_valid:
        return None
    out: dict[str, str] = {}
    propagate.inject(out, context=trace.set_span_in_context(span))
    return out


def span_from(parent: Mapping[str, str] | None, name: str, **attributes: Any) -> Any:
    """A context manager: a span named ``name`` under the carrier ``parent`` (a body's task,
    in another process), or nothing when not tracing."""
    if not tracing():
        return _OFF
    return TRACER.start_as_current_span(name, context=propagate.extract(parent) if parent else None,
                                        attributes=attributes)


def agent_span(agent: str, model: str | None = None) -> Any:
    """A context manager: one agent's run, ``invoke_agent {agent}`` (its model turns and
    tool calls are its children); nothing when not tracing."""
    if not tracing():
        return _OFF
    attributes = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": agent, "gen_ai.agent.id": agent}
    if model:
        attributes["gen_ai.request.model"] = model
    return TRACER.start_as_current_span(f"invoke_agent {agent}", kind=SpanKind.INTERNAL, attributes=attributes)


def chat_span(model: str, base_url: str | None) -> Any:
    """A context manager: one model request, ``chat {model}`` (a client span); nothing
    when not tracing. :func:`record_chat` adds what came back."""
    if not tracing():
        return _OFF
    attributes: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
                                  "gen_ai.request.model": model}
    if base_url:
        from urllib.parse import urlsplit

        parts = urlsplit(base_url)
        if parts.hostname:
            attributes["server.address"] = parts.hostname
        if parts.port:
            attributes["server.port"] = parts.port
    return TRACER.start_as_current_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes)


def record_chat(span: Any, *, prompt_tokens: int = 0, completion_tokens: int = 0, finish_reason: str | None = None,
                response_model: str | None = None, error: str | None = None) -> None:
    """Mark a ``chat`` span (from :func:`chat_span`; nothing for the no-op one) with its usage or failure."""
    if not isinstance(span, Span) or not span.is_recording():
        return
    span.set_attribute("gen_ai.usage.input_tokens", prompt_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", completion_tokens)
    if finish_reason:
        span.set_attribute("gen_ai.response.finish_reasons", [finish_reason])
    if response_model:
        span.set_attribute("gen_ai.response.model", response_model)
    if error:
        span.set_attribute("error.type", error)
        span.set_status(Status(StatusCode.ERROR, error))
