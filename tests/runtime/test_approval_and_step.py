"""Approval answered from other drivers, policies, cancellation; the agent step's records."""

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

from dsh_actors import AbortController, accept, ask
from dsh_actors.runtime.session.client import SessionLog
from dsh_actors.runtime.step import agent_step

from .fixtures import echo, shares_one_host_registry

pytestmark = shares_one_host_registry

T = 60


def cli(address, *args):
    env = {**os.environ, "RAY_ADDRESS": address}
    return subprocess.run([sys.executable, "-m", "dsh_actors", "approvals", *args], capture_output=True,
                          text=True, timeout=120, env=env)


def wait_pending(queue, count=1, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pending = queue.pending().result(T)
        if len(pending) >= count:
            return pending
        time.sleep(0.1)
    raise AssertionError("no pending approval appeared")


def asking(registry):
    registry.register(echo()).result(T)
    registry.on("tools/pre-execute", lambda e, n: ask("writes need a human")).result(T)


@pytest.mark.parametrize("answer, text", [("allow", "approved!"),
                                          ("reject", 'Error: the user rejected tool "echo"')])
def test_an_ask_waits_until_another_driver_answers_it(registry, ray_cluster, tmp_path, answer, text):
    asking(registry)
    queue = registry.approvals().result(T)
    session = SessionLog.open("approver-agent", str(tmp_path / "a.log"))
    response = registry.scope("approver-agent").execute(call_id="w1", name="echo", arguments={"text": "approved!"})

    async def scenario():
        call = asyncio.ensure_future(response)
        pending = await asyncio.get_running_loop().run_in_executor(None, wait_pending, queue)
        listed = cli(ray_cluster["cluster"].address, "list", "--registry", registry.name, "--json")
        assert listed.returncode == 0, listed.stderr[-1500:]
        assert [p["id"] for p in json.loads(listed.stdout)] == [pending[0]["id"]]
        answered = cli(ray_cluster["cluster"].address, answer, pending[0]["id"], "--registry", registry.name)
        assert answered.returncode == 0, answered.stderr[-1500:]
        return await asyncio.wait_for(call, T), pending[0]

    result, pending = asyncio.run(scenario())
    assert result.text == text
    assert (pending["agent"], pending["tool_name"], pending["call_id"], pending["reason"]) == (
        "approver-agent", "echo", "w1", "writes need a human")
    events = session.events().result(T)
    outcome = "allowed-once" if answer == "allow" else "rejected"
    assert events == [
        {"type": "approval/asked", "id": pending["id"], "tool_name": "echo", "call_id": "w1",
         "reason": "writes need a human"},
        {"type": "approval/decided", "id": pending["id"], "outcome": outcome},
    ]
    assert not queue.allow(pending["id"]).result(T)  # answered already: a second answer is refused
    session.close().result(T)


def test_policy_never_rejects_without_asking_and_unmounting_degrades_to_deny(registry):
    asking(registry)
    queue = registry.approvals(policy="never").result(T)
    result = registry.scope("a1").execute(call_id="n", name="echo", arguments={}).result(T)
    assert result.text == 'Error: the user rejected tool "echo"'
    assert queue.pending().result(T) == []
    with pytest.raises(ValueError, match='must be one of "ask", "never" or "always"'):
        queue.set_policy("sometimes")
    registry.unmount_approvals().result(T)
    assert registry.scope("a1").execute(call_id="d", name="echo", arguments={}).result(T).text == \
        "Error: writes need a human"


def test_a_signal_that_aborts_while_the_ask_is_pending_cancels_it_and_a_late_answer_is_discarded(registry):
    asking(registry)
    queue = registry.approvals().result(T)
    controller = AbortController()

    async def scenario():
        call = asyncio.ensure_future(registry.scope("a1").execute(
            call_id="c", name="echo", arguments={}, signal=controller.signal))
        pending = await asyncio.get_running_loop().run_in_executor(None, wait_pending, queue)
        controller.abort("user left")
        result = await asyncio.wait_for(call, T)
        late = await queue.allow(pending[0]["id"])
        return result, late

    result, late = asyncio.run(scenario())
    assert result.text == 'Error: approval for tool "echo" was cancelled' and late is False


@pytest.mark.parametrize("stop", ["abort_agents", "cancel"])
def test_a_call_stopped_while_its_ask_is_pending_takes_its_ask_with_it(registry, stop):
    """The agent's calls aborted (its episode's dead attempt), or the call cancelled by its
    caller: either way its ask is no longer pending, and an answer to it is refused (it
    used to stay pending beside a rerun's, and allowing it ran the dead attempt's call)."""
    asking(registry)
    queue = registry.approvals().result(T)

    async def scenario():
        response = registry.scope("a1").execute(call_id=f"s-{stop}", name="echo", arguments={})
        call = asyncio.ensure_future(response)
        pending = await asyncio.get_running_loop().run_in_executor(None, wait_pending, queue)
        if stop == "abort_agents":
            assert await registry.abort_agents(["a1"], "its episode runs again") >= 1
        else:
            response.cancel()
        result = await asyncio.wait_for(call, T)
        deadline = time.monotonic() + 30
        while await queue.pending() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return result, await queue.pending(), await queue.allow(pending[0]["id"])

    result, left, late = asyncio.run(scenario())
    assert result.is_error and left == [] and late is False


def test_an_ask_nobody_answers_fails_its_call_at_the_queues_deadline_coded(registry):
    asking(registry)
    queue = registry.approvals(timeout_s=0.5).result(T)
    result = registry.scope("a1").execute(call_id="late", name="echo", arguments={}).result(T)
    assert result.error == {"name": "ApprovalTimeoutError", "code": "APPROVAL_TIMEOUT"}, result
    assert queue.pending().result(T) == []
    with pytest.raises(ValueError, match="positive number of seconds"):
        registry.approvals(timeout_s=-1)
    registry.unmount_approvals().result(T)  # (and its deadline with it)


def test_a_call_with_no_agent_is_denied_without_asking(registry):
    asking(registry)
    queue = registry.approvals().result(T)
    result = registry.execute(call_id="x", name="echo", arguments={}).result(T)
    assert result.text == 'Error: tool "echo" requires approval, but the call has no agent to route it through'
    assert queue.pending().result(T) == []


def test_the_cli_refuses_to_guess_a_cluster():
    out = subprocess.run([sys.executable, "-m", "dsh_actors", "approvals", "list"], capture_output=True, text=True,
                         timeout=60, env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"})
    assert out.returncode == 2 and "pass --address or set RAY_ADDRESS" in out.stderr


@pytest.mark.own_registry  # it kills or ends a part of its registry, or counts its calls
def test_an_agent_step_records_one_result_per_call_then_the_buffered_context(registry, tmp_path):
    context = {"content": "remember the path", "source": {"kind": "plugin", "plugin": "hint"}}
    registry.register(echo()).result(T)
    registry.register(echo("crash", execute=lambda a, c: os._exit(1))).result(T)
    registry.on("tools/post-execute",
                lambda e, r, n: accept(additional_context=[context]) if e.name == "echo" else n()).result(T)
    scope = registry.scope("stepper")
    session = SessionLog.open(f"step-{time.monotonic_ns()}", str(tmp_path / "step.log"))
    calls = [
        {"call_id": "1", "name": "echo", "arguments": {"text": "a"}},
        {"call_id": "2", "name": "crash", "arguments": {}},
        {"call_id": "3", "name": "ghost", "arguments": {}},
        {"call_id": "4", "name": "echo", "arguments": {"bad": {1, 2}}},
    ]
    results = agent_step(scope, session, calls).result(120)
    assert [r.call_id for r in results] == ["1", "2", "3", "4"]
    assert [r.is_error for r in results] == [False, True, True, True]
    events = session.events().result(T)
    assert [e["type"] for e in events] == ["tool/result"] * 4 + ["context/message"]
    assert [e["call_id"] for e in events[:4]] == ["1", "2", "3", "4"]
    assert events[1]["error"]["code"] == "WORKER_CRASHED" and events[3]["arguments"] is None
    assert events[4]["contexts"] == [context]
    messages = session.derive_messages().result(T)
    assert [m["role"] for m in messages] == ["tool"] * 4 + ["user"] and messages[-1]["content"] == "remember the path"
    with pytest.raises(ValueError, match="unique"):
        agent_step(scope, session, [calls[0], calls[0]])
    session.close().result(T)
