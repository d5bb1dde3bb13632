"""Call batches without Ray: the caller's lanes against an executor's mailboxes, through a
fake actor whose methods answer like Ray's (``.remote()`` gives an awaitable ref)."""

import asyncio
import concurrent.futures
import uuid

import pytest

from dsh_actors.core.types import ToolExecutionResult
from dsh_actors.runtime.caller.lanes import Lanes
from dsh_actors.runtime.executor.mailboxes import Mailboxes
from dsh_actors.runtime.wire import Outcome


class Ref:
    """What ``method.remote()`` returns: awaitable, and ``future()`` as a Ray ref has."""

    def __init__(self, coroutine):
        self._task = asyncio.ensure_future(coroutine)

    def __await__(self):
        return self._task.__await__()

    def future(self):
        done = concurrent.futures.Future()

        def copy(task):
            if task.cancelled():
                done.cancel()
            elif task.exception() is not None:
                done.set_exception(task.exception())
            else:
                done.set_result(task.result())
        self._task.add_done_callback(copy)
        return done


class Method:
    def __init__(self, executor, name):
        self._executor, self._name = executor, name

    def remote(self, *args):
        self._executor.sent.append(self._name)
        return Ref(self._executor.answer(self._name, args))


class FakeExecutor:
    """An executor process: ``execute`` runs an envelope (``b"<seconds>:<text>"``, or a
    gate name to wait for), the batch methods go through a real :class:`Mailboxes`.
    ``restart()`` is a new process (new incarnation, nothing pending); ``dead`` makes
    every method raise as a dead actor's would."""

    _actor_id = "fake-executor"

    def __init__(self):
        self.mail = Mailboxes(incarnation=uuid.uuid4().hex)  # each fake process its own
        self.sent: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}
        self.dead: BaseException | None = None
        for name in ("execute", "execute_batch", "collect", "cancel_batched"):
            setattr(self, name, Method(self, name))

    def restart(self):
        self.mail = Mailboxes(incarnation=uuid.uuid4().hex)  # each fake process its own

    @staticmethod
    def wake_collect(mail, client):
        """Make a collect waiting on ``mail`` answer now (with whatever is ready)."""
        mail._boxes[client].woken.set()

    async def run(self, envelope, *_):
        seconds, text = envelope.decode().split(":", 1)
        if seconds == "gate":
            await self.gates.setdefault(text, asyncio.Event()).wait()
        else:
            await asyncio.sleep(float(seconds))
        if text == "raise":
            raise RuntimeError("the plan could not be read")
        return Outcome.result(ToolExecutionResult({"content": [{"type": "text", "text": text}], "is_error": False}))

    async def answer(self, name, args):
        await asyncio.sleep(0)  # a hop
        if self.dead is not None:
            raise self.dead
        if name == "execute":
            return await self.run(*args)
        if name == "execute_batch":
            client, items = args
            return self.mail.start(client, [(key, self.run(envelope)) for key, envelope, _, _ in items])
        if name == "collect":
            return await self.mail.collect(*args)
        return self.mail.cancel(*args)


def text(raw):
    outcome = Outcome.read(raw)
    return outcome.value.text if outcome.value is not None else outcome.kind


def test_a_lone_call_is_its_own_task_and_calls_made_meanwhile_share_one_batch():
    async def scenario():
        executor, lanes = FakeExecutor(), Lanes(asyncio.get_running_loop())
        alone = await lanes.send(executor, b"0:alone")
        calls = [lanes.send(executor, f"0.01:call {i}".encode()) for i in range(20)]
        return text(alone), [text(await c) for c in calls], executor.sent

    alone, texts, sent = asyncio.run(scenario())
    assert alone == "alone"
    assert texts == [f"call {i}" for i in range(20)]  # each caller got its own result
    # the first of the twenty went alone (the lane was idle), the other 19 in one batch
    assert sent[:3] == ["execute", "execute", "execute_batch"] and sent.count("execute_batch") == 1


