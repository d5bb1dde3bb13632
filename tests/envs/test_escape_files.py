"""Escapes through the file system, by commands: the workspace is the only writable place
(besides a private /tmp), and nothing of the host outside the system paths is there.

Every attempt is checked on the host: canary files keep their content and mtime."""

import os
import socket
import stat
import uuid
from pathlib import Path

import pytest

from .host import Canary

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def outside(tmp_path):
    """A canary in the host's /tmp, outside every workspace."""
    return Canary(tmp_path / "outside" / "secret.txt", b"host secret\n")


def test_a_command_cannot_write_remove_or_rename_a_visible_host_file(envs, env, visible):
    canary = visible["canary"]
    for attempt in (f"echo pwned > {canary}", f"echo pwned >> {canary}", f"rm -f {canary}",
                    f"mv {canary} /tmp/stolen", f"touch {canary}", f"chmod 777 {canary}",
                    f"truncate -s 0 {canary}", f"ln -f {canary} ./hardlink"):
        result = envs.sh(env, attempt)
        assert result.exit_code != 0, attempt
    assert canary.intact()
    assert envs.sh(env, f"cat {canary}").output == canary.content  # visible, read-only, by design


def test_the_host_system_is_read_only(envs, env):
    for target in ("/usr/bin/dsh-pwned", "/etc/dsh-pwned", "/bin/dsh-pwned", "/dsh-pwned", "/var/dsh-pwned",
                   "/home/dsh-pwned", "/root/dsh-pwned"):
        assert envs.sh(env, f"echo x > {target}").exit_code != 0, target
        assert not os.path.exists(target)
    assert envs.sh(env, "python3 -c 'print(1)' && git --version && bash --version | head -1").exit_code == 0


def test_the_host_tmp_is_not_there_and_its_own_tmp_is_private(envs, env, outside):
    assert envs.sh(env, f"cat {outside}").exit_code != 0
    assert envs.sh(env, f"echo pwned > {outside}").exit_code != 0
    name = f"dsh-envs-private-{uuid.uuid4().hex}"
    assert envs.sh(env, f"echo mine > /tmp/{name} && cat /tmp/{name}").output == b"mine\n"
    assert not os.path.exists(f"/tmp/{name}")
    assert outside.intact()


def test_another_environments_workspace_is_not_there(envs, env):
    other = envs()
    assert envs.sh(other, "echo theirs > notes.txt").exit_code == 0
    other_file = Path(other.spec.workspace) / "notes.txt"
    mtime = other_file.stat().st_mtime_ns
    assert envs.sh(env, f"cat {other_file}").exit_code != 0
    assert envs.sh(env, f"echo pwned > {other_file}").exit_code != 0
    assert envs.sh(env, f"ls {other.spec.workspace}").exit_code != 0
    assert other_file.read_bytes() == b"theirs\n" and other_file.stat().st_mtime_ns == mtime


def test_a_ray_session_folder_and_its_token_are_not_there(envs, env, tmp_path):
    session = Path("/tmp/ray") / f"session_dsh_envs_test_{uuid.uuid4().hex[:8]}"
    token = Canary(session / "auth_token", b"ray-token-0123456789\n")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(session / "raylet.sock"))
    sock.listen(1)
    sock.setblocking(False)
    try:
        assert envs.sh(env, f"cat {token}").exit_code != 0
        assert envs.sh(env, f"ls {session}").exit_code != 0
        attempt = f"python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect('{session}/raylet.sock')\""
        assert envs.sh(env, attempt).exit_code != 0
        with pytest.raises(BlockingIOError):
            sock.accept()
        assert token.intact()
    finally:
        sock.close()
        for path in (session / "raylet.sock", session / "auth_token"):
            path.unlink()
        session.rmdir()


def test_a_token_in_the_hosts_root_home_is_not_there(envs, env):
    token = Canary(Path("/root") / f".dsh-envs-test-token-{uuid.uuid4().hex[:8]}", b"ray auth token\n", 0o644)
    try:
        assert envs.sh(env, f"cat {token}").exit_code != 0
        assert envs.sh(env, "ls -A /root /home /run /mnt /sys").output.split() == [b"/home:", b"/mnt:", b"/root:",
                                                                                 b"/run:", b"/sys:"]
        assert token.intact()
    finally:
        token.path.unlink()


def test_the_hosts_run_and_var_tmp_are_not_there(envs, env):
    canaries = [Canary(Path(folder) / f"dsh-envs-test-{uuid.uuid4().hex[:8]}") for folder in ("/run", "/var/tmp")]
    try:
        for canary in canaries:
            assert envs.sh(env, f"cat {canary}").exit_code != 0
            assert envs.sh(env, f"echo x > {canary}").exit_code != 0
            assert canary.intact()
    finally:
        for canary in canaries:
            canary.path.unlink()


def test_a_path_the_spec_hides_is_covered_even_inside_the_workspace(envs, tmp_path):
    secret_dir = tmp_path / "ws-0" / "outputs"
    secret_dir.mkdir(parents=True)
    canary = Canary(secret_dir / "grades.json", b'{"answer": 42}\n')
    env = envs(workspace=tmp_path / "ws-0", hidden=(str(secret_dir),))
    assert envs.sh(env, f"ls -A {secret_dir}").output == b""
    assert envs.sh(env, f"cat {canary}").exit_code != 0
    assert envs.sh(env, f"echo x > {secret_dir}/new").exit_code != 0
    assert canary.intact() and not (secret_dir / "new").exists()


def test_a_setuid_root_binary_gives_no_privilege(envs, env, visible):
    copy = visible["folder"] / "suid-id"
    if not copy.exists():
        copy.write_bytes(Path("/usr/bin/id").read_bytes())
        copy.chmod(0o4755)
    assert copy.stat().st_mode & stat.S_ISUID and copy.stat().st_uid == 0
    output = envs.sh(env, f"{copy} -u; {copy} -ru").output.split()
    assert output[0] == output[1] != b"0"
    assert envs.sh(env, "sudo -n true || su -c true root").exit_code != 0


def test_commands_never_see_the_hosts_environment_variables(envs, env, monkeypatch):
    monkeypatch.setenv("DSH_ENVS_TEST_SECRET", "leaked")
    later = envs()  # started after the variable was set in the backend's process
    output = envs.sh(later, "env").output
    names = sorted(line.split(b"=", 1)[0] for line in output.splitlines())
    assert b"leaked" not in output
    assert set(names) <= {b"HOME", b"LANG", b"PATH", b"PWD", b"SHLVL", b"_", b"OLDPWD"}
