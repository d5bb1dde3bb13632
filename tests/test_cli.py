"""The command line's flags reach the job as they say, in one process (the jobs themselves
run on Ray in tests/eval, and the CLI end to end there too)."""

import pytest

from dsh_actors import cli
from dsh_actors.eval import job

from .eval.clusterless import episode_file, without_a_cluster


@pytest.fixture
def job_options(monkeypatch, tmp_path):
    """What `eval` hands to run_eval, which is replaced by one that runs nothing."""
    seen = {}

    async def run_nothing(paths, out_dir, **options):
        seen.update(options, paths=paths, out_dir=out_dir)
        (tmp_path / "summary.md").write_text("# Evaluation summary\n")
        return {"out": str(tmp_path), "episodes_failed": 0}

    monkeypatch.setattr(job, "run_eval", run_nothing)
    return seen


def test_eval_passes_your_tools_and_drops_the_reference_ones_only_when_asked(job_options, tmp_path, capsys):
    argv = ["eval", "mine.jsonl", "--tools", "mytools:tools", "--approvals", "always", "--out", str(tmp_path)]
    assert cli.main([*argv, "--no-reference-tools", "--overwrite", "--quiet"]) == 0
    assert job_options["paths"] == ["mine.jsonl"] and job_options["tools"] == ["mytools:tools"]
    assert job_options["reference_tools"] is False and job_options["approvals"] == "always"
    assert job_options["overwrite"] is True and job_options["live"] is None
    assert "# Evaluation summary" in capsys.readouterr().out
    assert cli.main(argv) == 0
    assert job_options["reference_tools"] is True and job_options["overwrite"] is False
    # What the flag means for the job: without the reference tools, only yours (and run_code).
    names = {reference: job._Job(tools=[], workspace=None, reference=reference, approvals="never", out=None,
                                 shared_out=False, scratch=None).tool_names for reference in (False, True)}
    assert names[False] == {"run_code"}
    assert names[True] == {"run_code", "bash", "read_file", "write_file", "edit_file"}


@pytest.mark.timeout(60)
def test_eval_resume_names_a_report_a_killed_driver_left_empty_and_runs_its_episode_again(monkeypatch, tmp_path,
                                                                                          capfd):
    ran = without_a_cluster(monkeypatch.setattr)
    argv = ["eval", str(episode_file(tmp_path, ["a", "b"])), "--out", str(tmp_path / "out"), "--quiet"]
    assert cli.main(argv) == 0
    (tmp_path / "out" / "reports" / "b.json").write_bytes(b"")
    capfd.readouterr()
    assert cli.main([*argv, "--resume"]) == 0 and ran == ["a", "b", "b"]
    said = [line for line in capfd.readouterr().err.splitlines() if "damaged" in line]
    assert said == [f"damaged report {tmp_path / 'out' / 'reports' / 'b.json'}: it is empty (its write was cut "
                    "short); its episode runs again"]


@pytest.mark.timeout(60)
def test_eval_overwrite_refuses_a_folder_another_tool_wrote_in_one_line_and_deletes_nothing(monkeypatch, tmp_path,
                                                                                            capfd):
    ran = without_a_cluster(monkeypatch.setattr)
    theirs = tmp_path / "theirs"
    (theirs / "precious").mkdir(parents=True)
    (theirs / "precious" / "data.csv").write_text("a,b\n1,2\n")
    (theirs / "run.json").write_text('{"started": "2024-05-01"}\n')
    argv = ["eval", str(episode_file(tmp_path, ["a"])), "--out", str(theirs), "--overwrite", "--quiet"]
    assert cli.main(argv) == 2 and ran == []
    said = capfd.readouterr().err.splitlines()
    assert len(said) == 1 and said[0].startswith(f"dsh-actors eval: {theirs / 'run.json'} has no dsh-actors mark")
    assert (theirs / "precious" / "data.csv").read_text() == "a,b\n1,2\n" and (theirs / "run.json").is_file()
