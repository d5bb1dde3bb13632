"""Code Mode on Ray: run_code in a task, sub-calls through pooled queue actors as tasks."""

import asyncio
import os
import re
import signal
import time

import pytest
import ray

from dsh_actors import ReservedNameError, RestrictionError, define_tool, progress_to, text_block
from dsh_actors.codemode.runtime import CodeRuntimeConfig
from dsh_actors.runtime import ToolRegistry
from dsh_actors.runtime.session.client import SessionLog

from .fixtures import ONE_SCOPE_HOST, Recorder, echo, pid_of, wait_gone

T = 120


def connect(prefix, dispatch="queue-actor", **options):
    """A fresh Code Mode registry on the CPython sandbox."""
    return ToolRegistry.connect(f"{prefix}-{time.monotonic_ns()}", mode="code", code_dispatch=dispatch,
                                code_runtime=CodeRuntimeConfig(backend="cpython", compute_ms=5000,
                                                               max_wall_ms=60_000), **options)


@pytest.fixture(scope="module", params=["queue-actor", "in-task"])
def module_code_registry(ray_cluster, request):
    """One Code Mode registry per dispatch for the module (its actors cost seconds to start),
    every agent's scope on one host."""
    registry = connect("code", request.param, executors=1, **ONE_SCOPE_HOST)
    registry.register(echo(execute=lambda a, c: [text_block(f"echo:{a.get('text', '')} pid:{os.getpid()}")])).result(T)
    yield registry
    registry.shutdown()


class _TestsOwnRegistrations:
    """The module's registry as one test sees it: its global registrations are disposed
    when the test ends, so the next test finds only ``echo``."""

    def __init__(self, registry):
        self._registry = registry
        self._made = []

    def register(self, definition):
        response = self._registry.register(definition)
        self._made.append(response)
        return response

    def __getattr__(self, name):
        return getattr(self._registry, name)

    def dispose(self):
        for response in reversed(self._made):
            try:
                disposer = response.result(T)
            except Exception:  # refused (a reserved name): nothing to undo
                continue
            disposer().result(T)


@pytest.fixture
def code_registry(module_code_registry):
    registry = _TestsOwnRegistrations(module_code_registry)
    yield registry
    registry.dispose()
    assert [d.name for d in module_code_registry.visible().result(T)] == ["echo", "run_code"]


def run_code(target, code, call_id="rc"):
    return target.execute(call_id=call_id, name="run_code", arguments={"code": code}).result(T)


def test_a_program_calls_tools_as_sub_calls_in_their_own_tasks(code_registry, tmp_path):
    scope = code_registry.scope("coder")
    session = SessionLog.open("coder", str(tmp_path / "coder.log"))
    session.events().result(T)  # the log actor is up before the run looks for it
    result = run_code(scope, 'a = await tools.echo(text="one")\nprint(a.split()[0])\nreturn await tools.echo(text="two")')
    assert result.text.startswith("echo:one\necho:two pid:") and result.meta == {"logs": ["echo:one"]}
    events = session.events().result(T)
    assert [(e["sub_call_id"], e["name"], e["arguments"], e["is_error"]) for e in events] == [
        ("rc:code:1", "echo", {"text": "one"}, False), ("rc:code:2", "echo", {"text": "two"}, False)]
    assert session.derive_messages().result(T) == []  # dispatch events never surface
    session.close().result(T)
    if code_registry._handle() is not None:
        queues = [q for q, _ in ray.get(code_registry._handle().code_queues.remote(), timeout=T)]
        if queues:  # queue-actor dispatch: the run's queue was released after the run
            assert sum(ray.get([q.runs.remote() for q in queues], timeout=T)) == 0


