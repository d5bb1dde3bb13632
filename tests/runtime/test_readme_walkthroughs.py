"""The README's model walk-throughs, run as written: a shell runs each block from the
repository's root, with only its ports and output folders changed, joined to the test
session's cluster through RAY_ADDRESS (as any driver would be). The vLLM walk-through
gets the scripted endpoint speaking vLLM's fields in place of `vllm serve`."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ports import free_port
from tests.readme import ROOT, replace, walkthrough

BIN = Path(sys.executable).parent
T = 300


def _run(script, ray_cluster):
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "RAY_ADDRESS": ray_cluster["cluster"].address}
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=T - 20)


@pytest.mark.timeout(T)
def test_the_offline_model_walkthrough_runs_as_written(ray_cluster, tmp_path):
    port, out = free_port(), tmp_path / "model-out"
    script = replace(walkthrough("a model in the loop, offline"), "8011", str(port))
    script = replace(script, "model-out", str(out))
    done = _run(script, ray_cluster)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    # What the README says comes out: 3 of 3 scored successes, show's cards, one row per episode.
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"]["episodes"] == 3 and summary["model"]["success_rate"] == 1.0
    assert {e["id"]: e["denied"] for e in summary["per_episode"]} == {"first-item": 0, "line-count": 0, "cleanup": 1}
    assert "« assistant: ship the evalution harness" in done.stdout and "✓ read_file: notes.txt" in done.stdout
    rows = {r["id"]: r for r in map(json.loads, (out / "episodes.jsonl").read_text().splitlines())}
    assert sorted(rows) == ["cleanup", "first-item", "line-count"]
    tokens = rows["first-item"]["episode_tokens"]
    assert tokens["prompt_ids"] == [1, 2, 3, 4, 5]
    assert tokens["response_ids"] == [20, 21, 22, 30, 31, 32, 33, 40, 41, 42, 43]
    assert tokens["loss_mask"] == [1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1]
    assert rows["line-count"]["episode_tokens"] is None and "the endpoint sent no" in rows["line-count"][
        "episode_tokens_missing"]


@pytest.mark.timeout(T)
def test_the_vllm_walkthrough_runs_against_an_endpoint_speaking_vllm(ray_cluster, tmp_path):
    port, out = free_port(), tmp_path / "vllm-out"
    script = walkthrough("a vLLM server")
    serve = next(line for line in script.splitlines() if line.startswith("vllm serve"))
    script = replace(script, serve, "python -m dsh_actors.agent.scripted --script "
                     "dsh_actors/examples/tasks-script.json --port 8000 --speaks vllm &")
    script = replace(script, "8000", str(port))
    script = replace(script, "vllm-out", str(out)) + "\nkill %1\n"
    done = _run(script, ray_cluster)
    assert done.returncode == 0, (done.stdout[-3000:], done.stderr[-3000:])
    import pyarrow.parquet as pq

    table = {r["id"]: r for r in pq.read_table(out / "episodes.parquet").to_pylist()}
    assert sorted(table) == ["cleanup", "first-item", "line-count"] and all(r["success"] for r in table.values())
    assert table["first-item"]["episode_tokens"]["loss_mask"] == [1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1]
    assert table["first-item"]["token_turns"][0]["logprobs"] == [-0.11, -0.02, -0.3]