def test_a_slow_call_never_holds_the_fast_calls_batched_beside_it():
    async def scenario():
        executor, lanes = FakeExecutor(), Lanes(asyncio.get_running_loop())
        first = lanes.send(executor, b"0:first")
        slow = lanes.send(executor, b"gate:slow")
        fast = [lanes.send(executor, f"0:fast {i}".encode()) for i in range(5)]
        texts = [text(await asyncio.wait_for(asyncio.shield(c.future), 5)) for c in [first, *fast]]
        still_waiting = not slow.future.done()
        executor.gates["slow"].set()
        return texts, still_waiting, text(await slow)

    texts, still_waiting, slow = asyncio.run(scenario())
    assert texts == ["first", *(f"fast {i}" for i in range(5))] and still_waiting and slow == "slow"


def test_cancelling_a_queued_or_a_batched_call_answers_cancelled_and_leaves_the_others():
    async def scenario():
        executor, lanes = FakeExecutor(), Lanes(asyncio.get_running_loop())
        lanes.send(executor, b"0:first")
        queued = lanes.send(executor, b"gate:queued")
        queued.cancel()  # before the loop turn ends: it never leaves
        batched, kept = lanes.send(executor, b"gate:batched"), lanes.send(executor, b"0:kept")
        await asyncio.sleep(0.05)  # the batch went
        batched.cancel()
        return text(await queued), text(await batched), text(await kept), executor.sent.count("cancel_batched")

    assert asyncio.run(scenario()) == ("cancelled", "cancelled", "kept", 1)


def test_calls_pending_on_an_executor_that_restarted_fail_and_later_calls_are_served():
    async def scenario():
        executor, lanes = FakeExecutor(), Lanes(asyncio.get_running_loop())
        lanes.send(executor, b"0:first")
        pending = [lanes.send(executor, f"gate:p{i}".encode()) for i in range(3)]
        await asyncio.sleep(0.05)  # batched and started: a collect waits on the old process
        old = executor.mail
        executor.restart()  # a new process, which never saw them
        executor.wake_collect(old, lanes.client)  # the old collect answers empty; the next reaches the new one
        outcomes = await asyncio.gather(*(asyncio.wait_for(c.future, 5) for c in pending), return_exceptions=True)
        later = [lanes.send(executor, f"0:later {i}".encode()) for i in range(3)]
        return [type(o).__name__ for o in outcomes], [text(await c) for c in later]

    failures, later = asyncio.run(scenario())
    assert failures == ["WorkerCrashedError"] * 3  # not left waiting for answers no one will send
    assert later == ["later 0", "later 1", "later 2"]


def test_a_collect_that_fails_fails_every_call_waiting_on_it_with_that_error():
    class Gone(Exception):
        pass

    async def scenario():
        executor, lanes = FakeExecutor(), Lanes(asyncio.get_running_loop())
        lanes.send(executor, b"0:first")
        pending = [lanes.send(executor, f"gate:p{i}".encode()) for i in range(4)]
        await asyncio.sleep(0.05)
        executor.dead = Gone("the actor died")
        executor.wake_collect(executor.mail, lanes.client)  # the next collect raises
        outcomes = await asyncio.gather(*(asyncio.wait_for(c.future, 5) for c in pending), return_exceptions=True)
        return [type(o).__name__ for o in outcomes]

    assert asyncio.run(scenario()) == ["Gone"] * 4


def test_a_batch_that_cannot_start_fails_its_calls_at_once():
    class Gone(Exception):
        pass

    async def scenario():
        executor, lanes = FakeExecutor(), Lanes(asyncio.get_running_loop())
        lanes.send(executor, b"gate:first")  # in flight alone: what follows is batched
        executor.dead = Gone("restarting")
        batched = [lanes.send(executor, b"0:never") for _ in range(3)]
        results = await asyncio.gather(*(asyncio.wait_for(c.future, 5) for c in batched), return_exceptions=True)
        return [type(r).__name__ for r in results], executor.sent

    names, sent = asyncio.run(scenario())
    assert names == ["Gone"] * 3 and sent == ["execute", "execute_batch"]


