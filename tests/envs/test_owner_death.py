"""When the process that started environments dies (SIGKILL: no cleanup runs), every
environment it started dies with it (parent-death signals, chained), and reap() then
removes what it left: sockets, cgroups, its folder."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from dsh_actors.envs.native import reap

from .host import cgroup_dirs_named, processes_of, wait_until

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[2]


def test_killing_the_owner_kills_every_environment_it_started_and_reap_removes_the_rest(tmp_path):
    folder = tmp_path / "base"
    owner = subprocess.Popen([sys.executable, "-m", "tests.envs.owner", str(tmp_path), str(folder)], cwd=ROOT,
                             stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        made = json.loads(owner.stdout.readline())
        uids = [env["uid"] for env in made["environments"]]
        holders = [made["parent"], *(env["warden"] for env in made["environments"])]
        assert all(len(processes_of(uid)) >= 4 for uid in uids)  # init, spawner, two sleeps each
        backend_folder = next(p for p in folder.iterdir() if p.name.startswith(f"{owner.pid}-"))
        tag = backend_folder.name
        assert list(backend_folder.glob("*.sock")) and cgroup_dirs_named(tag)
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        assert wait_until(lambda: all(processes_of(uid) == [] for uid in uids), 10)
        assert wait_until(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in holders), 10)
    finally:
        owner.kill()
        owner.wait()
        owner.stdout.close()
    assert str(backend_folder) in reap(str(folder))
    assert not backend_folder.exists() and cgroup_dirs_named(tag) == []
