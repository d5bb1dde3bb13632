"""Any process of the node uses a started environment by its address: connect(address)
speaks to the environment directly; the address's secret is required."""

import asyncio
import json
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from dsh_actors.envs import EnvironmentGoneError, EnvPathError
from dsh_actors.envs._client import EnvClient, format_address, parse_address
from dsh_actors.envs.native import connect

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]

OTHER_PROCESS = """
import asyncio, json, sys
from dsh_actors.envs.native import connect

async def main(address):
    env = connect(address)
    ran = await env.run("echo from $$ in $(pwd)", timeout_s=10)
    await env.write_file("note.txt", b"written by another process")
    return {"output": ran.output.decode(), "read": (await env.read_file("note.txt")).decode()}

print(json.dumps(asyncio.run(main(sys.argv[1]))))
"""


def test_another_process_runs_commands_and_file_tools_through_the_address(envs, env):
    done = subprocess.run([sys.executable, "-c", OTHER_PROCESS, env.address], cwd=ROOT, capture_output=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    assert report["output"].startswith("from ") and report["output"].endswith(f" in {env.spec.workspace}\n")
    assert report["read"] == "written by another process"
    assert Path(env.spec.workspace, "note.txt").stat().st_uid == env.uid


def test_a_wrong_secret_is_refused(envs, env):
    path, env_id, secret = parse_address(env.address)
    forged = connect(format_address(path, env_id, "0" * len(secret)))
    with pytest.raises(EnvironmentGoneError, match="refused this address"):
        envs.loop.run(forged.run("true", timeout_s=5))
    assert envs.sh(env, "echo unharmed").output == b"unharmed\n"


def test_an_environment_pickles_as_a_client_of_its_address(envs, env):
    client = pickle.loads(pickle.dumps(env))
    assert isinstance(client, EnvClient) and client.address == env.address and client.id == env.id
    assert envs.loop.run(client.run("echo via pickle", timeout_s=5)).output == b"via pickle\n"
    envs.loop.run(client.close())


def test_many_commands_at_once_each_get_their_own_answer(envs, env):
    async def many():
        return await asyncio.gather(*(env.run(f"sleep 0.$((RANDOM % 3)); echo {i}", timeout_s=20)
                                      for i in range(32)))

    results = envs.loop.run(many())
    assert [r.output for r in results] == [f"{i}\n".encode() for i in range(32)]


def test_the_working_folder_and_the_specs_variables_are_the_commands(envs, tmp_path):
    env = envs(env=(("PROJECT", "dsh"), ("PATH", "/usr/bin:/bin")))
    envs.sh(env, "mkdir -p sub/dir")
    assert envs.sh(env, "pwd; echo $PROJECT $HOME $PATH", cwd="sub/dir").output.split() == [
        f"{env.spec.workspace}/sub/dir".encode(), b"dsh", b"/tmp", b"/usr/bin:/bin"]
    with pytest.raises(EnvPathError):
        envs.sh(env, "pwd", cwd="/etc")


def test_misuse_fails_before_anything_is_sent(envs, env):
    with pytest.raises(ValueError):
        envs.loop.run(env.run("true", timeout_s=0))
    with pytest.raises(ValueError):
        envs.loop.run(env.run("true", timeout_s=5, max_output=-1))
    with pytest.raises(ValueError, match="128 KiB"):
        envs.loop.run(env.run("#" * (1 << 17), timeout_s=5))
    with pytest.raises(ValueError):
        connect("not an address")
