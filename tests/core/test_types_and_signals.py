import asyncio
import pickle
import threading
import time

import pytest

from dsh_actors import AbortController, AbortError, ToolExecution, ToolExecutionResult
from dsh_actors.core.jsonvalue import FrozenValueError
from dsh_actors.core.signal import TimeoutReason, any_signal, deadline_signal
from dsh_actors.core.types import ExecutionToken


def test_an_execution_token_has_equality_only_and_keeps_it_across_pickling():
    token = ExecutionToken()
    assert token == pickle.loads(pickle.dumps(token)) and token != ExecutionToken()
    assert repr(token) == "<ExecutionToken>" and not [a for a in dir(token) if not a.startswith("_")]
    with pytest.raises(FrozenValueError):
        token.anything = 1


def test_an_execution_protects_identity_and_pickles_without_its_process_local_signal():
    execution = ToolExecution(call_id="c", name="t", arguments={}, agent="a", signal=AbortController().signal)
    for field in ("token", "call_id", "name", "arguments", "agent", "parent"):
        with pytest.raises(FrozenValueError):
            setattr(execution, field, None)
    del execution.signal
    assert execution.signal is None
    again = pickle.loads(pickle.dumps(execution))
    assert (again.token, again.call_id, again.agent) == (execution.token, "c", "a")


def test_a_result_reads_by_attribute_and_by_key_and_pickles_as_itself():
    result = ToolExecutionResult({"call_id": "c", "content": [{"type": "text", "text": "a"},
                                                             {"type": "image"}, {"type": "text", "text": "b"}],
                                  "is_error": False})
    assert result.text == "a\nb" and result["is_error"] is result.is_error is False
    assert result.error is None and result.meta is None
    again = pickle.loads(pickle.dumps(result))
    assert type(again) is ToolExecutionResult and again == result
    assert "meta" not in result.evolve(meta={"x": 1}).evolve(meta=...)


def test_abort_is_idempotent_and_the_first_reason_wins():
    controller = AbortController()
    heard = []
    controller.signal.add_listener(heard.append)
    assert controller.abort("first") and not controller.abort("second")
    assert controller.signal.aborted and controller.signal.reason == "first" and heard == ["first"]
    with pytest.raises(AbortError, match="first"):
        controller.signal.raise_if_aborted()


def test_a_fused_signal_takes_the_first_sources_reason():
    a, b = AbortController(), AbortController()
    fused = any_signal(a.signal, None, b.signal)
    b.abort("b went first")
    a.abort("a")
    assert fused.reason == "b went first"


def test_a_signal_can_be_awaited_and_is_woken_from_another_thread():
    controller = AbortController()

    async def wait():
        threading.Timer(0.02, controller.abort, args=("from thread",)).start()
        return await controller.signal

    assert asyncio.run(asyncio.wait_for(wait(), 5)) == "from thread"


def test_a_deadline_aborts_at_an_absolute_time_with_its_reason():
    reason = TimeoutReason("TOOL_TIMEOUT", 20)
    signal, dispose = deadline_signal(time.monotonic() + 0.02, reason=reason)
    asyncio.run(asyncio.wait_for(signal.wait(), 5))
    assert signal.reason == reason and str(reason) == "TOOL_TIMEOUT after 20ms"
    early, cancel = deadline_signal(time.monotonic() + 60)
    cancel()
    assert not early.aborted
    assert pickle.loads(pickle.dumps(reason)) == reason
