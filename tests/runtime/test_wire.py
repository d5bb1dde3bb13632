"""The wire between a client and an executor: one envelope in, one tagged outcome out."""

import pytest

from dsh_actors import ToolExecution, ToolExecutionResult
from dsh_actors.core.jsonvalue import FrozenDict, FrozenList, FrozenValueError
from dsh_actors.core.types import ExecutionToken
from dsh_actors.runtime.wire import Envelope, Outcome


def test_an_envelope_carries_the_created_execution_and_its_arguments_arrive_frozen():
    parent = ExecutionToken()
    execution = ToolExecution(call_id="c1", name="echo", arguments={"a": [1, {"b": "é"}]}, agent="agent-7",
                              parent=parent)
    call = Envelope.unpack(Envelope.of(execution, version=4, plan_id="p", key=b"k").pack())
    again = call.execution(None)
    assert (again.call_id, again.name, again.agent) == ("c1", "echo", "agent-7")
    assert again.token == execution.token and again.parent == parent  # the identity minted once, by the caller
    assert again.arguments == {"a": [1, {"b": "é"}]}
    assert isinstance(again.arguments, FrozenDict) and isinstance(again.arguments["a"], FrozenList)
    with pytest.raises(FrozenValueError):
        again.arguments["a"].append(2)
    assert (call.version, call.plan, call.key) == (4, "p", b"k")
    with pytest.raises(AttributeError):
        call.plan = "other"  # a frozen value: what was sent is what is run


def test_an_outcome_is_tagged_and_a_result_comes_back_frozen_and_equal():
    result = ToolExecutionResult({"call_id": "c", "content": [{"type": "text", "text": "hi"}], "is_error": False,
                                  "meta": {"n": [1, 2.5, None, True]}})
    outcome = Outcome.read(Outcome.result(result))
    assert outcome.kind == "result" and outcome.value == result
    assert isinstance(outcome.value, ToolExecutionResult) and isinstance(outcome.value["content"], FrozenList)
    assert Outcome.read(Outcome.STALE) == Outcome("stale")
    assert Outcome.read(Outcome.NEED_PLAN) == Outcome("need_plan")
    with pytest.raises(ValueError, match="not an executor outcome"):
        Outcome.read(b"dsh-actors:stale-plan")
