"""Where a process's spans go, set from its environment: the standard variables resolved as
the specification says, a real OTLP/HTTP receiver getting what a flush sends, and a setup
that cannot work leaving tracing off without raising. Each setup runs in a fresh process
(a tracer provider is set once per process)."""

import os
import subprocess
import sys

import pytest

from dsh_actors.core.trace_export import exporter_names, tracing_variables

T = 60
BARE = {"PATH": "/usr/bin:/bin"}  # a process that knows nothing of this session's environment


def test_otlp_is_the_exporter_of_the_protocol_the_standard_variables_name():
    assert exporter_names({"OTEL_TRACES_EXPORTER": "otlp"}) == ["otlp_proto_http"]  # the specification's default
    assert exporter_names({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == ["otlp_proto_grpc"]
    assert exporter_names({"OTEL_TRACES_EXPORTER": "otlp,console", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
                           "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}) == ["otlp_proto_http", "console"]
    assert exporter_names({"OTEL_TRACES_EXPORTER": "none"}) == exporter_names({}) == []
    with pytest.raises(ValueError, match="'http/json'; an OTLP span exporter speaks http/protobuf or grpc"):
        exporter_names({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})


def test_a_job_hands_its_workers_the_tracing_variables_and_nothing_else():
    environ = {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_HEADERS": "x-team=evals", "DSH_TRACE_CONTENT": "1",
               "DSH_TRACE_FILE": "/tmp/spans.jsonl", "OPENAI_API_KEY": "sk-secret", "DSH_METRICS": "off", "PATH": "/bin"}
    assert tracing_variables(environ) == {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_HEADERS": "x-team=evals",
                                          "DSH_TRACE_CONTENT": "1", "DSH_TRACE_FILE": "/tmp/spans.jsonl"}


FLUSHED = r'''
import os
from dsh_actors.core import telemetry, trace_export
trace_export.configure()
with telemetry.TRACER.start_as_current_span("flushed", attributes={"dsh.test": "yes"}):
    pass
print(trace_export.flush(), os.getpid(), flush=True)
os._exit(0)  # as ray.kill ends an actor: no exit hook runs, only the flush can have sent the span
'''


@pytest.mark.timeout(T)
def test_with_otlp_selected_a_flush_delivers_the_processs_spans_to_the_collector(otlp_receiver):
    # A batch that would wait an hour: what arrives was sent by the flush.
    env = {**BARE, **otlp_receiver.env(), "OTEL_BSP_SCHEDULE_DELAY": "3600000"}
    done = subprocess.run([sys.executable, "-c", FLUSHED], env=env, capture_output=True, text=True, timeout=T - 10)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    flushed, pid = done.stdout.split()
    assert flushed == "True"
    (span,) = otlp_receiver.spans
    assert span.name == "flushed" and span.attributes == {"dsh.test": "yes"} and span.parent_id is None
    assert span.resource["process.pid"] == int(pid) and span.resource["service.instance.id"]
    assert span.resource["telemetry.sdk.language"] == "python"


@pytest.mark.timeout(T)
def test_the_environment_names_a_process_over_what_configure_gives_it(otlp_receiver):
    env = {**BARE, **otlp_receiver.env(), "OTEL_RESOURCE_ATTRIBUTES": "service.instance.id=runner-7,deployment=ci"}
    done = subprocess.run([sys.executable, "-c", FLUSHED], env=env, capture_output=True, text=True, timeout=T - 10)
    assert done.returncode == 0, done.stderr
    (span,) = otlp_receiver.spans
    assert span.resource["service.instance.id"] == "runner-7" and span.resource["deployment"] == "ci"
    assert span.resource["process.pid"] == int(done.stdout.split()[1])


@pytest.mark.timeout(T)
def test_with_the_collector_down_a_flush_says_its_spans_did_not_go_instead_of_waiting_out_the_retries():
    # The exporter retries a refused connection after a pause of a second or more (the SDK's
    # own force_flush waited them all out and answered True): a flush answers at its deadline.
    script = ("from dsh_actors.core import telemetry, trace_export\n"
              "trace_export.configure()\n"
              "with telemetry.TRACER.start_as_current_span('lost'):\n"
              "    pass\n"
              "print(trace_export.flush(0.5), trace_export.flush(0.5), flush=True)\n"
              "import os; os._exit(0)\n")
    env = {**BARE, "OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=T - 10)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]  # the second did not start another behind the stuck one


@pytest.mark.timeout(T)
def test_a_tracing_setup_that_cannot_work_leaves_tracing_off_and_never_raises(tmp_path):
    script = ("from dsh_actors.core import telemetry, trace_export\n"
              "trace_export.configure()\n"
              "print('tracing', telemetry.tracing())\n")
    for env, said in (({"DSH_TRACE_FILE": str(tmp_path / "no" / "such" / "spans.jsonl")}, "No such file"),
                      ({"OTEL_TRACES_EXPORTER": "no-such-exporter"}, "which no installed package provides"),
                      ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
                       "'otlp_proto_grpc', which no installed package provides")):
        done = subprocess.run([sys.executable, "-c", script], env={**BARE, **env}, capture_output=True, text=True,
                              timeout=T)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "tracing False" and said in done.stderr, (done.stdout, done.stderr)
        assert "tracing is off in this process" in done.stderr  # said in the process's log, not raised