def test_mailboxes_answer_a_failure_as_an_error_result_and_another_incarnation_with_none():
    async def scenario():
        mail = Mailboxes()
        executor = FakeExecutor()
        mail.start("client", [(1, executor.run(b"0:raise")), (2, executor.run(b"0:fine"))])
        got = []
        while len(got) < 2:
            got += await mail.collect("client", mail.incarnation, 5)
        return dict(got), await mail.collect("client", "another process", 5)

    got, other = asyncio.run(scenario())
    failed = Outcome.read(got[1])
    assert failed.kind == "failed" and failed.failure["is_error"] is True
    assert "the plan could not be read" in failed.failure["content"][0]["text"]
    assert text(got[2]) == "fine" and other is None


def test_mailboxes_drop_what_a_caller_that_stopped_collecting_left_behind():
    now = [0.0]

    async def scenario():
        mail = Mailboxes(keep_s=60, clock=lambda: now[0])
        executor = FakeExecutor()
        mail.start("gone", [(1, executor.run(b"0:left"))])
        await asyncio.sleep(0.02)  # finished; nobody collects
        now[0] = 59.0
        mail.start("live", [(1, executor.run(b"0:x"))])
        kept = len(mail)
        now[0] = 120.0
        await mail.collect("live", mail.incarnation, 1)  # the live caller collects
        mail.start("live", [(2, executor.run(b"0:y"))])  # a sweep runs on the next start
        return kept, len(mail)

    kept, after = asyncio.run(scenario())
    assert kept == 2 and after == 1  # the caller that stopped collecting is forgotten


@pytest.mark.parametrize("wait_s", [0.05])
def test_a_collect_with_nothing_ready_answers_empty_after_its_wait(wait_s):
    async def scenario():
        mail = Mailboxes()
        return await mail.collect("client", mail.incarnation, wait_s)

    assert asyncio.run(scenario()) == []


def test_an_executor_runs_at_most_its_calls_at_once_and_a_sub_call_runs_in_its_runs_slot():
    """ExecutorCore without Ray: a plan already cached, three calls for two slots; the
    third waits for a slot, and a call made on the executor's own loop (a Code Mode
    sub-call) needs none, so a full executor never waits on itself."""
    from dsh_actors import define_tool, text_block
    from dsh_actors.core.jsonvalue import FrozenDict
    from dsh_actors.core.pipeline import ExecutionPlan
    from dsh_actors.core.types import ExecutionToken, ToolExecution
    from dsh_actors.runtime.executor.executor import ExecutorCore
    from dsh_actors.runtime.wire import Envelope

    async def scenario():
        entered, gate = [], asyncio.Event()

        async def waits(args, ctx):
            entered.append(ctx.call_id)
            await gate.wait()
            return [text_block(ctx.call_id)]

        tool = define_tool(name="waits", description="x", parameters={}, execute=waits)
        core = ExecutorCore("registry", "namespace", calls=2)
        core._plans["plan"] = ExecutionPlan(tools=FrozenDict({"waits": tool}))

        def envelope(call_id):
            return Envelope.of(ToolExecution(call_id=call_id, name="waits", arguments=FrozenDict(), agent=None,
                                           token=ExecutionToken()), plan_id="plan").pack()

        calls = [asyncio.ensure_future(core.execute(envelope(f"c{i}"))) for i in range(3)]
        await asyncio.sleep(0.05)
        full = list(entered)
        sub_call = asyncio.ensure_future(core.execute_here(envelope("sub"), None, None))
        await asyncio.sleep(0.05)
        with_sub_call = list(entered)
        gate.set()
        results = [Outcome.read(raw).value.text for raw in await asyncio.gather(*calls, sub_call)]
        return full, with_sub_call, results

    full, with_sub_call, results = asyncio.run(scenario())
    assert full == ["c0", "c1"]  # the third waits for a slot
    assert with_sub_call == ["c0", "c1", "sub"]  # the sub-call needs no slot of its own
    assert results == ["c0", "c1", "c2", "sub"]