def test_the_default_backend_on_ray_is_the_cpython_sandbox_and_monty_says_what_it_lacks(ray_cluster):
    registry = ToolRegistry.connect(f"auto-{time.monotonic_ns()}", mode="code", code_runtime=CodeRuntimeConfig(),
                                    executors=1)
    monty = ToolRegistry.connect(f"monty-{time.monotonic_ns()}", mode="code", executors=1,
                                 code_runtime=CodeRuntimeConfig(backend="monty", retry_unsupported=False))
    try:
        for r in (registry, monty):
            r.register(echo()).result(T)
        generator = "def gen():\n    yield 1\nreturn list(gen())"
        assert run_code(registry, generator).text == "[1]"  # what models write runs by default
        assert registry.sdk().result(T).startswith("The language: CPython 3 with its standard library")
        result = run_code(monty.scope("m1"), 'print(await tools.echo(text="a"))\nreturn {"n": 1}')
        assert not result.is_error and result.meta == {"logs": ["a"]} and result.text.endswith("{'n': 1}")
        unsupported = run_code(monty, generator)
        assert unsupported.error["code"] == "CODE_RUN_FAILED" and "this sandbox runs Monty" in unsupported.text
        assert monty.sdk().result(T).startswith("The language: Monty, a subset of Python 3")
    finally:
        registry.shutdown()
        monty.shutdown()


def test_the_reserved_transport_is_protected_on_ray(code_registry):
    assert [d.name for d in code_registry.visible().result(T)] == ["echo", "run_code"]
    scope = code_registry.scope("a1")
    with pytest.raises(ReservedNameError):
        code_registry.register(echo("run_code")).result(T)
    with pytest.raises(ReservedNameError):
        scope.register(echo("run_code")).result(T)
    with pytest.raises(RestrictionError, match="reserved Code Mode presentation transport"):
        scope.restrict(allow=["run_code"]).result(T)
    scope.restrict(allow=[]).result(T)
    assert [d.name for d in scope.visible().result(T)] == ["run_code"]
    assert run_code(scope, "return sorted(dir(tools))").text == "[]"
    assert "def echo" in code_registry.sdk().result(T) and "def echo" not in code_registry.sdk("a1").result(T)


def test_sub_calls_are_serialised_under_gather_and_settlement_aborts_the_in_flight_one(code_registry):
    async def slow(args, ctx):
        await asyncio.sleep(0.2)
        return [text_block(f"{args['text']}@{time.monotonic():.4f}")]

    seen = Recorder.remote()

    async def waits(args, ctx):
        seen.add.remote(await ctx.signal)
        return [text_block("stopped")]

    code_registry.register(echo("slow", execute=slow)).result(T)
    code_registry.register(echo("waits", execute=waits)).result(T)
    result = run_code(code_registry, "import asyncio\nreturn await asyncio.gather(*(tools.slow(text=str(i)) for i in range(3)))")
    stamps = [float(item.split("@")[1]) for item in eval(result.text)]
    assert [item.split("@")[0] for item in eval(result.text)] == ["0", "1", "2"]
    assert stamps[1] - stamps[0] >= 0.19 and stamps[2] - stamps[1] >= 0.19
    failed = run_code(code_registry, "import asyncio\nasyncio.ensure_future(tools.waits())\nawait asyncio.sleep(1)\n"
                                     "raise RuntimeError('gave up')")
    assert failed.error["code"] == "CODE_RUN_FAILED" and "gave up" in failed.text
    deadline = time.monotonic() + 20
    while not ray.get(seen.all.remote(), timeout=T) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ray.get(seen.all.remote(), timeout=T) == ["run_code settled"]


def test_a_registry_in_code_mode_refuses_a_mismatched_connect(code_registry):
    from dsh_actors import DefinitionError

    with pytest.raises(DefinitionError, match='already runs in mode "code"'):
        ToolRegistry.connect(code_registry.name)


def test_prompt_assembly_works_over_the_ray_client(code_registry):
    from dsh_actors.prompt import SystemPrompt

    prompt = SystemPrompt()
    prompt.add_registry(code_registry)
    assembly = asyncio.run(prompt.assemble({"scope": "writer"}))
    assert assembly.tool_names() == ["run_code"]
    assert "async def echo(" in next(s.text for s in assembly.sections if s.name == "tools:sdk")


