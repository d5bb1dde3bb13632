import asyncio
import logging

import pytest

from dsh_actors import AbortController, ToolExecutionInput, accept, allow, ask, block, deny, text_block
from dsh_actors.core.jsonvalue import FrozenValueError
from dsh_actors.core.types import ExecutionToken
from dsh_actors.core import pipeline

from .helpers import call, echo, registry_with

CTX = lambda name: {"content": name, "source": {"kind": "plugin", "plugin": name}}  # noqa: E731


def run(registry, *calls):
    async def go():
        return [await registry.execute(c) for c in calls]
    results = asyncio.run(go())
    return results[0] if len(results) == 1 else results


def recorder(registry, log):
    """Listeners on every stage that record their order."""
    async def pre(e, call_next):
        log.append("pre:before")
        decision = await call_next()
        log.append("pre:after")
        return decision

    async def around(e, call_next):
        log.append("execute:before")
        result = await call_next()
        log.append("execute:after")
        return result

    async def post(e, result, call_next):
        log.append("post:before")
        decision = await call_next()
        log.append("post:after")
        return decision

    registry.on("tools/pre-execute", pre)
    registry.on("tools/execute", around)
    registry.on("tools/post-execute", post)
    registry.on("tools/result", lambda e, r: log.append("result"))


def traced_echo(log):
    def body(args, ctx):
        log.append("dispatch")
        return [text_block(args.get("text", ""))]
    return echo(execute=body)


def test_stages_run_in_order_each_to_completion():
    log = []
    registry = registry_with(traced_echo(log))
    recorder(registry, log)
    result = run(registry, call())
    assert log == ["pre:before", "pre:after", "execute:before", "dispatch", "execute:after",
                   "post:before", "post:after", "result"]
    assert result == {"call_id": "c1", "content": [{"type": "text", "text": "hi"}], "is_error": False}


def test_one_token_is_shared_by_every_stage_and_each_call_gets_its_own():
    tokens = []
    registry = registry_with(echo(execute=lambda a, ctx: tokens.append(ctx.token) or []))
    registry.on("tools/pre-execute", lambda e, n: tokens.append(e.token) or n())
    registry.on("tools/result", lambda e, r: tokens.append(e.token))
    run(registry, call("a"), call("b"))
    assert tokens[0] == tokens[1] == tokens[2] and tokens[3] == tokens[4] == tokens[5]
    assert tokens[0] != tokens[3] and isinstance(tokens[0], ExecutionToken)


def test_arguments_are_a_frozen_detached_snapshot_and_the_callers_object_stays_mutable():
    seen = {}
    registry = registry_with(echo())
    registry.guard(lambda e: seen.setdefault("args", e.arguments) and None)
    args = {"text": "hi", "nested": {"list": [1]}}
    run(registry, call(arguments=args))
    args["nested"]["list"].append(2)
    assert seen["args"] == {"text": "hi", "nested": {"list": [1]}}
    with pytest.raises(FrozenValueError):
        seen["args"]["nested"]["list"].append(3)


def test_identity_fields_are_read_only_and_only_the_signal_may_change():
    problems = []
    registry = registry_with(echo())

    async def wrapper(e, call_next):
        try:
            e.name = "other"
        except FrozenValueError as exc:
            problems.append(str(exc))
        original = e.signal
        e.signal = AbortController().signal
        try:
            return await call_next()
        finally:
            e.signal = original

    registry.on("tools/execute", wrapper)
    observed = []
    registry.on("tools/result", lambda e, r: observed.append(e))
    result = run(registry, call())
    assert not result.is_error and "read-only" in problems[0]
    with pytest.raises(FrozenValueError):
        observed[0].signal = None


