"""A run's ``--out`` folder as plain file handling, in one process (the job's run replaced
by one that finishes every episode at once, :mod:`.clusterless`): files replaced all at
once even when the driver is killed mid-write, damaged reports named and run again, and
only a folder our own run marked ever resumed or deleted."""

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

from dsh_actors.eval.job import RunFolderError, run_eval
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


@pytest.mark.parametrize("flag", ["resume", "overwrite"])
@pytest.mark.parametrize("content, problem", [(b"", "it is empty"), (b'{"tool": "dsh-act', "it is not JSON"),
                                              (b"[1, 2]\n", "it holds a JSON list, not an object")])
def test_a_damaged_run_json_is_a_run_folder_error_naming_it_and_nothing_is_resumed_or_deleted(
        ran, tmp_path, flag, content, problem):
    episodes, out = episode_file(tmp_path, ["a"]), tmp_path / "out"
    run(episodes, out)
    (out / "run.json").write_bytes(content)
    before = files(out)
    with pytest.raises(RunFolderError) as refused:
        run(episodes, out, **{flag: True})
    assert refused.value.code == "RUN_FOLDER"
    assert str(refused.value).startswith(f"{out / 'run.json'} is damaged: {problem}")
    assert "nothing was resumed or deleted" in str(refused.value)
    assert files(out) == before and ran == ["a"]


def test_overwrite_and_resume_refuse_a_folder_whose_run_json_another_tool_wrote_and_delete_nothing(ran, tmp_path):
    episodes, out = episode_file(tmp_path, ["a"]), tmp_path / "theirs"
    (out / "precious").mkdir(parents=True)
    (out / "precious" / "data.csv").write_text("a,b\n1,2\n")
    (out / "run.json").write_text('{"pipeline": "etl", "episodes": ["a"]}\n')
    (out / "summary.json").write_text('{"rows": 1}\n')
    before = files(out)
    for flag in ("overwrite", "resume"):
        with pytest.raises(RunFolderError) as refused:
            run(episodes, out, **{flag: True})
        said = str(refused.value)
        assert said.startswith(f'{out / "run.json"} has no dsh-actors mark ("tool": "dsh-actors")')
        assert "nothing was resumed or deleted. Choose another --out" in said
        assert files(out) == before
    assert (out / "precious" / "data.csv").read_text() == "a,b\n1,2\n" and ran == []


def test_a_run_folder_of_an_earlier_dsh_actors_is_refused_until_its_run_json_is_marked_as_the_message_says(
        ran, tmp_path):
    episodes, out = episode_file(tmp_path, ["a", "b"]), tmp_path / "out"
    run(episodes, out)
    (out / "run.json").write_text('{"episodes": ["a", "b"]}\n')  # what dsh-actors wrote before runs were marked
    (out / "reports" / "b.json").unlink()
    with pytest.raises(RunFolderError, match="or a dsh-actors from before run folders were marked") as refused:
        run(episodes, out, resume=True)
    assert 'write "tool": "dsh-actors", "format": 1 into its run.json (a JSON object)' in str(refused.value)
    (out / "run.json").write_text('{"tool": "dsh-actors", "format": 1, "episodes": ["a", "b"]}\n')  # as it says
    assert run(episodes, out, resume=True)["episodes_ok"] == 2
    assert ran == ["a", "b", "b"]


def test_a_run_folder_of_a_later_format_is_refused_with_what_to_use_instead(ran, tmp_path):
    episodes, out = episode_file(tmp_path, ["a"]), tmp_path / "out"
    run(episodes, out)
    (out / "run.json").write_text('{"tool": "dsh-actors", "format": 2}\n')
    with pytest.raises(RunFolderError, match="of format 2, and this dsh-actors knows format 1 only.*with the "
                                             "dsh-actors that wrote it"):
        run(episodes, out, overwrite=True)
    assert (out / "reports" / "a.json").is_file()


def test_overwrite_starts_a_run_folder_of_ours_over_and_the_new_run_json_carries_the_mark(ran, tmp_path):
    out = tmp_path / "out"
    run(episode_file(tmp_path, ["a", "b"]), out)
    assert json.loads((out / "run.json").read_text()) == {"tool": "dsh-actors", "format": 1, "episodes": ["a", "b"]}
    run(episode_file(tmp_path, ["c"]), out, overwrite=True)
    assert sorted(files(out)) == ["logs/c.log", "reports/c.json", "run.json", "summary.html", "summary.json",
                                  "summary.md"]
    assert json.loads((out / "run.json").read_text()) == {"tool": "dsh-actors", "format": 1, "episodes": ["c"]}
    assert ran == ["a", "b", "c"]
