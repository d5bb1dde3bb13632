"""The call path on uvloop, as a job of its own gets it: Ray runs async actors on uvloop
wherever it is installed (the `serve` extra brings it). The session's own cluster runs its
actors on asyncio's loop (tests/conftest.py: the test meters time asyncio's loop steps), so
this test joins it as a separate driver whose job's workers are on uvloop, and counts from the
actors themselves what went over their channels — a channel that cannot open leaves every
call on actor tasks, which answer as well and cost three times as much."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(240)

DRIVER = r'''
import asyncio, json, os, sys, time
import ray
from dsh_actors import ToolRegistry, define_tool, text_block
from dsh_actors.codemode.runtime import CodeRuntimeConfig

# Ray's default where uvloop is installed; the session's raylets were started without it.
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False,
         runtime_env={"env_vars": {"RAY_USE_UVLOOP": "1"}})
echo = define_tool(name="echo", description="echo", parameters={}, execute=lambda a, c: [text_block(str(os.getpid()))])
native = ToolRegistry.connect(f"uvloop-native-{time.monotonic_ns()}", executors=2)
code = ToolRegistry.connect(f"uvloop-code-{time.monotonic_ns()}", mode="code", code_dispatch="queue-actor",
                            code_runtime=CodeRuntimeConfig(backend="cpython", compute_ms=5000, max_wall_ms=60_000))

def loop_and_served(handle):
    """The actor's loop's module (None: its channel never opened) and the calls its channel served."""
    def ask(self):
        server = self._channel._server
        return (type(server.get_loop()).__module__ if server is not None else None, self._channel.served)
    return ray.get(handle.__ray_call__.remote(ask), timeout=60)

async def calls(registry, n, name="echo", arguments=None):
    return await asyncio.gather(*[registry.execute(call_id=f"c{i}", name=name, arguments=arguments or {})
                                  for i in range(n)])

try:
    native.register(echo).result(60)
    code.register(echo).result(60)
    async def streamed():
        await calls(native, 1)  # the lane asks for the channel meanwhile (its loop's own)
        await asyncio.sleep(0.5)
        return await calls(native, 200)
    results = asyncio.run(streamed())
    node = ray.get_runtime_context().get_node_id()
    here = [h for h, at in ray.get(native._handle().executor_nodes.remote(), timeout=60) if at == node]
    program = {"code": "return [await tools.echo() for _ in range(3)]"}
    runs = [code.execute(call_id=f"r{i}", name="run_code", arguments=program).result(60) for i in range(3)]
    queues = [q for q, _ in ray.get(code._handle().code_queues.remote(), timeout=60)]
    print(json.dumps({"errors": sum(r.is_error for r in results + runs),
                      "executor": loop_and_served(here[0]),
                      "queues": [loop_and_served(q) for q in queues]}))
finally:
    native.shutdown()
    code.shutdown()
'''


def test_calls_and_code_mode_runs_stream_over_channels_when_actors_run_on_uvloop(cluster_env):
    pytest.importorskip("uvloop")
    done = subprocess.run([sys.executable, "-c", DRIVER, cluster_env["RAY_ADDRESS"]], env=cluster_env,
                          capture_output=True, text=True, timeout=200)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["errors"] == 0
    loop, served = seen["executor"]
    assert loop.startswith("uvloop") and served >= 200  # every call since the channel opened
    assert any(loop for loop, _ in seen["queues"]) and all(loop.startswith("uvloop") for loop, _ in seen["queues"] if loop)
    assert sum(served for _, served in seen["queues"]) >= 2  # runs came over a queue's channel