def test_non_json_arguments_skip_every_policy_stage_but_reach_observers_once():
    log = []
    registry = registry_with(traced_echo(log))
    recorder(registry, log)
    registry.guard(lambda e: log.append("guard"))
    observed = []
    registry.on("tools/result", lambda e, r: observed.append((e.arguments, e.parent, r)))
    parent = ExecutionToken()
    result = run(registry, call(arguments={"when": {1, 2}}, parent=parent))
    assert result.text == "Error: tool execution arguments must be losslessly JSON-serializable"
    assert result.is_error and log == ["result"]
    assert observed == [(None, parent, result)]


def test_an_input_field_whose_read_raises_becomes_the_result():
    class Input:
        call_id, name, agent, parent, signal = "c", "echo", None, None, None

        @property
        def arguments(self):
            raise RuntimeError("getter exploded")

    registry = registry_with(echo())
    assert run(registry, Input()).text == "Error: getter exploded"


def test_input_fields_are_read_exactly_once_in_order():
    reads = []

    class Input:
        def __getattr__(self, key):
            reads.append(key)
            return {"call_id": "c", "name": "echo", "arguments": {}}.get(key)

    run(registry_with(echo()), Input())
    assert reads == ["call_id", "name", "agent", "parent", "signal", "arguments"]


def test_a_typed_execution_input_is_accepted():
    result = run(registry_with(echo()), ToolExecutionInput(call_id="t", name="echo", arguments={"text": "x"}))
    assert result.call_id == "t" and result.text == "x"


def test_a_deny_skips_the_body_but_still_goes_through_post_execute():
    log = []
    registry = registry_with(traced_echo(log))
    registry.on("tools/pre-execute", lambda e, n: deny("not today"))
    registry.on("tools/post-execute", lambda e, r, n: log.append(("post", r.text)) or n())
    result = run(registry, call())
    assert result == {"call_id": "c1", "content": [{"type": "text", "text": "Error: not today"}], "is_error": True}
    assert log == [("post", "Error: not today")]


def test_a_listener_that_never_calls_next_cuts_off_the_rest_of_the_chain():
    log = []
    registry = registry_with(echo())
    registry.on("tools/pre-execute", lambda e, n: allow())
    registry.on("tools/pre-execute", lambda e, n: log.append("later") or deny("x"))
    assert not run(registry, call()).is_error and log == []


def test_prepend_puts_a_listener_in_front_of_every_existing_one():
    log = []
    registry = registry_with(echo())
    registry.on("tools/pre-execute", lambda e, n: log.append("first") or n())
    registry.on("tools/pre-execute", lambda e, n: log.append("prepended") or n(), prepend=True)
    run(registry, call())
    assert log == ["prepended", "first"]


def test_ask_without_an_approval_seam_degrades_to_deny():
    registry = registry_with(echo())
    registry.on("tools/pre-execute", lambda e, n: ask())
    assert run(registry, call()).text == 'Error: tool "echo" requires approval (not yet supported)'
    registry.on("tools/pre-execute", lambda e, n: ask("needs a human"), prepend=True)
    assert run(registry, call()).text == "Error: needs a human"


class Approval:
    def __init__(self, outcome):
        self.outcome, self.requests = outcome, []

    async def request(self, request):
        self.requests.append(request)
        return self.outcome


@pytest.mark.parametrize("outcome, text", [
    ("rejected", 'Error: the user rejected tool "echo"'),
    ("cancelled", 'Error: approval for tool "echo" was cancelled'),
    ("unavailable", 'Error: tool "echo" requires approval, but no approval channel is available'),
])
def test_each_refused_approval_outcome_has_its_own_denial_text(outcome, text):
    registry = registry_with(echo(), approval=Approval(outcome))
    registry.on("tools/pre-execute", lambda e, n: ask("why"))
    result = run(registry, call(agent="a1"))
    assert result.text == text and result.is_error and "error" not in result


def test_an_approved_ask_dispatches_after_the_guards_run():
    approval = Approval("allowed-once")
    registry = registry_with(echo(), approval=approval)
    registry.on("tools/pre-execute", lambda e, n: ask("why"))
    assert run(registry, call(agent="a1")).text == "hi"
    request = approval.requests[0]
    assert (request.agent, request.tool_name, request.call_id, request.reason) == ("a1", "echo", "c1", "why")
    registry.guard(lambda e: "guarded")
    assert run(registry, call(agent="a1")).text == "Error: guarded"


