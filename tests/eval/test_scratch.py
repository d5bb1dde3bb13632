"""What a job leaves on a node: tidied at its end, reaped after a killed driver (no Ray: plain folders)."""

import os
import time

import pytest

from dsh_actors.eval.scratch import KEEP_S, claim, reap, tidy

pytestmark = pytest.mark.timeout(30)


def test_a_job_folder_is_tidied_at_its_end_and_a_killed_jobs_is_reaped_but_for_recent_kept_workspaces(tmp_path):
    parent = tmp_path / "dsh-actors-jobs"
    ours, dead, living = parent / "ours", parent / "dead", parent / "living"
    for folder, owner in ((ours, "s/1"), (dead, "s/2"), (living, "s/3")):
        claim(folder, owner)
        for part in ("templates/n1/abc/x.txt", "logs/n1/e.log", "workspaces/n1/old/f", "workspaces/n1/new/f"):
            (folder / part).parent.mkdir(parents=True, exist_ok=True)
            (folder / part).write_text("x")
    week_ago = time.time() - KEEP_S - 60
    os.utime(dead / "workspaces/n1/old", (week_ago, week_ago))
    tidy(ours, "n1", logs_sent=True)
    assert sorted(str(p.relative_to(ours)) for p in ours.rglob("*")) == [
        "job", "workspaces", "workspaces/n1", "workspaces/n1/new", "workspaces/n1/new/f", "workspaces/n1/old",
        "workspaces/n1/old/f"]
    touched = reap(parent, ours, lambda owners: {"s/3"} & set(owners))
    assert touched == [dead]
    assert sorted(str(p.relative_to(dead)) for p in dead.rglob("*")) == [
        "job", "workspaces", "workspaces/n1", "workspaces/n1/new", "workspaces/n1/new/f"]
    assert (living / "templates/n1/abc/x.txt").exists()  # a job still running is left alone
    reap(parent, ours, lambda owners: {"s/3"} & set(owners), now=time.time() + KEEP_S + 60)
    assert not dead.exists()  # nothing of a dead job outlives its kept workspaces