@pytest.mark.parametrize("kill", ["ray.kill", "SIGKILL"])
def test_a_killed_queue_actor_fails_its_run_with_a_coded_result_and_later_runs_work(ray_cluster, kill):
    registry = connect("queue-kill")
    try:
        started = Recorder.remote()

        async def slow(args, ctx):
            started.add.remote("in")
            await asyncio.sleep(3)
            return [text_block("slow done")]

        registry.register(echo("slow", execute=slow)).result(T)
        registry.register(echo()).result(T)
        queues = [q for q, _ in ray.get(registry._handle().code_queues.remote(), timeout=T)]

        async def scenario():
            run = asyncio.ensure_future(registry.execute(call_id="k", name="run_code", arguments={
                "code": "await tools.slow()\nreturn 'the run outlived its queue'"}))
            deadline = time.monotonic() + 60
            while not await started.all.remote() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            pids = [await queue.__ray_call__.remote(lambda self: os.getpid()) for queue in queues]
            for queue, pid in zip(queues, pids):  # whichever queue holds the run
                if kill == "ray.kill":
                    ray.kill(queue)  # dead for good: the registry must start successors
                else:
                    os.kill(pid, signal.SIGKILL)
            result = await asyncio.wait_for(run, T)
            wait_gone(pids)  # a run sent to a queue still dying may reach it (and die with it)
            return result

        result = asyncio.run(scenario())  # the run died with the queue that hosted it: one coded result
        assert result.is_error and result.error["code"] == "WORKER_CRASHED" and "[WORKER_CRASHED]" in result.text
        assert not re.search(r"[0-9a-f]{24}|pid=|127\.0\.0\.1", result.text)  # no actor id, pid or address
        deadline = time.monotonic() + 60  # Ray restarts SIGKILLed queue actors (slowly on a loaded machine)
        for queue in queues if kill == "SIGKILL" else []:
            while time.monotonic() < deadline:
                try:
                    ray.get(queue.runs.remote(), timeout=5)
                    break
                except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                    time.sleep(0.2)
        for i in range(6):  # runs on every executor, each picking a queue at random
            again = run_code(registry, f'return await tools.echo(text="after {i}")')
            assert again.text == f"after {i}" and not again.is_error
    finally:
        registry.shutdown()


@pytest.mark.parametrize("kill", ["ray.kill", "SIGKILL"])
def test_runs_made_right_after_idle_queues_die_go_to_live_queues_and_each_runs_once(ray_cluster, kill):
    registry = connect("queue-idle")
    try:
        ran = Recorder.remote()

        async def marked(args, ctx):
            await ran.add.remote(args["text"])  # counted outside the queue, before it answers
            return [text_block(args["text"])]

        registry.register(echo(execute=marked)).result(T)
        for i in range(4):  # every executor has streamed a run to its node's queue
            assert run_code(registry, f'return await tools.echo(text="warm {i}")').text == f"warm {i}"
        queues = [q for q, _ in ray.get(registry._handle().code_queues.remote(), timeout=T)]
        pids = [pid_of(queue, T) for queue in queues]
        for queue, pid in zip(queues, pids):  # idle: no run is in any of them
            if kill == "ray.kill":
                ray.kill(queue)
            else:
                os.kill(pid, signal.SIGKILL)
        wait_gone(pids)  # dead, not dying: a run sent now cannot have reached them
        after = [registry.execute(call_id=f"a{i}", name="run_code",
                                  arguments={"code": f'return await tools.echo(text="after {i}")'}) for i in range(6)]
        assert [r.result(T).text for r in after] == [f"after {i}" for i in range(6)]  # none lost, none crashed
        marks = ray.get(ran.all.remote(), timeout=T)
        assert sorted(m for m in marks if m.startswith("after")) == [f"after {i}" for i in range(6)]  # each ran once
    finally:
        registry.shutdown()


def test_in_task_sub_calls_run_on_the_runs_own_executor_without_a_ray_hop(ray_cluster):
    registry = ToolRegistry.connect(f"code-here-{time.monotonic_ns()}", mode="code", executors=2,
                                    code_runtime=CodeRuntimeConfig(backend="cpython", compute_ms=5000,
                                                                   max_wall_ms=60_000))
    try:
        registry.register(echo(execute=lambda a, c: [text_block(str(os.getpid()))])).result(T)
        executors = ray.get(registry._handle().executors.remote(), timeout=T)
        pids = set(ray.get([e.__ray_call__.remote(lambda self: os.getpid()) for e in executors], timeout=T))
        assert len(pids) == 2
        native = {int(registry.execute(call_id=f"n{i}", name="echo", arguments={}).result(T).text) for i in range(4)}
        assert len(native) == 1 and native <= pids  # native calls go to the executor on the driver's node ...
        ran = run_code(registry.scope("here"), "return [await tools.echo() for _ in range(6)]")
        assert len(set(eval(ran.text))) == 1 and {int(p) for p in eval(ran.text)} <= pids  # ... a run's sub-calls stay home
    finally:
        registry.shutdown()