def test_an_ask_for_a_call_with_no_agent_is_denied_without_asking():
    approval = Approval("allowed-once")
    registry = registry_with(echo(), approval=approval)
    registry.on("tools/pre-execute", lambda e, n: ask())
    result = run(registry, call())
    assert result.text == 'Error: tool "echo" requires approval, but the call has no agent to route it through'
    assert approval.requests == []


def test_a_rogue_approval_outcome_fails_the_call_and_skips_post_execute():
    log = []
    registry = registry_with(traced_echo(log), approval=Approval("maybe"))
    registry.on("tools/pre-execute", lambda e, n: ask())
    registry.on("tools/post-execute", lambda e, r, n: log.append("post") or n())
    result = run(registry, call(agent="a"))
    assert "unreachable" in result.text and log == []
    assert result.error == {"name": "UnreachableVariantError", "code": "UNREACHABLE"}


def test_guards_run_global_then_scoped_and_the_first_reason_wins():
    log = []
    registry = registry_with(echo())
    registry.scope("a1").guard(lambda e: log.append("scoped") or "scoped says no")
    registry.guard(lambda e: log.append("global-1"))
    registry.guard(lambda e: log.append("global-2") or "global says no")
    assert run(registry, call(agent="a1")).text == "Error: global says no"
    assert log == ["global-1", "global-2"]


def test_a_scoped_guard_applies_only_to_its_agent():
    registry = registry_with(echo())
    registry.scope("a1").guard(lambda e: "a1 is grounded")
    assert run(registry, call(agent="a1")).text == "Error: a1 is grounded"
    assert run(registry, call(agent="a2")).text == "hi"
    assert run(registry, call()).text == "hi"


def test_a_prepended_allow_cannot_override_a_guard():
    registry = registry_with(echo())
    registry.guard(lambda e: "monotonic")
    registry.on("tools/pre-execute", lambda e, n: allow(), prepend=True)
    assert run(registry, call()).text == "Error: monotonic"


def test_the_same_guard_registered_twice_is_two_guards_each_disposed_alone():
    calls = []
    registry = registry_with(echo())
    guard = lambda e: calls.append(1)  # noqa: E731
    first = registry.guard(guard)
    registry.guard(guard)
    run(registry, call())
    first()
    run(registry, call())
    assert len(calls) == 3


def test_an_empty_string_guard_reason_still_denies():
    registry = registry_with(echo())
    registry.guard(lambda e: "")
    assert run(registry, call()).content == [{"type": "text", "text": "Error: "}]


def test_a_guard_returning_a_non_string_fails_closed():
    registry = registry_with(echo())
    registry.guard(lambda e: True)
    result = run(registry, call())
    assert result.is_error and result.error["code"] == "MALFORMED_GUARD"


@pytest.mark.parametrize("stage", ["pre", "guard", "execute"])
def test_a_raising_policy_stage_skips_the_body_and_post_execute(stage):
    log = []
    registry = registry_with(traced_echo(log))

    def explode(*args):
        raise RuntimeError(f"{stage} exploded")

    if stage == "pre":
        registry.on("tools/pre-execute", explode)
    elif stage == "guard":
        registry.guard(explode)
    else:
        registry.on("tools/execute", explode)
    registry.on("tools/post-execute", lambda e, r, n: log.append("post") or n())
    observed = []
    registry.on("tools/result", lambda e, r: observed.append(r))
    result = run(registry, call())
    assert result == {"call_id": "c1", "content": [{"type": "text", "text": f"Error: {stage} exploded"}], "is_error": True}
    assert log == [] and observed == [result]


