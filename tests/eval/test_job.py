"""The batch evaluation job on the test cluster: examples, bad lines, summaries, logs, show."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from dsh_actors.eval.episodes import load_episodes
from dsh_actors.eval.job import run_eval
from dsh_actors.eval.show import show_log


def test_bad_episode_lines_are_named_by_file_and_line_and_the_rest_still_run(ray_cluster, tmp_path):
    episodes = tmp_path / "mixed.jsonl"
    episodes.write_text("\n".join([
        '{"id": "fine", "turns": [{"calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]}]}',
        '{"id": "broken", "turns": [',
        '{"id": "no-turns", "turns": []}',
        '{"id": "typo", "turns": [{"calls": [{"nme": "x"}]}]}',
        '{"id": "fine", "turns": [{"user": "again"}]}',
        '{"id": "bad-policy", "policies": ["nonexistent"], "turns": [{"user": "hi"}]}',
        '{"id": "bad-tool", "scope": {"restrict": {"deny": ["bsh"]}}, "turns": [{"user": "hi"}]}',
    ]))
    _, errors = load_episodes([episodes])
    assert [(e.line, e.message.split(":")[0]) for e in errors] == [
        (2, "invalid JSON"), (3, "episode"), (4, "turns.0.calls.0.name"), (5, 'episode id or agent "fine" is used twice'),
        (6, "policies")]
    assert "either scripted turns or a task" in errors[1].message
    assert "unknown policies ['nonexistent']" in errors[-1].message  # up front, as file:line
    summary = asyncio.run(run_eval([episodes, tmp_path / "missing.jsonl"], tmp_path / "out", progress=None))
    assert summary["episodes_ok"] == 1 and summary["episodes_failed"] == 7
    assert json.loads((tmp_path / "out" / "summary.json").read_text()) == summary  # what it returns is the file
    assert any("missing.jsonl:0: cannot read the file" in line for line in summary["invalid"])
    assert any(line.startswith(f"{episodes}:7: scope names unknown tools ['bsh']") for line in summary["invalid"])
    assert [e["id"] for e in summary["per_episode"]] == ["fine"]  # nothing of the bad ones ran


def test_the_cli_runs_the_shipped_examples_end_to_end_and_summarises_every_outcome(tmp_path):
    """The README's first command, on a Ray of its own: every example's outcome is in the
    summary, its logs and its pages; then the folder is refused again, and exported."""
    out = subprocess.run([sys.executable, "-m", "dsh_actors", "eval", "--out", str(tmp_path), "--quiet",
                          "--keep-workspaces", "all"],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "# Evaluation summary" in out.stdout and "8 episodes (8 ok, 0 failed)" in out.stdout
    assert "8/8" in out.stderr and "episode/s" in out.stderr  # the progress bar: count and rate
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["episodes"] == 8 and summary["episodes_failed"] == 0
    per = {e["id"]: e for e in summary["per_episode"]}
    assert per["careless-shell"]["denied"] == 1  # rm -rf denied by the policy
    assert per["secret-peek"]["denied"] == 1 and per["secret-peek"]["errors"] == {"WORKSPACE": 1}
    assert per["writes-need-approval"]["asks"] == 1 and per["writes-need-approval"]["denied"] == 1
    assert per["model-mistakes"]["errors"] == {"INVALID_ARGS": 1, "UNKNOWN_TOOL": 1, "WORKSPACE": 1}
    assert per["read-only-agent"]["errors"] == {"UNKNOWN_TOOL": 1} and per["read-only-agent"]["denied"] == 1
    assert per["code-mode"]["ok"] == 1
    assert per["stubbed-shell"]["ok"] == 2
    assert per["code-mode"]["sub_calls"] >= 2 and summary["sub_calls"]["total"] == per["code-mode"]["sub_calls"]
    assert summary["calls"] == sum(e["calls"] for e in summary["per_episode"]) == 17
    assert summary["denials"] == 4 and summary["tool_errors"] == 5
    shown, damage = show_log(tmp_path / "logs" / "stubbed-shell.log")
    assert "all 12 tests passed" in shown and damage is None
    assert summary["latency_ms"]["p50"] > 0 and (Path(per["code-mode"]["workspace"]) / "src" / "app.py").exists()
    assert "| error code | count |" in (tmp_path / "summary.md").read_text()
    page = (tmp_path / "summary.html").read_text()
    assert all(f"id='ep-{e}'" in page for e in per)  # every episode's cards, from its log
    assert "✓ edit_file: notes.txt" in page and "<td>UNKNOWN_TOOL</td>" in page
    assert "<td>edit_file</td>" in page  # latency by tool, from the reports
    shown, _ = show_log(tmp_path / "logs" / "read-and-fix.log")
    assert "✓ edit_file: notes.txt" in shown and "+ - ship the evaluation harness" in shown
    assert "» user: Fix the typo in notes.txt" in shown
    shown, _ = show_log(tmp_path / "logs" / "writes-need-approval.log")
    assert "? approval asked for write_file" in shown and "? approval rejected" in shown
    shown, _ = show_log(tmp_path / "logs" / "code-mode.log")
    assert "↳ ✓ bash" in shown
    again = subprocess.run([sys.executable, "-m", "dsh_actors", "eval", "--out", str(tmp_path), "--quiet"],
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 2 and "already holds a finished run" in again.stderr and "Traceback" not in again.stderr
    exported = subprocess.run([sys.executable, "-m", "dsh_actors", "export", str(tmp_path)], capture_output=True,
                              text=True, timeout=120)
    assert exported.returncode == 0 and "wrote 8 episode rows" in exported.stdout, exported.stderr
    rows = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in rows) == sorted(json.loads((tmp_path / "run.json").read_text())["episodes"])
    assert sum(len(r["tool_events"]) for r in rows) == 17  # every call of the run, as the summary counted
    for command in (["show", str(tmp_path / "nope.log")], ["replay", str(tmp_path / "logs" / "code-mode.log"),
                                                           "--policies", "no-such-policy"],
                    ["export", str(tmp_path / "logs")]):
        failed = subprocess.run([sys.executable, "-m", "dsh_actors", *command], capture_output=True, text=True,
                                timeout=120)
        assert failed.returncode == 2 and len(failed.stderr.strip().splitlines()) == 1, failed.stderr


def test_a_run_owns_its_folder_episodes_do_not_share_files_and_failures_are_kept_apart(ray_cluster, tmp_path):
    from dsh_actors.eval.job import RunFolderError
    from dsh_actors.eval.replay import replay_logs

    def writer(name):
        return {"id": f"writer-{name}", "turns": [
            {"calls": [{"name": "write_file", "arguments": {"path": "shared.txt", "content": name}}]},
            {"calls": [{"name": "bash", "arguments": {"command": "sleep 0.3; cat shared.txt"}}]}]}

    episodes = tmp_path / "e.jsonl"
    episodes.write_text("\n".join(json.dumps(e) for e in [
        writer("A"), writer("B"),
        {"id": "fails", "agent": "failing-agent", "policies": ["deny-destructive"],
         "scope": {"shadows": [{"name": "bash", "result": "make: *** [all] Error 2", "is_error": True}]},
         "turns": [{"calls": [{"name": "bash", "arguments": {"command": "make"}},
                              {"name": "bash", "arguments": {"command": "sudo rm -rf /"}},
                              {"name": "bash", "arguments": {"command": "dd if=/dev/zero of=/dev/sda"}}]}]},
        {"id": "coder", "mode": "code", "turns": [{"user": "go", "code":
            "a = await tools.read_file(path='notes.txt')\ntry:\n    await tools.read_file(path='missing.txt')\n"
            "except Exception:\n    print('missing')\nreturn a[:5]"}]},
    ]))
    out = tmp_path / "run"
    summary = asyncio.run(run_eval([episodes], out, concurrency=4, progress=None, keep_workspaces="all"))
    per = {e["id"]: e for e in summary["per_episode"]}
    assert summary["episodes_failed"] == 0, summary
    texts = {name: (Path(per[f"writer-{name}"]["workspace"]) / "shared.txt").read_text() for name in "AB"}
    assert texts == {"A": "A", "B": "B"}  # each episode wrote in its own copy of the workspace
    assert per["fails"]["errors"] == {"TOOL_FAILED": 1} and per["fails"]["denied"] == 2  # apart
    assert per["coder"]["sub_calls"] == 2 and per["coder"]["sub_call_errors"] == 1
    assert summary["sub_calls"] == {"total": 2, "ok": 1, "errors": 1}
    # replay: as the episode's agent (not the file's name), sub-calls included
    seen = []
    from dsh_actors.eval import policies as named

    def spy(execution, call_next):
        seen.append((execution.agent, execution.name, execution.call_id))
        return call_next()

    named.NAMED_POLICIES["spy"] = ("tools/pre-execute", spy)
    try:
        replay_logs([out / "logs" / "fails.log", out / "logs" / "coder.log"], ["spy"])
    finally:
        del named.NAMED_POLICIES["spy"]
    assert ("failing-agent", "bash", "fails:1:1") in seen
    assert [s for s in seen if s[0] == "coder"] == [("coder", "read_file", "coder:1:code:code:1"),
                                                    ("coder", "read_file", "coder:1:code:code:2")]
    # the folder: refused again, resumed (finished episodes kept), overwritten
    with pytest.raises(RunFolderError, match="already holds a finished run"):
        asyncio.run(run_eval([episodes], out, progress=None))
    kept = (out / "logs" / "coder.log").stat().st_mtime_ns
    (out / "reports" / "writer-A.json").unlink()  # as if the run had stopped before it finished
    (out / "logs" / "writer-A.log").unlink()
    (out / "logs" / "writer-A.log").mkdir()  # and something is in the way of its log
    resumed = asyncio.run(run_eval([episodes], out, progress=None, resume=True))
    assert (out / "logs" / "coder.log").stat().st_mtime_ns == kept  # not run again
    assert {e["id"]: e["status"] for e in resumed["per_episode"]} == {
        "writer-A": "failed", "writer-B": "ok", "fails": "ok", "coder": "ok"}
    assert "in the way" in next(e for e in resumed["per_episode"] if e["id"] == "writer-A")["message"]
    (out / "logs" / "writer-A.log").rmdir()
    # Overwritten by a run of the writers alone (one registry, not two): nothing of the old run is left.
    writers = tmp_path / "writers.jsonl"
    writers.write_text("\n".join(json.dumps(writer(name)) for name in "AB"))
    fresh = asyncio.run(run_eval([writers], out, progress=None, overwrite=True))
    assert fresh["episodes_failed"] == 0 and [e["id"] for e in fresh["per_episode"]] == ["writer-A", "writer-B"]
    assert sorted(p.name for p in (out / "logs").iterdir()) == ["writer-A.log", "writer-B.log"]
    assert sorted(p.name for p in (out / "reports").iterdir()) == ["writer-A.json", "writer-B.json"]
    with pytest.raises(RunFolderError, match="holds no dsh-actors run"):
        (tmp_path / "home").mkdir()
        (tmp_path / "home" / "precious.txt").write_text("mine")
        asyncio.run(run_eval([episodes], tmp_path / "home", progress=None, overwrite=True))
    assert (tmp_path / "home" / "precious.txt").read_text() == "mine"
