"""The fleet's metrics on Ray's metrics endpoint: calls by tool, outcome and code, their
latency, denials by stage, sandbox runs, model requests and tokens, episodes by status —
scraped from every node's endpoint and parsed with Prometheus's own text parser."""

import asyncio
import time
import urllib.request

import pytest
import ray
from prometheus_client.parser import text_string_to_metric_families

from dsh_actors import deny
from dsh_actors.agent import ModelConfig
from dsh_actors.agent.scripted import ScriptedServer, reply
from dsh_actors.codemode.runtime import CodeRuntimeConfig
from dsh_actors.eval.job import run_episodes
from dsh_actors.runtime import ToolRegistry

from .fixtures import echo

T = 240


def scrape():
    """Every sample of every alive node's endpoint: {(name, labels without Ray's): value}."""
    samples = {}
    for node in ray.nodes():
        if not node.get("Alive") or not node.get("MetricsExportPort"):
            continue
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{node['MetricsExportPort']}/metrics", timeout=10).read()
        except OSError:
            continue
        for family in text_string_to_metric_families(text.decode()):
            for sample in family.samples:
                if sample.name.startswith("ray_dsh_"):
                    labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k[0].islower()
                                          and not k.startswith("otel_")))
                    samples[(sample.name, labels)] = samples.get((sample.name, labels), 0.0) + sample.value
    return samples


def value(samples, name, **labels):
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= set(ls))


def until(ready, seconds=90):
    """Scrape until ``ready(samples)``: a process's series are on the endpoint while it lives
    (Ray exports every few seconds; ours flush every second)."""
    deadline = time.monotonic() + seconds
    while True:
        samples = scrape()
        if ready(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(2)


@pytest.mark.timeout(T)
def test_the_fleets_metrics_are_on_rays_endpoint_with_low_cardinality_labels(ray_cluster, tmp_path):
    registry = ToolRegistry.connect(f"metered-{time.monotonic_ns()}", mode="both",
                                    code_runtime=CodeRuntimeConfig(backend="cpython", compute_ms=5000,
                                                                   max_wall_ms=60_000))
    try:
        registry.register(echo(name="metered_echo")).result(T)
        registry.on("tools/pre-execute", lambda e, call_next: deny("not this one") if e.arguments.get(
            "text") == "forbidden" else call_next()).result(T)
        scope = registry.scope("metered-agent")
        for i in range(5):
            assert not scope.execute(call_id=f"m{i}", name="metered_echo", arguments={"text": "x"}).result(T).is_error
        assert scope.execute(call_id="d1", name="metered_echo", arguments={"text": "forbidden"}).result(T).is_error
        assert scope.execute(call_id="u1", name="metered_nope", arguments={}).result(T).is_error
        code = scope.execute(call_id="rc", name="run_code", arguments={"code": "return 6 * 7"}).result(T)
        assert code.text == "42", code
        # The job runs while the registry lives: one wait for Ray's export covers both.
        with ScriptedServer([reply("done")] * 4) as server:
            async def job():
                stream = run_episodes([{"id": "metered-task", "task": "Say done."}], in_flight=1,
                                      out=tmp_path / "out",
                                      model=ModelConfig(model="metered-model", base_url=server.base_url))
                report = await stream.__anext__()
                try:  # the job's runners live until the stream ends: scrape while they do
                    return report, await asyncio.to_thread(until, lambda s: value(
                        s, "ray_dsh_tool_calls_total", tool="metered_echo") >= 6
                        and value(s, "ray_dsh_tool_calls_total", tool="metered_nope") >= 1
                        and value(s, "ray_dsh_sandbox_runs_total", backend="cpython") >= 1
                        and value(s, "ray_dsh_model_requests_total", model="metered-model") >= 1
                        and value(s, "ray_dsh_model_request_ms_count", model="metered-model") >= 1
                        and value(s, "ray_dsh_episodes_total", status="ok") >= 1)
                finally:
                    await stream.aclose()
            report, samples = asyncio.run(job())
    finally:
        registry.shutdown()
    assert report.status == "ok"
    assert value(samples, "ray_dsh_tool_calls_total", tool="metered_echo", outcome="ok", code="") >= 5
    assert value(samples, "ray_dsh_tool_calls_total", tool="metered_echo", outcome="denied") >= 1
    assert value(samples, "ray_dsh_tool_calls_total", tool="metered_nope", outcome="error", code="UNKNOWN_TOOL") >= 1
    assert value(samples, "ray_dsh_tool_call_ms_count", tool="metered_echo") >= 6
    assert value(samples, "ray_dsh_policy_denials_total", stage="pre_execute", kind="deny", tool="metered_echo") >= 1
    assert value(samples, "ray_dsh_sandbox_runs_total", backend="cpython", outcome="ok") >= 1
    assert value(samples, "ray_dsh_model_requests_total", model="metered-model", outcome="ok") >= 1
    assert value(samples, "ray_dsh_model_tokens_total", model="metered-model", kind="completion") >= 1
    assert value(samples, "ray_dsh_model_request_ms_count", model="metered-model") >= 1
    assert value(samples, "ray_dsh_episodes_total", status="ok", stop="final") >= 1  # the runner's, counted as it ended
    # Low cardinality: no label carries a call id, an agent id or an episode id.
    for _, labels in samples:
        for _, label in labels:
            assert label not in ("m0", "d1", "rc", "metered-agent", "metered-task"), labels