@pytest.mark.parametrize("decision", [{"kind": "perhaps"}, {"kind": "deny"}, {"kind": "allow", "rewrite": {}}, None])
def test_a_malformed_pre_decision_fails_closed(decision):
    log = []
    registry = registry_with(traced_echo(log))
    registry.on("tools/pre-execute", lambda e, n: decision)
    result = run(registry, call())
    assert result.is_error and result.error["code"] == "MALFORMED_DECISION" and log == []


def test_a_raising_tool_body_is_an_error_result_that_goes_through_post_execute():
    log = []

    def body(args, ctx):
        ctx.defer_context(CTX("deferred"))
        raise ValueError("disk on fire")

    registry = registry_with(echo(execute=body))
    registry.on("tools/post-execute", lambda e, r, n: log.append(r.text) or n())
    result = run(registry, call())
    assert log == ["Error: disk on fire"]
    assert result.is_error and "error" not in result
    assert result.additional_context == [CTX("deferred")]


def faceless(base):
    """A raised value of ``base`` whose class lookup and string conversion both raise."""
    class Faceless(base):
        @property
        def __class__(self):
            raise RuntimeError("no class for you")

        def __str__(self):
            raise RuntimeError("no text either")
    return Faceless()


@pytest.mark.parametrize("base, text, code", [
    (Exception, "Error: <unprintable thrown value>", None),
    (KeyboardInterrupt, """Error: tool "echo" (c1) raised Faceless('<unprintable thrown value>'), which a tool or """
                        "policy must not raise; the call failed (the process serving it goes on)", "PROCESS_CONTROL"),
], ids=["exception", "base-exception"])
@pytest.mark.parametrize("is_async", [False, True], ids=["sync", "async"])
def test_a_raised_value_that_cannot_be_inspected_is_unprintable_and_still_goes_through_post_execute(
        base, text, code, is_async):
    log = []

    def body(args, ctx):
        raise faceless(base)

    async def async_body(args, ctx):
        raise faceless(base)

    registry = registry_with(echo(execute=async_body if is_async else body))
    registry.on("tools/post-execute", lambda e, r, n: log.append(r.text) or n())
    result = run(registry, call())
    assert log == [text] and result.text == text
    assert (result.get("error") or {}).get("code") == code


def test_argument_violations_and_unknown_tools_go_through_post_execute():
    log = []
    registry = registry_with(echo())
    registry.on("tools/post-execute", lambda e, r, n: log.append(r.error["code"]) or n())
    run(registry, call(arguments={"text": 1}), call(name="ghost"))
    assert log == ["INVALID_ARGS", "UNKNOWN_TOOL"]


def test_a_wrapper_can_short_circuit_and_its_result_still_goes_through_post_execute():
    log = []
    registry = registry_with(traced_echo(log))
    registry.on("tools/execute", lambda e, n: {"content": [text_block("cached")], "is_error": False, "extra": 1})
    registry.on("tools/post-execute", lambda e, r, n: log.append("post") or n())
    result = run(registry, call())
    assert result.text == "cached" and result["extra"] == 1 and log == ["post"]


def test_a_wrapper_returning_a_malformed_result_fails_the_call():
    registry = registry_with(echo())
    registry.on("tools/execute", lambda e, n: "not a result")
    assert run(registry, call()).error["code"] == "MALFORMED_RESULT"


def test_a_retry_wrapper_may_call_next_more_than_once():
    attempts = []

    def flaky(args, ctx):
        attempts.append(1)
        if len(attempts) < 3:
            raise RuntimeError("flaky")
        return [text_block("third time")]

    async def retry(e, call_next):
        for _ in range(5):
            result = await call_next()
            if not result.is_error:
                return result
        return result

    registry = registry_with(echo(execute=flaky))
    registry.on("tools/execute", retry)
    assert run(registry, call()).text == "third time" and len(attempts) == 3


def test_the_object_return_form_attaches_meta_and_the_list_form_has_no_meta_key():
    registry = registry_with(
        echo("with_meta", execute=lambda a, c: {"content": [text_block("x")], "meta": {"lines": 3}}),
        echo("plain"),
    )
    with_meta, plain = run(registry, call(name="with_meta"), call(name="plain"))
    assert with_meta.meta == {"lines": 3} and "meta" not in plain


