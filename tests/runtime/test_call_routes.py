"""A call's resubmission rules against fake routes, without Ray: what it sends again and
where (a stale plan, an executor without the plan, one the call never reached), and what is
final (a result, an executor that may have run it, a cancel)."""

import asyncio

import pytest

from dsh_actors.core.types import ToolExecutionResult
from dsh_actors.runtime.caller.calls import Call
from dsh_actors.runtime.errors import ChannelLost
from dsh_actors.runtime.wire import Envelope, Outcome, PlanTicket

pytestmark = pytest.mark.timeout(30)


class Ref:
    """What an object ref's hex is asked of, in a plan ticket's box."""

    def __init__(self, name):
        self.name = name

    def hex(self):
        return self.name


class Plans:
    def __init__(self):
        self.asked = []  # refresh flags, in order

    async def ticket(self, agent, refresh=False):
        self.asked.append(refresh)
        return PlanTicket(len(self.asked), [Ref(f"plan-{len(self.asked)}")], observed=False)

    def current(self, ticket):
        return True

    async def plan_of(self, ticket):
        return None


class Sent:
    """A call sent to a fake executor: its answer (outcome bytes, or an error raised)."""

    def __init__(self, answer):
        self.answer, self.cancelled = answer, False

    def __await__(self):
        async def answer():
            if isinstance(self.answer, BaseException):
                raise self.answer
            return self.answer
        return answer().__await__()

    def cancel(self):
        self.cancelled = True


class Owner:
    """The caller's side of one registry, faked: executors answer from a script, in turn."""

    version_key = b"k"

    def __init__(self, script):
        self.script = list(script)  # (executor, answer) per send, in order
        self.plans, self.sends, self.avoided, self.picks = Plans(), [], [], []
        self.routes, self.remote = self, self

    def local_here(self):
        return None

    async def pick(self, avoid=None):
        executor = next(e for e, _ in self.script if e is not avoid)
        self.picks.append((executor, avoid))
        return executor

    def unreachable(self, executor, exc):
        self.avoided.append(executor)

    def send(self, executor, envelope, plan_box, hub):
        expected, answer = self.script.pop(0)
        assert executor == expected, (executor, expected)
        self.sends.append((executor, Envelope.unpack(envelope).plan, plan_box is not None))
        return Sent(answer)


def result(text="done"):
    return Outcome.result(ToolExecutionResult({"call_id": "c1", "content": [{"type": "text", "text": text}],
                                                "is_error": False}))


def run(owner, **call):
    return asyncio.run(Call.of(owner, {"call_id": "c1", "name": "echo", "arguments": {}, **call}).run())


def test_a_stale_plan_is_sent_again_with_a_fresh_ticket_on_whichever_executor_is_next():
    owner = Owner([("a", Outcome.STALE), ("a", result())])
    assert run(owner)["content"][0]["text"] == "done"
    assert owner.plans.asked == [False, True]  # the second ticket was asked fresh
    assert [plan for _, plan, _ in owner.sends] == ["plan-1", "plan-2"]
    assert len(owner.picks) == 2  # a fresh route as well


def test_an_executor_without_the_plan_gets_the_same_call_again_with_the_plans_ref():
    owner = Owner([("a", Outcome.NEED_PLAN), ("a", result())])
    assert not run(owner)["is_error"]
    assert owner.sends == [("a", "plan-1", False), ("a", "plan-1", True)] and len(owner.picks) == 1


def test_a_call_that_never_reached_its_executor_goes_to_another_and_the_first_is_avoided():
    owner = Owner([("a", ChannelLost(reached=False)), ("b", result())])
    assert not run(owner)["is_error"]
    assert owner.avoided == ["a"] and owner.picks == [("a", None), ("b", "a")]


def test_a_call_that_may_have_run_is_never_sent_again():
    owner = Owner([("a", ChannelLost(reached=True)), ("b", result())])
    answer = run(owner)
    assert answer["is_error"] and answer["error"]["code"] == "WORKER_CRASHED"
    assert [e for e, _, _ in owner.sends] == ["a"] and owner.avoided == ["a"]


def test_a_call_cancelled_before_it_is_sent_is_never_sent():
    owner = Owner([("a", result())])

    async def cancelled_first():
        call = Call.of(owner, {"call_id": "c1", "name": "echo", "arguments": {}})
        call.cancel()
        return await call.run()

    answer = asyncio.run(cancelled_first())
    assert answer["is_error"] and answer["error"]["code"] == "CANCELLED" and owner.sends == []


def test_an_executor_that_answers_cancelled_ends_the_call_cancelled_and_nothing_is_resent():
    owner = Owner([("a", Outcome.CANCELLED), ("a", result())])
    answer = run(owner)
    assert answer["error"]["code"] == "CANCELLED" and len(owner.sends) == 1
