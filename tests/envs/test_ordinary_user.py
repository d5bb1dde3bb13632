"""A backend run by an ordinary user (uid 65534, started by this root test): environments
still get every wall the host gives that user — a user namespace where commands are uid
1000 (the backend's uid outside), mount, PID, network, IPC and UTS namespaces, Landlock and
seccomp — and the cgroups it may not make are refused unless excused."""

import json
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
PYTHON = "/usr/bin/python3.11"


@pytest.fixture
def workspace():
    base = Path("/tmp") / f"dsh-envs-ordinary-{uuid.uuid4().hex[:8]}"
    (base / "ws").mkdir(parents=True)
    for path in (base, base / "ws"):
        shutil.chown(path, NOBODY, NOBODY)
    yield base / "ws"
    shutil.rmtree(base)


def as_nobody(workspace, *extra):
    if not Path(PYTHON).exists():
        pytest.skip(f"{PYTHON} (readable by an ordinary user) is not installed")
    site = next(p for p in sys.path if p.endswith("site-packages") and str(ROOT) in p)
    done = subprocess.run([PYTHON, str(Path(__file__).with_name("ordinary.py")), str(ROOT), site, str(workspace),
                           *extra], user=NOBODY, group=NOBODY, extra_groups=[], env={}, cwd="/tmp",
                          capture_output=True, timeout=90)
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


def test_an_ordinary_user_is_refused_without_cgroups_unless_excused(workspace):
    report = as_nobody(workspace)
    assert "cgroups (" in report["refused"] and "allow_missing=('cgroups',)" in report["refused"]


def test_an_ordinary_users_environment_has_the_other_walls(workspace):
    report = as_nobody(workspace, "allow")
    assert report["uid"] == NOBODY and "cgroups" not in report["isolation"]
    assert report["id"] == [0, "1000\n1000\n"]
    caps = dict(line.split(":\t") for line in report["caps"][1].splitlines())
    assert int(caps["CapEff"], 16) == 0 and int(caps["CapBnd"], 16) == 0
    assert caps["NoNewPrivs"] == "1" and caps["Seccomp"] == "2"
    assert report["shadow"][0] != 0
    assert report["host_tmp"][1].split() == [workspace.parts[2]]
    assert report["network"] == [0, ""]
    assert report["write"] == [0, "1000\n"] and report["owner_on_host"] == NOBODY
    assert report["sleepers_before"] and report["sleepers_after"] == []