def test_a_tool_returning_the_wrong_shape_is_an_error_result():
    registry = registry_with(echo(execute=lambda a, c: "just a string"))
    result = run(registry, call())
    assert result.is_error and result.error["code"] == "MALFORMED_RESULT" and "list of content blocks" in result.text


def test_additional_context_orders_deferred_then_wrapper_then_post():
    def body(args, ctx):
        ctx.defer_context(CTX("nested-1"))
        ctx.defer_context(CTX("nested-2"))
        return [text_block("ok")]

    async def wrapper(e, call_next):
        result = await call_next()
        return result.evolve(additional_context=[*(result.additional_context or []), CTX("wrapper")])

    registry = registry_with(echo(execute=body))
    registry.on("tools/execute", wrapper)
    registry.on("tools/post-execute", lambda e, r, n: accept(additional_context=[CTX("post")]))
    result = run(registry, call())
    assert [c["content"] for c in result.additional_context] == ["nested-1", "nested-2", "wrapper", "post"]


def test_wrapper_contexts_pass_through_unchanged_when_no_tool_deferred():
    registry = registry_with(echo())
    registry.on("tools/execute", lambda e, n: {"content": [], "is_error": False, "additional_context": [CTX("w")]})
    assert run(registry, call()).additional_context == [CTX("w")]


def test_accept_keeps_the_error_and_meta_and_can_only_replace_content():
    registry = registry_with(echo(execute=lambda a, c: (_ for _ in ()).throw(ValueError("bad"))))
    registry.on("tools/post-execute", lambda e, r, n: accept(content=[]))
    result = run(registry, call())
    assert result == {"call_id": "c1", "content": [], "is_error": True}


def test_block_drops_error_meta_and_earlier_contexts():
    def body(args, ctx):
        ctx.defer_context(CTX("deferred"))
        return {"content": [text_block("secret")], "meta": {"m": 1}}

    registry = registry_with(echo(execute=body))
    registry.on("tools/post-execute", lambda e, r, n: block("redacted, try again"))
    assert run(registry, call()) == {
        "call_id": "c1", "content": [{"type": "text", "text": "redacted, try again"}], "is_error": True}
    registry.on("tools/post-execute", lambda e, r, n: block([text_block("b")], [CTX("why")]), prepend=True)
    assert run(registry, call()).additional_context == [CTX("why")]


def test_a_raising_post_listener_gives_an_exact_error_result():
    registry = registry_with(echo())
    registry.on("tools/post-execute", lambda e, r, n: 1 / 0)
    assert run(registry, call()) == {
        "call_id": "c1", "content": [{"type": "text", "text": "Error: division by zero"}], "is_error": True}


def test_a_non_json_result_becomes_the_materialisation_error():
    observed = []
    registry = registry_with(echo(execute=lambda a, c: {"content": [text_block("x")], "meta": {"t": (1,)}}))
    registry.on("tools/result", lambda e, r: observed.append(r))
    result = run(registry, call())
    assert result.text == "Error: tool result must be losslessly JSON-serializable" and result.is_error
    assert observed == [result]


def test_observers_receive_a_frozen_execution_and_result_and_the_caller_gets_the_same_object():
    observed = []
    registry = registry_with(echo())
    registry.on("tools/result", lambda e, r: observed.append((e, r)))
    result = run(registry, call())
    execution, seen = observed[0]
    assert seen is result and execution.frozen
    with pytest.raises(FrozenValueError):
        result["content"].append({})
    with pytest.raises(FrozenValueError):
        execution.arguments["x"] = 1


