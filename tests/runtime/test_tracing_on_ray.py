"""One trace across the actor hops: a call made in a driver, run on an executor, its body in
a Ray task or a Code Mode sub-call in a queue actor — asserted from the spans every process
appended to one file (DSH_TRACE_FILE), and the same spans received over OTLP (each process
flushed before it ended). The driver joins the session's cluster with the variables in its
environment alone: its job hands them to its workers."""

import json
import os
import subprocess
import sys

import pytest

T = 240

DRIVER = r'''
import os, sys, time
from dsh_actors.runtime.local import ensure_ray
ensure_ray(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
from dsh_actors import define_tool, text_block
from dsh_actors.codemode.runtime import CodeRuntimeConfig
from dsh_actors.core import telemetry, trace_export
from dsh_actors.runtime import ToolRegistry

trace_export.configure()
echo = define_tool(name="echo", description="echo", parameters={"text": {"type": "string"}},
                   execute=lambda a, c: [text_block(a.get("text", ""))])
heavy = define_tool(name="heavy", description="runs in a task of its own", parameters={},
                    execute=lambda a, c: [text_block(str(os.getpid()))], extras={"ray_options": {"num_cpus": 0}})
registry = ToolRegistry.connect(f"traced-{time.monotonic_ns()}", mode="both", code_dispatch="queue-actor",
                                code_runtime=CodeRuntimeConfig(backend="cpython", compute_ms=5000, max_wall_ms=60000))
try:
    registry.register(echo).result(120)
    registry.register(heavy).result(120)
    scope = registry.scope("tracer")
    with telemetry.TRACER.start_as_current_span("driver") as root:
        assert not scope.execute(call_id="n1", name="echo", arguments={"text": "native"}).result(120).is_error
        assert not scope.execute(call_id="h1", name="heavy", arguments={}).result(120).is_error
        code = scope.execute(call_id="rc1", name="run_code",
                             arguments={"code": 'return await tools.echo(text="inside")'}).result(120)
        assert not code.is_error, code
        denied = scope.execute(call_id="x1", name="nope", arguments={}).result(120)
        assert denied.is_error
    print("TRACE", format(root.get_span_context().trace_id, "032x"), flush=True)
finally:
    registry.shutdown()  # its executors and queues flush first
    trace_export.flush()
'''


@pytest.mark.timeout(T)
def test_a_driver_call_its_executor_its_body_task_and_a_code_mode_sub_call_are_one_trace(ray_cluster, tmp_path,
                                                                                        otlp_receiver):
    path = tmp_path / "spans.jsonl"
    # OTLP batches held for an hour: what arrives was flushed before its process ended.
    env = {**os.environ, **otlp_receiver.env(), "OTEL_BSP_SCHEDULE_DELAY": "3600000", "DSH_TRACE_FILE": str(path)}
    done = subprocess.run([sys.executable, "-c", DRIVER, ray_cluster["cluster"].address], env=env,
                          capture_output=True, text=True, timeout=T - 30)
    assert done.returncode == 0, done.stderr[-3000:]
    trace_id = done.stdout.split("TRACE ")[1].split()[0]
    spans = [json.loads(line) for line in path.read_text().splitlines()]
    ours = [s for s in spans if s["trace_id"] == trace_id]
    received = {s.span_id: s for s in otlp_receiver.spans if s.trace_id == trace_id}
    assert set(received) == {s["span_id"] for s in ours}  # every span of every process, over OTLP too
    assert all(received[s["span_id"]].resource["process.pid"] == s["pid"] for s in ours)
    by_id = {s["span_id"]: s for s in ours}

    def parent(span):
        return by_id.get(span["parent_id"])

    def named(name, **attributes):
        found = [s for s in ours if s["name"] == name and all(s["attributes"].get(k) == v for k, v in attributes.items())]
        assert len(found) == 1, (name, attributes, [s["name"] for s in ours])
        return found[0]

    root = named("driver")
    native = named("execute_tool echo", **{"gen_ai.tool.call.id": "n1"})
    assert parent(native) is root and native["pid"] != root["pid"]  # run on an executor, a child of the driver's span
    assert {s["name"] for s in ours if parent(s) is native} == {"pre_execute", "dispatch", "post_execute"}
    heavy = named("execute_tool heavy")
    body = named("tool body heavy")
    assert parent(parent(body)) is heavy and parent(body)["name"] == "dispatch"
    assert body["pid"] not in (heavy["pid"], root["pid"])  # the body ran in a task of its own
    run_code = named("execute_tool run_code")
    sub = [s for s in ours if s["name"] == "execute_tool echo" and s["attributes"].get("gen_ai.tool.call.id") != "n1"]
    assert len(sub) == 1 and parent(sub[0]) is run_code  # a sub-call's parent is its run_code span
    assert sub[0]["pid"] != run_code["pid"]  # run in the Code Mode queue that hosted the program
    missing = named("execute_tool nope")
    assert missing["attributes"]["error.type"] == "UNKNOWN_TOOL" and missing["status"] == "ERROR"
    assert all(s["attributes"].get("dsh.agent") == "tracer" for s in ours if s["name"].startswith("execute_tool"))


CARRIER = r'''
import json, os, sys
import ray
from dsh_actors.runtime.local import ensure_ray
ensure_ray(address=sys.argv[1], logging_level="ERROR", log_to_driver=False,
           runtime_env={"env_vars": {"OTEL_SERVICE_NAME": "the-operators"}})
names = ("OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME", "DSH_TRACE_CONTENT", "DSH_TEST_NOT_TRACING")
seen = ray.remote(num_cpus=0)(lambda: {name: os.environ.get(name) for name in names})
print(json.dumps(ray.get(seen.remote(), timeout=120)))
'''


@pytest.mark.timeout(T)
def test_a_driver_hands_its_workers_its_tracing_variables_alone_and_a_runtime_env_it_is_given_wins(ray_cluster):
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "none", "OTEL_SERVICE_NAME": "the-shells", "DSH_TRACE_CONTENT": "1",
           "DSH_TEST_NOT_TRACING": "a secret"}
    done = subprocess.run([sys.executable, "-c", CARRIER, ray_cluster["cluster"].address], env=env,
                          capture_output=True, text=True, timeout=T - 30)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.splitlines()[-1]) == {"OTEL_TRACES_EXPORTER": "none", "OTEL_SERVICE_NAME": "the-operators",
                                                        "DSH_TRACE_CONTENT": "1", "DSH_TEST_NOT_TRACING": None}
