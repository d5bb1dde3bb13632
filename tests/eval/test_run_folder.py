"""A run's ``--out`` folder as plain file handling, in one process (the job's run replaced
by one that finishes every episode at once, :mod:`.clusterless`): files replaced all at
once even when the driver is killed mid-write, damaged reports named and run again."""

import asyncio
import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dsh_actors.eval.job import run_eval
from dsh_actors.eval.reports import EpisodeReport

from .clusterless import episode_file, without_a_cluster

pytestmark = pytest.mark.timeout(60)

_ROOT = Path(__file__).resolve().parents[2]

# A driver that is killed halfway through its first write of ``target`` (or of a file that
# stands for it on the way: one in its folder whose name begins with ``.<target's name>.``).
_KILLED_WHILE_WRITING = """
import asyncio, os, signal, sys
from pathlib import Path
from dsh_actors.eval.job import run_eval
from tests.eval.clusterless import without_a_cluster

episodes, out, target, resume = sys.argv[1:]
target = Path(out, target)
write = os.write

def write_half_then_die(fd, data):
    path = Path(os.readlink(f"/proc/self/fd/{fd}"))
    if path.parent == target.parent and (path.name == target.name or path.name.startswith(f".{target.name}.")):
        write(fd, bytes(data)[:len(data) // 2])
        os.kill(os.getpid(), signal.SIGKILL)
    return write(fd, data)

os.write = write_half_then_die
without_a_cluster(setattr)
asyncio.run(run_eval([episodes], out, progress=None, resume=resume == "resume"))
"""


@pytest.fixture
def ran(monkeypatch):
    """The ids of the episodes the runs of the test were given."""
    return without_a_cluster(monkeypatch.setattr)


def run(episodes, out, **options):
    return asyncio.run(run_eval([episodes], out, progress=None, **options))


def kill_while_writing(episodes, out, target, *, resume):
    """Run the job in a driver that is killed halfway through writing ``target``."""
    killed = subprocess.run([sys.executable, "-c", _KILLED_WHILE_WRITING, str(episodes), str(out), target,
                             "resume" if resume else "new"], cwd=_ROOT, capture_output=True, text=True, timeout=50,
                            env={**os.environ, "PYTHONPATH": str(_ROOT)})
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]


def files(folder):
    """Every file under ``folder`` and what it holds, by relative path."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def strays(out):
    """The files under ``out`` that are none of a run's own."""
    ours = re.compile(r"run\.json|summary\.(json|md|html)|logs/[\w.-]+\.log|reports/[\w.-]+\.json")
    return [name for name in files(out) if not ours.fullmatch(name)]


def fail(out, episode):
    """Make ``episode``'s report say it failed: a resumed run runs it again."""
    report = EpisodeReport(id=episode, agent=episode, status="failed", message="its runner died")
    (out / "reports" / f"{episode}.json").write_text(json.dumps(report.to_json()) + "\n")


@pytest.mark.parametrize("target", ["run.json", "logs/a.log", "reports/a.json", "summary.json"])
def test_a_driver_killed_while_writing_a_file_of_the_run_leaves_the_old_file_whole_and_the_next_run_cleans_up(
        ran, tmp_path, target):
    episodes, out = episode_file(tmp_path, ["a", "b"]), tmp_path / "out"
    run(episodes, out)
    fail(out, "a")  # a resumed run writes its log and report again, then run.json and the summaries
    before = files(out)
    kill_while_writing(episodes, out, target, resume=True)
    # A resumed run removes the old summaries before it runs anything; every other file is as it was.
    assert files(out).get(target) == (None if target.startswith("summary") else before[target])
    assert len(strays(out)) == 1  # what the killed write had written, under another name
    ran.clear()
    summary = run(episodes, out, resume=True)
    # Killed while writing the summaries, the driver had kept a's new report: it does not run again.
    assert ran == ([] if target.startswith("summary") else ["a"]) and summary["episodes_ok"] == 2
    assert json.loads((out / "reports" / "a.json").read_text())["status"] == "ok"
    assert strays(out) == []


def test_a_folder_holding_only_what_a_driver_killed_on_its_first_write_left_is_a_new_run_folder(ran, tmp_path):
    episodes, out = episode_file(tmp_path, ["a", "b"]), tmp_path / "out"
    kill_while_writing(episodes, out, "run.json", resume=False)
    assert "run.json" not in files(out) and len(strays(out)) == 1
    assert run(episodes, out)["episodes_ok"] == 2  # neither --resume nor --overwrite: nothing of a run was there
    assert ran == ["a", "b"] and strays(out) == []


def test_resume_names_each_damaged_report_on_a_line_and_runs_its_episode_again_keeping_the_good_one(ran, tmp_path):
    episodes, out = episode_file(tmp_path, ["empty", "garbage", "stranger", "fine"]), tmp_path / "out"
    run(episodes, out)
    reports = out / "reports"
    (reports / "empty.json").write_bytes(b"")  # as a killed driver left it before writes were atomic
    (reports / "garbage.json").write_bytes(b'{"id": "garb')
    (reports / "stranger.json").write_text('{"rows": [1, 2]}\n')
    good = (reports / "fine.json").stat()
    said = io.StringIO()
    summary = asyncio.run(run_eval([episodes], out, progress=said, resume=True))
    damage = [line for line in said.getvalue().splitlines() if "damaged report" in line]
    assert damage == [
        f"damaged report {reports / 'empty.json'}: it is empty (its write was cut short); its episode runs again",
        f"damaged report {reports / 'garbage.json'}: it is not JSON (Unterminated string starting at: line 1 "
        "column 8 (char 7)); its episode runs again",
        f"damaged report {reports / 'stranger.json'}: it is not an episode report (unknown fields: rows; "
        "no agent or id); its episode runs again"]
    assert ran[4:] == ["empty", "garbage", "stranger"]  # run again; the good one kept
    assert (reports / "fine.json").stat().st_ino == good.st_ino
    assert (reports / "fine.json").stat().st_mtime_ns == good.st_mtime_ns
    assert {e["id"]: e["status"] for e in summary["per_episode"]} == dict.fromkeys(
        ["empty", "garbage", "stranger", "fine"], "ok")
    assert all(json.loads((reports / f"{name}.json").read_text())["id"] == name for name in ("empty", "garbage"))
