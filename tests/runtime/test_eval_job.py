"""The batch evaluation job on the test cluster: examples, bad lines, summaries, logs, show."""

import asyncio
import json
import subprocess
import sys

from dsh_actors.eval.episodes import load_episodes
from dsh_actors.eval.job import example_episodes, run_eval, show_log


def test_the_shipped_examples_run_and_summarise_every_outcome(ray_cluster, tmp_path):
    summary = asyncio.run(run_eval([example_episodes()], tmp_path, concurrency=4, progress=None))
    assert summary["episodes"] == 8 and summary["episodes_failed"] == 0
    per = {e["id"]: e for e in summary["per_episode"]}
    assert per["careless-shell"]["denied"] == 1  # rm -rf denied by the policy
    assert per["secret-peek"]["denied"] == 1 and per["secret-peek"]["errors"] == {"WORKSPACE": 1}
    assert per["writes-need-approval"]["asks"] == 1 and per["writes-need-approval"]["denied"] == 1
    assert per["model-mistakes"]["errors"] == {"INVALID_ARGS": 1, "UNKNOWN_TOOL": 1, "WORKSPACE": 1}
    assert per["read-only-agent"]["errors"] == {"UNKNOWN_TOOL": 1} and per["read-only-agent"]["denied"] == 1
    assert per["code-mode"]["ok"] == 1
    assert per["stubbed-shell"]["ok"] == 2
    assert summary["calls"] == sum(e["calls"] for e in summary["per_episode"]) == 17
    assert "all 12 tests passed" in show_log(tmp_path / "logs" / "stubbed-shell.log", tmp_path / "workspace")
    assert summary["latency_ms"]["p50"] > 0 and (tmp_path / "workspace" / "src" / "app.py").exists()
    assert json.loads((tmp_path / "summary.json").read_text()) == summary
    assert "| error code | count |" in (tmp_path / "summary.md").read_text()
    shown = show_log(tmp_path / "logs" / "read-and-fix.log", tmp_path / "workspace")
    assert "✓ edit_file: notes.txt" in shown and "+ - ship the evaluation harness" in shown


def test_bad_episode_lines_are_named_by_file_and_line_and_the_rest_still_run(ray_cluster, tmp_path):
    episodes = tmp_path / "mixed.jsonl"
    episodes.write_text("\n".join([
        '{"id": "fine", "turns": [{"calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]}]}',
        '{"id": "broken", "turns": [',
        '{"id": "no-turns", "turns": []}',
        '{"id": "typo", "turns": [{"calls": [{"nme": "x"}]}]}',
        '{"id": "fine", "turns": [{"user": "again"}]}',
        '{"id": "bad-policy", "policies": ["nonexistent"], "turns": [{"user": "hi"}]}',
    ]))
    _, errors = load_episodes([episodes])
    assert [(e.line, e.message.split(":")[0]) for e in errors] == [
        (2, "invalid JSON"), (3, "turns"), (4, "turns.0.calls.0.name"), (5, 'episode id or agent "fine" is used twice')]
    summary = asyncio.run(run_eval([episodes, tmp_path / "missing.jsonl"], tmp_path / "out", progress=None))
    assert summary["episodes_ok"] == 1 and summary["episodes_failed"] == 6
    assert any("missing.jsonl:0: cannot read the file" in line for line in summary["invalid"])
    failed = {e["id"]: e for e in summary["per_episode"] if e["status"] == "failed"}
    assert "unknown policies ['nonexistent']" in failed["bad-policy"]["message"]


def test_the_cli_runs_the_examples_end_to_end(tmp_path):
    out = subprocess.run([sys.executable, "-m", "dsh_actors", "eval", "--out", str(tmp_path), "--quiet"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "# Evaluation summary" in out.stdout and "8 episodes (8 ok, 0 failed)" in out.stdout
    assert "[8/8]" in out.stderr
