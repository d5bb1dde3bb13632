"""One agent's fault stays inside it, on Ray: an attacker's programs and bodies against an
executor that every other agent's calls share.

One executor serves six agents; their programs run on it (in-task dispatch) or in the
Code Mode queue actor of its node (queue-actor dispatch). Agent 0 sends the attacks of
``tests/codemode`` (floods, huge values and arguments, forged frames, process-control
exceptions from bodies); the other five run ordinary programs and native calls at the same
time. Asserted from outside each process that hosts every agent's work: every ordinary
call's result, its RSS sampled from ``/proc``, how long its event loops were stalled (work
done in one piece there stalls every agent) measured in two ways that, unlike a heartbeat's
round trip, do not grow with the machine's load: the CPU time of the longest single step,
and the longest time a loop's thread sat in one system call other than its wait for work,
sampled from ``/proc`` (a step that blocks without CPU), and that the same process serves
throughout.
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
from .fixtures import pid_of, process_alive

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


@pytest.fixture(scope="module", params=["in-task", "queue-actor"])
def shared_executor(ray_cluster, request):
    """A registry with one executor; with ``queue-actor`` dispatch, runs are hosted by the
    Code Mode queue actor on the run's node, which every agent's runs there share."""
    registry = ToolRegistry.connect(
        f"blast-{os.getpid()}-{time.monotonic_ns()}", mode="both", executors=1, code_dispatch=request.param,
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


class WatchedHost:
    """A process that hosts every agent's work (the executor, a Code Mode queue), watched
    from outside: its peak RSS, its loops' longest step of CPU, its loops' longest stall
    in a system call, and its pid."""

    def __init__(self, handle):
        self.pid = pid_of(handle, T)
        self.meter = LoopMeter(handle)
        loops = self.meter.read()[1]  # the read itself is a step of the actor's loop
        assert loops, "the meter saw no loop run a step"
        self.stalls = SyscallStalls(self.pid, loops)
        self.baseline = self.peak = rss_bytes(self.pid)

    def sample(self):
        try:
            self.peak = max(self.peak, rss_bytes(self.pid))
        except OSError:
            pass
        self.stalls.sample()

    def check(self, name):
        step, _ = self.meter.read()
        stalled = self.stalls.longest_s
        print(f"{name}: RSS growth {(self.peak - self.baseline) / MB:.0f} MB, longest loop step {step * 1000:.0f} ms "
              f"of CPU, longest in one system call {stalled * 1000:.0f} ms")
        assert self.peak - self.baseline < 400 * MB, (name, (self.peak - self.baseline) / MB)
        assert step < 0.5, (name, step)  # (about 0.1 s here) no attack's host work ran in one piece on a shared loop
        assert stalled < 0.5, (name, stalled, self.stalls.longest_call)  # nor did a loop block waiting
        assert process_alive(self.pid)  # the same process served it all


@pytest.mark.timeout(300)
def test_an_attacking_agent_leaves_every_other_agents_calls_their_results(shared_executor):
    registry = shared_executor
    [executor] = ray.get(registry._handle().executors.remote(), timeout=T)
    queues = [queue for queue, _ in ray.get(registry._handle().code_queues.remote(), timeout=T)]
    hosts = {"executor": WatchedHost(executor), **{f"queue {n}": WatchedHost(q) for n, q in enumerate(queues)}}
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            for host in hosts.values():
                host.sample()
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
    for name, host in hosts.items():
        host.check(name)
    after = registry.execute(call_id="p1", name="pid", arguments={}).result(T)
    assert int(after.text) == hosts["executor"].pid
