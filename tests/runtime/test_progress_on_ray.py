"""Progress from bodies that run off the caller's process: in an executor actor (a coroutine
or a plain body on its threads) or in a Ray task of its own. Each report reaches the sink
the caller set while the body still runs; a caller that set none gets the result alone."""

import asyncio
import os
import time

import pytest

from dsh_actors import define_tool, text_block
from dsh_actors import progress_to

from .fixtures import shares_one_host_registry

pytestmark = [shares_one_host_registry, pytest.mark.timeout(180)]

T = 60
TOOLS = {"async-body": {}, "plain-body": {}, "own-task": {"ray_options": {"num_cpus": 0}}}


def _wait_for(path: str) -> bool:
    deadline = time.monotonic() + 20
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _answer(heard: list, saw: bool) -> list:
    return [text_block(f"{os.getpid()} heard={heard} saw_first_heard={saw}")]


async def async_body(args, ctx):
    heard = [ctx.report_progress(1, 2, "half")]
    saw = await asyncio.to_thread(_wait_for, args["heard_file"]) if heard[0] else False
    heard.append(ctx.report_progress(2, 2))
    return _answer(heard, saw)


def plain_body(args, ctx):
    heard = [ctx.report_progress(1, 2, "half")]
    saw = _wait_for(args["heard_file"]) if heard[0] else False
    heard.append(ctx.report_progress(2, 2))
    return _answer(heard, saw)


def reporting_tool(name):
    body = async_body if name == "async-body" else plain_body
    return define_tool(name=name, description="reports its progress", execute=body,
                       parameters={"heard_file": {"type": "string"}}, extras=TOOLS[name])


def run(registry, name, tmp_path, listen):
    heard_file = str(tmp_path / f"{name}-{listen}")
    heard = []

    def sink(progress, total, message):
        heard.append((progress, total, message))
        open(heard_file, "w").close()  # the body waits for this: a report arrives while it runs

    async def call():
        scope, arguments = registry.scope("reporter"), {"heard_file": heard_file}
        if not listen:
            return await scope.execute(call_id=f"p-{name}", name=name, arguments=arguments)
        with progress_to(sink):  # (a call is sent as it is made: the sink must be set by then)
            response = scope.execute(call_id=f"p-{name}", name=name, arguments=arguments)
        return await response

    result = asyncio.run(call())
    assert not result.is_error, result
    pid, *rest = result.text.split(" ", 1)
    return int(pid), rest[0], heard


def test_reports_from_an_executor_and_from_a_bodys_own_task_reach_their_caller_while_it_runs(registry, tmp_path):
    for name in TOOLS:
        registry.register(reporting_tool(name)).result(T)
    pids = {}
    for name in TOOLS:
        pids[name], said, heard = run(registry, name, tmp_path, listen=True)
        assert heard == [(1.0, 2.0, "half"), (2.0, 2.0, None)], name
        assert said == "heard=[True, True] saw_first_heard=True", name
    assert os.getpid() not in pids.values()  # none ran in this process
    assert pids["async-body"] == pids["plain-body"]  # the executor actor
    assert pids["own-task"] != pids["async-body"]  # a task of its own


def test_a_caller_that_does_not_listen_gets_the_result_alone(registry, tmp_path):
    for name in TOOLS:
        registry.register(reporting_tool(name)).result(T)
    for name in TOOLS:
        _, said, heard = run(registry, name, tmp_path, listen=False)
        assert heard == [] and said == "heard=[False, False] saw_first_heard=False", name


@pytest.mark.parametrize("where", ["executor", "own task"])
def test_a_listening_call_cancelled_by_its_caller_stops_its_body(registry, tmp_path, where):
    """A call sent as a stream is cancelled like any other: one cancelled result, and its
    body (here one that reports, then sleeps 4 s) sees the cancellation and never finishes.
    In a task of its own, Ray interrupts the task twice (the caller's cancel and its actor
    task's recursive one): the second interrupt once cut the first one's cleanup short."""
    marks = tmp_path

    async def slow(args, ctx):
        ctx.report_progress(1)
        try:
            await asyncio.sleep(4)
        except asyncio.CancelledError:
            open(f"{args['marks']}/cancelled", "w").close()
            raise
        open(f"{args['marks']}/finished", "w").close()
        return [text_block("finished")]

    registry.register(define_tool(name="slow", description="slow", execute=slow,
                                  parameters={"marks": {"type": "string"}},
                                  extras=TOOLS["own-task" if where == "own task" else "async-body"])).result(T)
    heard = []

    async def call():
        with progress_to(lambda *report: heard.append(report)):
            response = registry.scope("reporter").execute(call_id="slow", name="slow", arguments={"marks": str(marks)})
        task = asyncio.ensure_future(response)
        deadline = time.monotonic() + 30
        while not heard and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        response.cancel()
        return await asyncio.wait_for(task, T)

    result = asyncio.run(call())
    cancelled = time.monotonic()
    assert heard == [(1.0, None, None)]
    assert result.is_error and result.error["code"] == "CANCELLED", result
    time.sleep(max(0.0, cancelled + 5 - time.monotonic()))  # past the body's 4 s
    assert not (marks / "finished").exists() and (marks / "cancelled").exists()


def test_interrupts_within_a_reporting_task_are_noted_not_raised_and_raise_again_after():
    """What a reporting body task does with Ray's cancel (an interrupt of its main thread):
    within the block, any number of interrupts only set the event; after it, they raise."""
    import _thread

    from dsh_actors.runtime.executor.executor import _interrupts_noted

    with _interrupts_noted() as interrupted:
        for _ in range(3):
            _thread.interrupt_main()
            time.sleep(0.01)  # (the interrupt is handled at the next step of this thread)
        assert interrupted.is_set()
    with pytest.raises(KeyboardInterrupt):
        _thread.interrupt_main()
        time.sleep(1)
