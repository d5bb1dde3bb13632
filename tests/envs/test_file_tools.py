"""The file tools (read_file, write_file) work inside the environment, beneath its workspace:
no path, link or rename race makes them touch anything outside it."""

import os
from pathlib import Path

import pytest

from dsh_actors.envs import EnvPathError

from .host import Canary

pytestmark = pytest.mark.timeout(90)


def read(envs, env, path, **options):
    return envs.loop.run(env.read_file(path, **options))


def write(envs, env, path, data):
    return envs.loop.run(env.write_file(path, data))


def test_files_are_written_and_read_by_relative_or_absolute_path_as_the_environments_user(envs, env):
    write(envs, env, "a/b/c.txt", b"deep")
    write(envs, env, f"{env.spec.workspace}/top.txt", b"top")
    assert read(envs, env, f"{env.spec.workspace}/a/b/c.txt") == b"deep"
    assert read(envs, env, "top.txt") == b"top" and read(envs, env, "./a/../top.txt") == b"top"
    assert read(envs, env, "top.txt", limit=2) == b"to"
    on_host = Path(env.spec.workspace, "a", "b", "c.txt")
    assert on_host.read_bytes() == b"deep" and on_host.stat().st_uid == env.uid
    assert envs.sh(env, "cat a/b/c.txt").output == b"deep"


def test_paths_outside_the_workspace_are_refused(envs, env, visible):
    for path in ("/etc/passwd", "../x", "a/../../x", str(visible["canary"]), "/tmp/x", f"{env.spec.workspace}x/y",
                 "", "/"):
        with pytest.raises(EnvPathError):
            read(envs, env, path)
        with pytest.raises(EnvPathError):
            write(envs, env, path, b"pwned")
    assert visible["canary"].intact()


def test_a_link_leading_out_leads_nowhere_for_reads_and_writes(envs, env, visible):
    canary = visible["canary"]
    envs.sh(env, f"ln -s {canary} abs; ln -s ../../../../../../..{canary} rel; ln -s /tmp tmpdir; "
                 f"ln -s /proc/self/root/etc/passwd magic; ln -s {visible['folder']} dir")
    for path in ("abs", "rel", "magic", "dir/canary.txt", "tmpdir/x"):
        with pytest.raises(EnvPathError):
            read(envs, env, path)
        with pytest.raises(EnvPathError):
            write(envs, env, path, b"pwned")
    with pytest.raises(EnvPathError):
        write(envs, env, "tmpdir/new/deeper.txt", b"pwned")
    assert canary.intact() and envs.sh(env, "ls -A /tmp").output.split() == [Path(env.spec.workspace).parts[2].encode()]


def test_a_link_inside_the_workspace_is_followed_for_reads_and_never_written_through(envs, env):
    write(envs, env, "real.txt", b"real")
    envs.sh(env, "ln -s real.txt alias")
    assert read(envs, env, "alias") == b"real"
    with pytest.raises(EnvPathError):
        write(envs, env, "alias", b"through")
    assert read(envs, env, "real.txt") == b"real"


def test_a_fifo_a_folder_and_a_missing_file_are_refused_without_waiting(envs, env):
    envs.sh(env, "mkfifo pipe; mkdir folder")
    for path in ("pipe", "folder", "missing"):
        with pytest.raises(EnvPathError):
            read(envs, env, path)
    with pytest.raises(EnvPathError):
        write(envs, env, "pipe", b"x")
    with pytest.raises(EnvPathError):
        write(envs, env, "folder", b"x")


def test_a_hidden_path_in_the_workspace_is_out_of_reach_of_the_file_tools(envs, tmp_path):
    workspace = tmp_path / "ws-hidden"
    secret = Canary(workspace / "private" / "key.pem", b"-----BEGIN KEY-----\n")
    env = envs(workspace=workspace, hidden=(str(secret.path.parent),))
    with pytest.raises(EnvPathError):
        read(envs, env, "private/key.pem")
    with pytest.raises(EnvPathError):
        write(envs, env, "private/key.pem", b"replaced")
    assert secret.intact()


SWAPPER = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
while True:  # RENAME_EXCHANGE: each name always exists, a folder one moment and a link the next
    libc.renameat2(-100, b"real", -100, b"real-link", 2)
    libc.renameat2(-100, b"real2", -100, b"real2-link", 2)
"""


def test_swapping_a_path_component_for_a_link_while_the_tools_run_never_reaches_outside(envs, env, visible):
    """Processes in the environment swap folders for links (to the visible canary's folder,
    to the environment's own /tmp) as fast as they can, atomically, while the tools read
    and write through them hundreds of times: each call works inside the workspace, or is
    refused."""
    write(envs, env, "swapper.py", SWAPPER.encode())
    envs.sh(env, f"mkdir -p real real2 /tmp/victim && echo inside > real/file && ln -s {visible['folder']} real-link "
                 "&& ln -s /tmp/victim real2-link")
    assert envs.sh(env, "nohup python3 swapper.py >/dev/null 2>&1 &").exit_code == 0
    outcomes = {"read": 0, "wrote": 0, "refused": 0}
    for attempt in range(400):
        for path in ("real/file", "real/canary.txt"):
            try:
                assert read(envs, env, path) == b"inside\n"
                outcomes["read"] += 1
            except EnvPathError:
                outcomes["refused"] += 1
        try:
            write(envs, env, f"real2/new-{attempt}.txt", b"mine")
            outcomes["wrote"] += 1
        except EnvPathError:
            outcomes["refused"] += 1
    envs.sh(env, "pkill -f swapper.py; true")
    assert outcomes["refused"] > 20 and outcomes["wrote"] > 20 and outcomes["read"] > 20, outcomes
    assert visible["canary"].intact() and not list(visible["folder"].glob("new-*"))
    assert envs.sh(env, "ls -A /tmp/victim").output == b""
    written = list(Path(env.spec.workspace).rglob("new-*.txt"))
    assert len(written) == outcomes["wrote"]
    assert all(p.read_bytes() == b"mine" and os.path.commonpath([p, env.spec.workspace]) == env.spec.workspace
               for p in written)
