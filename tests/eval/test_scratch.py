"""What a job leaves on a node: tidied at its end, reaped after a killed driver (no Ray: plain folders)."""

import concurrent.futures
import fcntl
import os
import time

import pytest

from dsh_actors.eval.scratch import KEEP_S, claim, reap, tidy

pytestmark = pytest.mark.timeout(30)


def test_a_job_folder_is_tidied_at_its_end_and_a_killed_jobs_is_reaped_but_for_recent_kept_workspaces(tmp_path):
    parent = tmp_path / "dsh-actors-jobs"
    ours, dead, living = parent / "ours", parent / "dead", parent / "living"
    claims = {}
    for folder, owner in ((ours, "s/1"), (dead, "s/2"), (living, "s/3")):
        claims[folder] = claim(folder, owner)
        for part in ("templates/n1/abc/x.txt", "logs/n1/e.log", "workspaces/n1/old/f", "workspaces/n1/new/f"):
            (folder / part).parent.mkdir(parents=True, exist_ok=True)
            (folder / part).write_text("x")
    week_ago = time.time() - KEEP_S - 60
    os.utime(dead / "workspaces/n1/old", (week_ago, week_ago))
    tidy(ours, "n1", logs_sent=True)
    assert sorted(str(p.relative_to(ours)) for p in ours.rglob("*")) == [
        "job", "workspaces", "workspaces/n1", "workspaces/n1/new", "workspaces/n1/new/f", "workspaces/n1/old",
        "workspaces/n1/old/f"]
    os.close(claims.pop(dead))  # its runner was killed: the kernel let go of its claim
    touched = reap(parent, ours, lambda owners: {"s/3"} & set(owners))
    assert touched == [dead]
    assert sorted(str(p.relative_to(dead)) for p in dead.rglob("*")) == [
        "job", "workspaces", "workspaces/n1", "workspaces/n1/new", "workspaces/n1/new/f"]
    assert (living / "templates/n1/abc/x.txt").exists()  # a job still running is left alone
    reap(parent, ours, lambda owners: {"s/3"} & set(owners), now=time.time() + KEEP_S + 60)
    assert not dead.exists()  # nothing of a dead job outlives its kept workspaces


def test_a_folder_a_live_process_claims_is_never_reaped_even_when_this_cluster_does_not_know_its_job(tmp_path):
    # A job of another Ray cluster on the same machine: this cluster's GCS says it is not
    # running, but its runner holds the claim.
    parent = tmp_path / "dsh-actors-jobs"
    theirs = parent / "theirs"
    held = claim(theirs, "other-session/1")
    (theirs / "templates/n1").mkdir(parents=True)
    (theirs / "templates/n1/t.txt").write_text("in use")
    nobody_alive = lambda owners: set()  # noqa: E731
    assert reap(parent, parent / "ours", nobody_alive) == []
    assert (theirs / "templates/n1/t.txt").read_text() == "in use"
    os.close(held)
    assert reap(parent, parent / "ours", nobody_alive) == [theirs]
    assert not theirs.exists()  # its mark too: nothing was kept


def test_a_runner_that_claims_while_a_reaper_removes_the_folder_waits_and_claims_it_anew(tmp_path):
    parent = tmp_path / "dsh-actors-jobs"
    folder = parent / "job-a"
    os.close(claim(folder, "s/1"))  # its runner died
    reaper = os.open(folder / "job", os.O_RDWR)
    fcntl.flock(reaper, fcntl.LOCK_EX)  # a reaper is at work
    claimed = concurrent.futures.ThreadPoolExecutor(1).submit(claim, folder, "s/1")  # the runner, restarted
    time.sleep(0.2)
    assert not claimed.done()  # it waits for the reaper
    os.unlink(folder / "job")
    os.rmdir(folder)
    os.close(reaper)
    held = claimed.result(timeout=10)
    assert (folder / "job").read_text().split() == ["s/1", "failed"]  # the folder made anew, and claimed
    assert os.fstat(held).st_ino == os.stat(folder / "job").st_ino
    assert reap(parent, parent / "ours", lambda owners: set()) == []
    os.close(held)


def test_a_killed_job_that_kept_no_workspaces_loses_its_episodes_workspaces_at_once(tmp_path):
    parent = tmp_path / "dsh-actors-jobs"
    dead = parent / "dead"
    os.close(claim(dead, "s/2", "never"))  # its runner was killed mid-episode
    (dead / "workspaces/n1/ep-7").mkdir(parents=True)
    (dead / "workspaces/n1/ep-7/data.bin").write_bytes(b"x" * 1000)
    assert reap(parent, parent / "ours", lambda owners: set()) == [dead]
    assert not dead.exists()  # --keep-workspaces never: nothing waits for the TTL