class _Probe:
    """An executor's ``alive`` method: counts probes sent; the test settles their future."""

    def __init__(self):
        self.sent, self.given, self.done = 0, {}, concurrent.futures.Future()

    def options(self, **options):
        self.given = options
        return self

    def remote(self):
        self.sent += 1
        return self

    def future(self):
        return self.done


def _pool_of_one():
    from dsh_actors.runtime.caller.routes import ExecutorRoutes

    class Handle:
        _actor_id = "the-only-executor"
        alive = _Probe()

    class Link:
        incarnation = 1

        async def actor_async(self):
            return None

        async def call(self, method, dead):
            assert method == "executor_nodes" and dead == []
            return [(Handle, None)]

    return ExecutorRoutes(Link()), Handle


class _Id(str):
    def hex(self):
        return str(self)


def test_an_executor_dead_for_good_is_reported_with_the_next_refresh_and_never_picked_again():
    """The registry replaces it before it answers that refresh: the routes the next call
    gets hold its successor (they once refreshed before the replacement and sent the call
    to the dead executor: WORKER_CRASHED for a call that had not been sent)."""
    from dsh_actors.runtime.caller.routes import ExecutorRoutes

    class Executor:
        def __init__(self, name):
            self._actor_id = _Id(name)

    class Registry:
        incarnation = 1

        def __init__(self):
            self.executors, self.reports, self.made = [Executor("first")], [], 1

        async def actor_async(self):
            return None

        async def call(self, method, dead):
            assert method == "executor_nodes"
            self.reports.append(list(dead))
            for index, handle in enumerate(self.executors):
                if handle._actor_id in dead:
                    self.made += 1
                    self.executors[index] = Executor(f"successor-{self.made}")
            return [(handle, None) for handle in self.executors]

    async def scenario():
        registry = Registry()
        routes = ExecutorRoutes(registry)
        first = await routes.pick()
        routes.failed(first, died=True)
        routes.failed(first, died=True)  # two calls met the same death
        await asyncio.sleep(0)
        after = [await routes.pick() for _ in range(3)]
        routes._local, routes._others = [], []  # a later refresh (a new registry incarnation, say)
        await routes.pick()
        return first, after, registry

    first, after, registry = asyncio.run(scenario())
    assert {h._actor_id for h in after} == {"successor-2"} and first._actor_id == "first"
    assert registry.reports == [[], ["first"], []]  # reported once, with the refresh that followed


def test_when_every_executor_is_restarting_calls_wait_for_one_probe_of_it_to_answer():
    async def scenario():
        pool, handle = _pool_of_one()
        assert await pool.pick() is handle and handle.alive.sent == 0  # healthy: no probe
        await asyncio.sleep(0)
        pool.failed(handle, died=False)  # a call just met it dead: Ray is restarting it
        picks = [asyncio.ensure_future(pool.pick()) for _ in range(3)]
        await asyncio.sleep(0.05)
        waiting = [p.done() for p in picks]
        handle.alive.done.set_result("new-incarnation")
        picked = await asyncio.gather(*picks)
        await asyncio.sleep(0)
        turn_over = pool._turn_executor is None  # the turn the waiting picks opened ended with its loop turn
        again = await pool.pick()
        return handle, waiting, picked, turn_over, again

    handle, waiting, picked, turn_over, again = asyncio.run(scenario())
    assert turn_over
    assert waiting == [False] * 3  # nothing is sent to an executor that is restarting ...
    assert picked == [handle] * 3  # ... until it answers again
    assert handle.alive.sent == 1 and handle.alive.given == {"max_task_retries": -1}  # one probe, retried by Ray
    assert again is handle and handle.alive.sent == 1  # answered: no longer avoided


