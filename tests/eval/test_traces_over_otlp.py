"""`dsh-actors eval` with only the standard OTEL_* variables set, against a real OTLP/HTTP
receiver on loopback: the shipped examples on a Ray of the CLI's own, and what arrived
checked against the run's own summary and reports. (Before: zero spans arrived.)"""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.runs_long

T = 300


@pytest.mark.timeout(T)
def test_the_examples_send_one_trace_per_episode_and_one_span_per_call_from_their_processes(otlp_receiver, tmp_path):
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "DSH_TRACE_")) and k != "RAY_ADDRESS"}
    # Batches held for an hour: every span that arrives was flushed before its process ended.
    env.update(otlp_receiver.env(), OTEL_BSP_SCHEDULE_DELAY="3600000")
    done = subprocess.run([sys.executable, "-m", "dsh_actors", "eval", "--out", str(out), "--quiet"], env=env,
                          capture_output=True, text=True, timeout=T - 60)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    reports = [json.loads((out / "reports" / f"{e['id']}.json").read_text()) for e in summary["per_episode"]]
    assert summary["episodes_ok"] == summary["episodes"] == len(reports) == 8

    spans = otlp_receiver.spans
    # One trace per episode, its root the episode's invoke_agent span.
    roots = [s for s in spans if s.parent_id is None]
    assert all(s.attributes["gen_ai.operation.name"] == "invoke_agent" for s in roots), [s.name for s in roots]
    episode = {s.attributes["gen_ai.agent.name"]: s for s in roots}
    assert sorted(episode) == sorted(r["agent"] for r in reports)
    assert len({s.trace_id for s in spans}) == len({s.trace_id for s in roots}) == len(roots)

    # One execute_tool span per call of the run (sub-calls included), with the GenAI attributes.
    calls = [s for s in spans if s.attributes.get("gen_ai.operation.name") == "execute_tool"]
    assert len(calls) == summary["calls"] + summary["sub_calls"]["total"]
    assert all(s.name == f"execute_tool {s.attributes['gen_ai.tool.name']}" for s in calls)
    ids = [s.attributes["gen_ai.tool.call.id"] for s in calls]
    assert all(ids) and len(set(ids)) == len(ids)
    for report in reports:
        root = episode[report["agent"]]
        made = [s for s in calls if s.parent_id == root.span_id]  # the episode's own calls
        assert sorted(s.attributes["gen_ai.tool.name"] for s in made) == sorted(report["call_tools"])
        # A run_code program's sub-calls are children of its run_code span.
        runs = {s.span_id for s in made if s.attributes["gen_ai.tool.name"] == "run_code"}
        sub_calls = [s for s in calls if s.parent_id in runs]
        assert len(sub_calls) == report["sub_calls"] and all(s.trace_id == root.trace_id for s in sub_calls)
    assert summary["sub_calls"]["total"] > 0  # (the examples have a Code Mode episode)

    # Spans from more than one process: episodes run on runners, their calls on executors.
    def pids(found):
        return {s.resource["process.pid"] for s in found}

    assert pids(episode.values()).isdisjoint(pids(calls))
    assert all(s.resource["service.instance.id"] for s in spans)
