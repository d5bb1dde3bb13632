"""A task run K times: each run an episode of its own, pass@k and pass^k over the runs the
infrastructure did not end (no Ray: episodes, reports and the summary alone)."""

import math
import pickle

import pytest

from dsh_actors.eval.episodes import Episode, load_episodes, repeated
from dsh_actors.eval.reports import EpisodeReport, markdown_of, pass_all, pass_at, summary_of

pytestmark = pytest.mark.timeout(30)


def test_each_run_is_an_episode_of_its_own_and_travels_as_its_line(tmp_path):
    (tmp_path / "e.jsonl").write_text('{"id": "t", "repeat": 3, "turns": [{"user": "hi"}]}\n'
                                      '{"id": "u", "agent": "bot", "turns": [{"user": "hi"}]}\n')
    episodes, errors = load_episodes([tmp_path / "e.jsonl"])
    runs = repeated(episodes, repeat=2)
    assert errors == [] and [(e.id, e.agent_id, e.task_id) for e in runs] == [
        ("t.r1", "t.r1", "t"), ("t.r2", "t.r2", "t"), ("t.r3", "t.r3", "t"),
        ("u.r1", "bot.r1", "u"), ("u.r2", "bot.r2", "u")]
    again = pickle.loads(pickle.dumps(runs[1]))  # sent to a runner as its line: still its own run
    assert (again.id, again.agent_id, again.task_id) == ("t.r2", "t.r2", "t")
    assert repeated([Episode.model_validate({"id": "x", "turns": [{"user": "hi"}]})])[0].task_id is None
    with pytest.raises(ValueError, match="at least 1"):
        repeated(episodes, repeat=0)


def test_the_estimators_are_the_unbiased_ones():
    assert pass_at(10, 3, 1) == pytest.approx(0.3) and pass_all(10, 3, 1) == pytest.approx(0.3)
    assert pass_at(10, 3, 2) == pytest.approx(1 - math.comb(7, 2) / math.comb(10, 2))
    assert pass_all(10, 3, 2) == pytest.approx(math.comb(3, 2) / math.comb(10, 2))
    assert pass_at(4, 0, 4) == 0.0 and pass_all(4, 4, 4) == 1.0


def test_the_summary_gives_pass_at_k_per_task_and_overall_leaving_out_the_infrastructures_runs():
    def run(task, k, ok, infra=False):
        report = EpisodeReport(id=f"{task}.r{k}", agent=f"{task}.r{k}", task=task, status="ok" if ok else "failed",
                               termination={"reason": "runner_lost" if infra else "scripted", "infra": infra})
        return report

    runs = [run("a", 1, True), run("a", 2, False), run("a", 3, True),
            run("b", 1, False), run("b", 2, False), run("b", 3, True, infra=True)]
    repeats = summary_of(runs, [], 1.0)["repeats"]
    assert repeats["tasks"]["a"] == {"runs": 3, "counted": 3, "passed": 2,
                                     "pass@k": {1: 0.6667, 2: 1.0, 3: 1.0}, "pass^k": {1: 0.6667, 2: 0.3333, 3: 0.0}}
    assert repeats["tasks"]["b"]["counted"] == 2 and repeats["tasks"]["b"]["pass@k"] == {1: 0.0, 2: 0.0}
    assert repeats["pass@k"] == {1: 0.3333, 2: 0.5} and repeats["infra_rate"] == {"runner_lost": round(1 / 6, 4)}
    assert "| pass@k | 0.3333 | 0.5 |" in markdown_of(summary_of(runs, [], 1.0))
