"""Where the host lacks a wall, starting an environment is refused with a message naming
it and the explicit opt-out; an unsandboxed shell is never the silent default."""

import uuid

import pytest

from dsh_actors.envs import EnvironmentUnavailableError, EnvSpec
from dsh_actors.envs import _cgroups, native
from dsh_actors.envs.native import NativeBackend

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def host(monkeypatch):
    """A host whose probe reports what the test says."""
    report = dict(native.probe())

    def lacking(name, why):
        report[name] = why
        monkeypatch.setattr(native, "probe", lambda: dict(report))

    return lacking


def start(loop, backend, tmp_path):
    workspace = tmp_path / f"ws-{uuid.uuid4().hex[:6]}"
    workspace.mkdir()
    return loop.run(backend.start(f"refusal-{uuid.uuid4().hex[:8]}", EnvSpec(workspace=str(workspace))))


def test_a_missing_wall_refuses_the_start_naming_it_and_the_opt_out(loop, tmp_path, host):
    host("landlock", "landlock: not supported by this kernel")
    backend = NativeBackend()
    with pytest.raises(EnvironmentUnavailableError) as refused:
        start(loop, backend, tmp_path)
    assert "landlock (landlock: not supported by this kernel)" in str(refused.value)
    assert "NativeBackend(allow_missing=('landlock',))" in str(refused.value)
    assert refused.value.code == "ENV_UNAVAILABLE" and refused.value.infra
    assert backend.environments == {}
    loop.run(backend.close())


def test_the_operator_may_excuse_a_missing_wall_explicitly(loop, tmp_path, host):
    host("landlock", "landlock: not supported by this kernel")
    backend = NativeBackend(allow_missing=("landlock",))
    env = start(loop, backend, tmp_path)
    assert "landlock" not in backend.isolation and "seccomp" in backend.isolation
    assert loop.run(env.run("echo walled otherwise", timeout_s=10)).output == b"walled otherwise\n"
    loop.run(backend.close())


def test_missing_cgroups_are_refused_unless_excused(loop, tmp_path, monkeypatch):
    lacking = {"memory": "cannot make a cgroup: Permission denied"}
    monkeypatch.setattr(_cgroups, "make_parents", lambda tag: ([], lacking))
    backend = NativeBackend()
    with pytest.raises(EnvironmentUnavailableError,
                       match=r"cgroups \(memory: cannot make a cgroup.*allow_missing=\('cgroups',\)"):
        start(loop, backend, tmp_path)
    excused = NativeBackend(allow_missing=("cgroups",))
    env = start(loop, excused, tmp_path)
    result = loop.run(env.run("sleep 30 & setsid sleep 31 & sleep 32", timeout_s=0.5))
    assert result.bound == "wall" and result.exit_code is None
    loop.run(excused.close())


def test_a_wall_no_environment_goes_without_cannot_be_excused(loop, tmp_path, host):
    host("mountns", "unshare: Operation not permitted")
    with pytest.raises(EnvironmentUnavailableError, match="mountns .*No environment goes without these"):
        start(loop, NativeBackend(), tmp_path)
    with pytest.raises(ValueError, match="no environment goes without"):
        NativeBackend(allow_missing=("mountns",))
    with pytest.raises(ValueError, match="unknown walls"):
        NativeBackend(allow_missing=("selinux",))