def _children(pid):
    """The pids whose parent is ``pid``, read from /proc (the process's own view is not asked)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as file:
                    stat = file.read()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def test_a_queue_actor_hosts_its_run_the_sandbox_and_the_sub_calls_streamed_from_the_executor(ray_cluster):
    registry = connect("code-queue")
    try:
        registry.register(echo(execute=lambda a, c: [text_block(str(os.getpid()))])).result(T)
        executors = {pid_of(e, T) for e in ray.get(registry._handle().executors.remote(), timeout=T)}
        queues = {pid_of(q, T): q for q, _ in ray.get(registry._handle().code_queues.remote(), timeout=T)}
        ran = [run_code(registry.scope(f"q{i}"), "return [await tools.echo() for _ in range(4)]") for i in range(3)]
        hosts = {int(p) for result in ran for p in eval(result.text)}
        assert len(hosts) == 1 and hosts <= set(queues) and not hosts & executors  # every sub-call in one queue
        host = hosts.pop()
        assert _children(host)  # the sandbox's fork server is the queue's child ...
        assert not any(_children(pid) for pid in executors)  # ... and no executor started one
        served = ray.get(queues[host].__ray_call__.remote(lambda self: self._channel.served), timeout=T)
        assert served >= 2  # the runs came over the queue's channel (the first may go as an actor task)
        assert sum(ray.get([q.runs.remote() for q in queues.values()], timeout=T)) == 0  # nothing kept after
    finally:
        registry.shutdown()


def test_the_callers_abort_reaches_the_in_flight_sub_call_and_deferred_context_comes_back(code_registry):
    from dsh_actors.core.signal import AbortController

    seen = Recorder.remote()
    context = {"content": "from the sub-call", "source": {"kind": "plugin", "plugin": "probe"}}

    async def waits(args, ctx):
        seen.add.remote("started")
        seen.add.remote(await ctx.signal)
        return [text_block("stopped")]

    def defers(args, ctx):
        ctx.defer_context(context)
        return [text_block("deferred")]

    code_registry.register(echo("waits", execute=waits)).result(T)
    code_registry.register(echo("defers", execute=defers)).result(T)
    result = run_code(code_registry, "return await tools.defers()")
    assert result.text == "deferred" and list(result.additional_context) == [context]

    async def aborted():
        controller = AbortController()
        call = asyncio.ensure_future(code_registry.execute(
            call_id="ab", name="run_code", arguments={"code": "await tools.waits()\nreturn 'not aborted'"},
            signal=controller.signal))
        deadline = time.monotonic() + 60
        while "started" not in await seen.all.remote() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        controller.abort("the caller gave up")
        return await asyncio.wait_for(call, T)

    asyncio.run(aborted())
    deadline = time.monotonic() + 20
    while len(ray.get(seen.all.remote(), timeout=T)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ray.get(seen.all.remote(), timeout=T) == ["started", "the caller gave up"]


def test_a_sub_calls_progress_reaches_the_caller_that_listens_for_its_run(code_registry):
    """A tool a program calls reports its progress: the caller that listens for the run_code
    call hears each report, in order (with either dispatch, wherever the sub-call ran); a
    caller that does not listen gets the run's result alone."""
    async def steps(args, ctx):
        heard_by_body = [ctx.report_progress(1, 2, "one"), ctx.report_progress(2, 2)]
        return [text_block(f"stepped {heard_by_body}")]

    code_registry.register(define_tool(name="steps", description="reports", parameters={}, execute=steps)).result(T)
    heard = []

    async def call(listen):
        scope = code_registry.scope("stepper")
        if not listen:
            return await scope.execute(call_id="quiet", name="run_code", arguments={"code": "return await tools.steps()"})
        with progress_to(lambda *report: heard.append(report)):
            response = scope.execute(call_id="heard", name="run_code", arguments={"code": "return await tools.steps()"})
        return await response

    result = asyncio.run(call(listen=True))
    assert not result.is_error and "stepped [True, True]" in result.text, result
    assert heard == [(1.0, 2.0, "one"), (2.0, 2.0, None)]
    quiet = asyncio.run(call(listen=False))
    assert not quiet.is_error and "stepped [False, False]" in quiet.text, quiet
    assert len(heard) == 2
