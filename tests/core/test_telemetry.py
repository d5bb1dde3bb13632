"""Spans of the pipeline in one process (the OpenTelemetry SDK with a collecting processor):
one execute_tool span per call following the GenAI conventions, a child per stage that had
work, the decision and the error type as attributes; and a carrier that rebuilds the parent
on the other side."""

import asyncio

import pytest

from dsh_actors import block, deny
from dsh_actors.core import telemetry

from ..spans import collected
from .helpers import call, echo, registry_with

T = 30


def by_name(spans):
    return {s.name: s for s in spans}


@pytest.mark.timeout(T)
def test_each_call_is_one_execute_tool_span_with_its_stages_as_children():
    registry = registry_with(echo(), echo("secret"), echo("shout"))

    async def pre(execution, call_next):
        return deny("no secrets") if execution.name == "secret" else await call_next()

    async def post(execution, result, call_next):
        return block("too loud") if execution.name == "shout" else await call_next()

    registry.on("tools/pre-execute", pre)
    registry.on("tools/post-execute", post)
    registry.guard(lambda execution: None)

    async def go():
        return [await registry.execute(call(f"c{i}", name)) for i, name in enumerate(["echo", "secret", "shout",
                                                                                       "nope"])]

    with collected() as spans:
        results = asyncio.run(go())
    assert [r.is_error for r in results] == [False, True, True, True]
    tools = [s for s in spans if s.name.startswith("execute_tool ")]
    assert [s.name for s in tools] == ["execute_tool echo", "execute_tool secret", "execute_tool shout",
                                       "execute_tool nope"]
    ok, secret, shout, missing = tools
    assert ok.attributes["gen_ai.operation.name"] == "execute_tool" and ok.attributes["gen_ai.tool.name"] == "echo"
    assert ok.attributes["gen_ai.tool.call.id"] == "c0" and ok.attributes["gen_ai.tool.type"] == "function"
    assert "error.type" not in ok.attributes and "gen_ai.tool.call.arguments" not in ok.attributes  # opt-in only
    children = [s.name for s in spans if s.parent is not None and s.parent.span_id == ok.context.span_id]
    assert children == ["pre_execute", "guards", "dispatch", "post_execute"]
    assert all(s.context.trace_id == ok.context.trace_id for s in spans if s.parent is not None
               and s.parent.span_id == ok.context.span_id)
    assert secret.attributes["dsh.decision"] == "deny (pre_execute)" and secret.attributes["error.type"] == "denied"
    assert shout.attributes["dsh.decision"] == "block (post_execute)"
    assert missing.attributes["error.type"] == "UNKNOWN_TOOL"
    assert {s.context.trace_id for s in tools}.__len__() == 4  # four calls made outside any span: four traces


@pytest.mark.timeout(T)
def test_an_ask_waits_in_its_own_approval_span_and_content_is_opt_in(monkeypatch):
    from dsh_actors import ask

    registry = registry_with(echo())
    registry.on("tools/pre-execute", lambda execution, call_next: ask("check first"))

    class Seam:
        async def request(self, request):
            await asyncio.sleep(0.05)
            return "allowed-once"

    registry.set_approval(Seam())
    monkeypatch.setenv("DSH_TRACE_CONTENT", "1")
    with collected() as spans:
        result = asyncio.run(registry.execute(call(agent="agent-1")))
    assert not result.is_error, result
    spans = by_name(spans)
    assert spans["approval"].end_time - spans["approval"].start_time >= 40_000_000
    tool = spans["execute_tool echo"]
    assert tool.attributes["dsh.decision"] == "allow (approval)"
    assert tool.attributes["gen_ai.tool.call.arguments"] == '{"text": "hi"}' and "hi" in tool.attributes[
        "gen_ai.tool.call.result"]


@pytest.mark.timeout(T)
def test_a_carrier_makes_the_far_side_a_child_and_nothing_is_made_when_not_asked():
    with collected() as spans:
        with telemetry.TRACER.start_as_current_span("caller") as caller:
            sent = telemetry.carrier()
        with telemetry.span_from(sent, "far side"):
            pass
    far = by_name(spans)["far side"]
    assert sent and "traceparent" in sent
    assert far.parent.span_id == caller.get_span_context().span_id
    assert far.context.trace_id == caller.get_span_context().trace_id
    assert telemetry.carrier() is None  # no current span: nothing to send


@pytest.mark.timeout(T)
def test_a_run_hosted_away_from_its_run_code_span_still_parents_its_sub_calls():
    with collected() as spans:
        with telemetry.TRACER.start_as_current_span("execute_tool run_code") as run:
            sent = telemetry.carrier()  # what travels with the run to the queue hosting it
        run_token = object()
        with telemetry.open_elsewhere(run_token, sent):
            handed = telemetry.carrier(run_token)  # what a sub-call made there sends
        with telemetry.span_from(handed, "execute_tool echo"):
            pass
    sub = by_name(spans)["execute_tool echo"]
    assert sub.parent.span_id == run.get_span_context().span_id
    assert sub.context.trace_id == run.get_span_context().trace_id
    assert telemetry.carrier(run_token) is None  # the run ended: nothing of it is left