@pytest.mark.parametrize("outcome", ["died for good", "no answer in time"])
def test_a_probe_that_fails_or_never_answers_lets_the_call_go_to_get_its_coded_result(monkeypatch, outcome):
    from dsh_actors.runtime.caller import routes

    monkeypatch.setattr(routes, "REVIVAL_WAIT_S", 0.1)

    async def scenario():
        pool, handle = _pool_of_one()
        await pool.pick()
        pool.failed(handle, died=False)
        if outcome == "died for good":
            handle.alive.done.set_exception(RuntimeError("the actor died"))
        return handle, await asyncio.wait_for(pool.pick(), 5)

    handle, picked = asyncio.run(scenario())
    assert picked is handle and handle.alive.sent == 1


class _Held:
    """What this process's Ray holds of an actor's state (``_get_local_state``): 0 until
    it follows it, then 2 (alive) or 4 (dead for good)."""

    def __init__(self, state=2):
        self.state = state

    def __call__(self):
        return self.state


def test_a_call_is_never_submitted_to_an_executor_this_process_holds_dead():
    """Ray fails such a call unsent, with the error a call that died inside the actor
    gets; the lane fails it as unsent instead, alone or in a batch, and submits nothing."""
    from dsh_actors.runtime.errors import HeldDead, died_for_good, never_reached

    async def scenario():
        executor, lanes = FakeExecutor(), Lanes(asyncio.get_running_loop())
        executor._get_local_state, executor._actor_id = _Held(), _Id("doomed")
        first = lanes.send(executor, b"0.05:first")  # alone: the lane was idle
        executor._get_local_state.state = 4
        alone_and_batched = [lanes.send(executor, f"0:late {i}".encode()) for i in range(5)]
        failures = await asyncio.gather(*alone_and_batched, return_exceptions=True)
        await first
        alone = lanes.send(executor, b"0:after")  # the lane idle again: this one would go alone
        failures.append(*await asyncio.gather(alone, return_exceptions=True))
        return failures, executor.sent

    failures, sent = asyncio.run(scenario())
    assert all(isinstance(f, HeldDead) and never_reached(f) and died_for_good(f) for f in failures), failures
    assert sent == ["execute"]  # only the call made while it lived


def test_an_executor_held_dead_is_reported_at_once_and_a_first_pick_asks_whether_it_lives():
    from dsh_actors.runtime.caller.routes import ExecutorRoutes

    class Executor:
        def __init__(self, name, state):
            self._actor_id = _Id(name)
            self._get_local_state = _Held(state)
            self.alive = _Probe()

    class Registry:
        incarnation = 1

        def __init__(self):
            self.executors, self.reports = [Executor("first", 2)], []

        async def actor_async(self):
            return None

        async def call(self, method, dead):
            self.reports.append(list(dead))
            if dead:  # replaced first; the successor is new to this process (state unknown)
                self.executors = [Executor("successor", 0)]
            return [(handle, None) for handle in self.executors]

    async def scenario():
        registry = Registry()
        routes = ExecutorRoutes(registry)
        first = await routes.pick()
        first._get_local_state.state = 4  # ray.kill: this process's Ray now holds it dead
        same_turn = asyncio.ensure_future(routes.pick())  # the turn's executor too is never reused dead
        await asyncio.sleep(0.01)
        successor = registry.executors[0]
        asked = successor.alive.sent
        successor._get_local_state.state = 2
        successor.alive.done.set_result("incarnation")  # it answers: alive
        return first, await same_turn, successor, asked, registry.reports

    first, picked, successor, asked, reports = asyncio.run(scenario())
    assert picked is successor and first is not successor
    assert reports == [[], ["first"]]  # reported before anything was sent to it
    assert asked == 1  # its first pick in this process asked it once whether it lives