def test_observer_failures_are_contained_logged_and_the_rest_still_run(caplog):
    heard = []

    class Unprintable(Exception):
        def __str__(self):
            raise RuntimeError

    def unprintable(e, r):
        raise Unprintable()

    registry = registry_with(echo())
    registry.on("tools/result", lambda e, r: 1 / 0)
    registry.on("tools/result", unprintable)
    registry.on("tools/result", lambda e, r: heard.append(r.call_id))
    with caplog.at_level(logging.WARNING, logger="dsh_actors.pipeline"):
        result = run(registry, call())
    assert not result.is_error and heard == ["c1"]
    assert 'tool "echo" (c1): tools/result observer failed: division by zero' in caplog.text
    assert "tools/result observer failed: <unprintable thrown value>" in caplog.text


def test_scoped_listeners_hear_only_their_agent_and_unscoped_hear_everyone():
    heard = []
    registry = registry_with(echo())
    registry.on("tools/result", lambda e, r: heard.append(("global", e.agent)))
    registry.scope("a1").on("tools/result", lambda e, r: heard.append(("a1", e.agent)))
    registry.scope("a1").on("tools/pre-execute", lambda e, n: deny("a1 only"))
    results = run(registry, call(agent="a1"), call(agent="a2"), call())
    assert [r.text for r in results] == ["Error: a1 only", "hi", "hi"]
    assert heard == [("global", "a1"), ("a1", "a1"), ("global", "a2"), ("global", None)]


def test_a_scope_executes_on_its_agents_behalf_and_sees_its_own_shadow():
    registry = registry_with(echo())
    scope = registry.scope("a1")
    scope.register(echo(execute=lambda a, c: [text_block(f"shadow for {c.agent}")]))
    assert asyncio.run(scope.execute(call())).text == "shadow for a1"
    assert run(registry, call()).text == "hi"


def test_a_registry_change_during_an_in_flight_call_does_not_change_that_call():
    registry = registry_with()
    gate = asyncio.Event

    async def scenario():
        started, release = gate(), gate()

        async def slow(args, ctx):
            started.set()
            await release.wait()
            return [text_block("done")]

        dispose = registry.register(echo(execute=slow))
        registry.on("tools/post-execute", lambda e, r, n: n())
        task = asyncio.create_task(registry.execute(call()))
        await started.wait()
        dispose()
        registry.guard(lambda e: "too late")
        registry.on("tools/post-execute", lambda e, r, n: block("too late"))
        release.set()
        return await task, await registry.execute(call())

    in_flight, after = asyncio.run(scenario())
    assert in_flight.text == "done" and not in_flight.is_error
    assert after.text == "too late" and after.is_error


def test_the_staged_api_composes_to_execute():
    registry = registry_with(echo())

    async def staged():
        step = await pipeline.prepare(call(), registry.state.plan)
        assert step.stage == "dispatch"
        step = await pipeline.dispatch(step)
        assert step.stage == "post"
        return await pipeline.finalize(step)

    assert asyncio.run(staged()) == run(registry, call())


def test_a_tool_body_sees_the_callers_signal():
    controller = AbortController()
    seen = []
    registry = registry_with(echo(execute=lambda a, ctx: seen.append(ctx.signal) or []))
    run(registry, call(signal=controller.signal))
    assert seen == [controller.signal]


def test_scoped_and_global_listeners_share_one_registration_order():
    registry = registry_with(echo())
    log = []

    def hear(tag):
        return lambda e, n: log.append(f"{e.agent}:{tag}") or n()

    scope = registry.scope("a1")
    registry.on("tools/pre-execute", hear("global-1"))
    scope.on("tools/pre-execute", hear("scoped-2"))
    registry.on("tools/pre-execute", hear("global-3"), prepend=True)
    scope.on("tools/pre-execute", hear("scoped-4"), prepend=True)
    registry.on("tools/pre-execute", hear("global-5"))
    asyncio.run(scope.execute(call(arguments={"text": "x"})))
    asyncio.run(registry.scope("a2").execute(call(arguments={"text": "x"})))
    assert log == ["a1:scoped-4", "a1:global-3", "a1:global-1", "a1:scoped-2", "a1:global-5",
                   "a2:global-3", "a2:global-1", "a2:global-5"]
