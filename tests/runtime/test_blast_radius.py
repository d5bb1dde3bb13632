"""One agent's fault stays inside it, on Ray: an attacker's programs and bodies against an
executor that every other agent's calls share.

One executor serves six agents. Agent 0 sends the attacks of ``tests/codemode`` (floods,
huge values and arguments, forged frames, process-control exceptions from bodies); the
other five run ordinary programs and native calls at the same time. Asserted from outside
the executor: every ordinary call's result, the executor's RSS sampled from ``/proc``, how
long its event loops were stalled (work done in one piece there stalls every agent) measured
in two ways that, unlike a heartbeat's round trip, do not grow with the machine's load: the
CPU time of the longest single step, and the longest time a loop's thread sat in one system
call other than its wait for work, sampled from ``/proc`` (a step that blocks without CPU),
and the executor's pid (the same process serves throughout).
"""

import asyncio
import os
import threading
import time

import pytest
import ray

from dsh_actors import define_tool, text_block
from dsh_actors.codemode.contract import CodeRuntimeConfig
from dsh_actors.runtime import ToolRegistry

from ..codemode.watch import SyscallStalls, rss_bytes

T = 120
MB = 1 << 20

ATTACKS = [
    "while True:\n    print('x' * 1000)",                                        # a log flood
    "return list(range(3_000_000))",                                           # millions of items back
    "line = 'z' * (16 << 20)\nprint(line)\nreturn 'printed'",                  # one 16 MB line
    "big = 'a' * (40 << 20)\ntry:\n    await tools.echo(text=big)\nexcept RuntimeError as e:\n    return str(e)",
    ("import os, sys, struct, msgpack\nbody = msgpack.packb({'t': 'noise'})\nchunk = (struct.pack('>I', len(body))"
     " + body) * 4096\nfd = sys.modules['_child']._out[0]\nwhile True:\n    os.write(fd, chunk)"),  # tiny frames
    "return 10 ** 5000",
    "import asyncio\nawait asyncio.gather(*[tools.echo(text='g' * 200_000) for _ in range(300)])",
]


def interrupting(args, ctx):
    raise KeyboardInterrupt("from a plain body")


async def exiting(args, ctx):
    raise SystemExit(3)


@pytest.fixture(scope="module")
def shared_executor(ray_cluster):
    registry = ToolRegistry.connect(
        f"blast-{os.getpid()}-{time.monotonic_ns()}", mode="both", executors=1,
        code_runtime=CodeRuntimeConfig(compute_ms=2000, max_wall_ms=30_000, max_log_bytes=4096, max_value_bytes=4096,
                                       max_memory_mb=256))
    registry.register(define_tool(name="echo", description="echo", parameters={"text": {"type": "string"}},
                                  execute=lambda a, c: [text_block(f"echo:{len(a.get('text', ''))}")])).result(T)
    registry.register(define_tool(name="pid", description="pid", parameters={},
                                  execute=lambda a, c: [text_block(str(os.getpid()))])).result(T)
    for name, body in (("interrupt", interrupting), ("exit", exiting)):
        registry.register(define_tool(name=name, description=name, parameters={}, execute=body)).result(T)
    yield registry
    registry.shutdown()


class LoopMeter:
    """Installed in ``executor``: from then on it keeps the CPU time of the longest step any
    event loop of its process took (an asyncio callback: a task's step between two awaits),
    and the ids of the threads that ran those loops."""

    def __init__(self, executor):
        def install(self):
            import asyncio
            import threading
            import time

            worst, loops, run = [0.0], set(), asyncio.events.Handle._run

            def metered(handle):
                loops.add(threading.get_native_id())
                started = time.thread_time()
                try:
                    return run(handle)
                finally:
                    worst[0] = max(worst[0], time.thread_time() - started)

            asyncio.events.Handle._run = metered
            self._loop_meter = worst, loops

        self._executor = executor
        ray.get(executor.__ray_call__.remote(install), timeout=T)

    def read(self):
        """``(longest step's CPU seconds, the loops' thread ids)``."""
        worst, loops = ray.get(self._executor.__ray_call__.remote(lambda self: self._loop_meter), timeout=T)
        return worst[0], sorted(loops)


@pytest.mark.timeout(300)
def test_an_attacking_agent_leaves_every_other_agents_calls_their_results(shared_executor):
    registry = shared_executor
    executor_pid = int(registry.execute(call_id="p0", name="pid", arguments={}).result(T).text)
    [executor] = ray.get(registry._handle().executors.remote(), timeout=T)
    meter = LoopMeter(executor)
    registry.execute(call_id="p-loops", name="pid", arguments={}).result(T)  # its loops have run a step
    stalls = SyscallStalls(executor_pid, meter.read()[1])
    baseline = rss_bytes(executor_pid)
    peak, stop = [baseline], threading.Event()

    def sample():
        while not stop.is_set():
            try:
                peak[0] = max(peak[0], rss_bytes(executor_pid))
            except OSError:
                pass
            stalls.sample()
            time.sleep(0.01)

    ordinary = "total = 0\nfor i in range(4):\n    total += int((await tools.echo(text='x' * i)).split(':')[1])\nreturn total"

    async def attacker():
        scope = registry.scope("attacker")
        results = []
        for n, program in enumerate(ATTACKS):
            results.append(await scope.execute(call_id=f"a{n}", name="run_code", arguments={"code": program}))
        for name in ("interrupt", "exit"):
            results.append(await scope.execute(call_id=f"b-{name}", name=name, arguments={}))
        return results

    async def agent(k):
        scope = registry.scope(f"agent-{k}")
        answers = []
        for n in range(6):
            code = await scope.execute(call_id=f"c{k}-{n}", name="run_code", arguments={"code": ordinary})
            native = await scope.execute(call_id=f"n{k}-{n}", name="echo", arguments={"text": "abc"})
            answers.append((code.text, native.text))
        return answers

    async def scenario():
        attacks = asyncio.ensure_future(attacker())
        agents = await asyncio.wait_for(asyncio.gather(*[agent(k) for k in range(1, 6)]), 240)
        return await asyncio.wait_for(attacks, 240), agents

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        attacked, agents = asyncio.run(scenario())
    finally:
        stop.set()
        sampler.join()
    for answers in agents:
        assert answers == [("6", "echo:3")] * 6, answers
    assert all(r.is_error or r.text for r in attacked)  # one result each, whatever the attack did
    assert attacked[-2].error["code"] == attacked[-1].error["code"] == "PROCESS_CONTROL"
    step, _ = meter.read()
    print(f"executor RSS growth {(peak[0] - baseline) / MB:.0f} MB, longest loop step {step * 1000:.0f} ms of CPU, "
          f"longest in one system call {stalls.longest_s * 1000:.0f} ms (call {stalls.longest_call})")
    assert peak[0] - baseline < 400 * MB, (peak[0] - baseline) / MB
    assert step < 0.5, step  # (about 0.1 s here) no attack's host work ran in one piece on a loop the other agents share
    assert stalls.longest_s < 0.5, (stalls.longest_s, stalls.longest_call)  # nor did a loop block waiting
    after = registry.execute(call_id="p1", name="pid", arguments={}).result(T)
    assert int(after.text) == executor_pid  # the same process served it all
