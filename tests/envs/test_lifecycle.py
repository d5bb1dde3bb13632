"""Ending an environment: every process in it dies, whatever it did to stay, and its mounts,
cgroups and socket go. Checked in the host's /proc and file system."""

import os
from pathlib import Path

import pytest

from dsh_actors.envs import EnvironmentGoneError
from dsh_actors.envs._client import parse_address
from dsh_actors.envs.native import connect

from .host import processes_of, wait_until

pytestmark = pytest.mark.timeout(60)

STAYERS = ("nohup sleep 600 >/dev/null 2>&1 &",
           "setsid sleep 601 >/dev/null 2>&1 < /dev/null &",
           "( (sleep 602 >/dev/null 2>&1 &) & )",  # double fork: its parent gone, it is the init's
           "bash -c 'trap \"\" TERM HUP INT; exec -a stubborn sleep 603' >/dev/null 2>&1 &",
           "python3 -c 'import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
           "        time.sleep(604)' >/dev/null 2>&1")


def traces(env):
    """What the host can see of an environment: its processes, their cgroups, its mount
    namespace, its socket."""
    pids = processes_of(env.uid)
    cgroups = set()
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
        except OSError:
            continue  # it ended meanwhile
        for line in lines:
            _, controllers, path = line.split(":", 2)
            if "dsh-envs-" in path:
                mount = "unified" if controllers == "" else controllers.split(",")[0]
                cgroups.add(os.path.join("/sys/fs/cgroup", mount, path.lstrip("/")))
    namespaces = set()
    for pid in pids:
        try:
            namespaces.add(os.readlink(f"/proc/{pid}/ns/mnt"))
        except OSError:
            pass
    return pids, cgroups, namespaces, parse_address(env.address)[0]


def mount_namespaces_in_use():
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.add(os.readlink(entry / "ns" / "mnt"))
            except OSError:
                pass
    return found


def test_ending_kills_daemons_double_forks_and_signal_ignorers_and_releases_everything(envs, env):
    for command in STAYERS:
        assert envs.sh(env, command).exit_code == 0, command
    pids, cgroups, namespaces, socket_path = traces(env)
    assert len(pids) >= 2 + len(STAYERS) and cgroups and os.path.exists(socket_path)
    envs.loop.run(env.end())
    assert processes_of(env.uid) == []
    assert not any(os.path.exists(path) for path in cgroups)
    assert not namespaces & mount_namespaces_in_use()
    assert not os.path.exists(socket_path)


def test_ending_twice_is_fine_and_later_calls_fail_env_gone(envs, env):
    envs.loop.run(env.end())
    envs.loop.run(env.end())
    with pytest.raises(EnvironmentGoneError):
        envs.sh(env, "true")
    with pytest.raises(EnvironmentGoneError):
        envs.loop.run(env.read_file("x"))


def test_a_client_may_end_it_and_its_owner_then_releases_the_rest(envs, env):
    assert envs.sh(env, "setsid sleep 600 >/dev/null 2>&1 < /dev/null &").exit_code == 0
    _, cgroups, _, socket_path = traces(env)
    client = connect(env.address)
    envs.loop.run(client.end())
    assert wait_until(lambda: processes_of(env.uid) == [])  # the init exits just after it answers
    with pytest.raises(EnvironmentGoneError):
        envs.loop.run(client.run("true", timeout_s=5))
    assert wait_until(lambda: not env.alive and not os.path.exists(socket_path))
    assert wait_until(lambda: not any(os.path.exists(path) for path in cgroups))
    assert env.id not in envs.backend.environments


def test_background_processes_outlive_their_command_until_the_end(envs, env):
    assert envs.sh(env, "nohup sleep 600 >/dev/null 2>&1 &").exit_code == 0
    assert envs.sh(env, "for i in $(seq 100); do pgrep -x sleep && exit; sleep 0.05; done; exit 1").exit_code == 0
    assert any(Path(f"/proc/{pid}/comm").read_text().strip() == "sleep" for pid in processes_of(env.uid))


def test_closing_the_backend_ends_every_environment_it_started(loop, tmp_path, visible):
    from dsh_actors.envs import EnvSpec
    from dsh_actors.envs.native import NativeBackend

    backend = NativeBackend()
    started = []
    for i in range(3):
        (tmp_path / f"w{i}").mkdir()
        env = loop.run(backend.start(f"close-{i}", EnvSpec(workspace=str(tmp_path / f"w{i}"))))
        loop.run(env.run("nohup sleep 600 >/dev/null 2>&1 &", timeout_s=10))
        started.append(env)
    uids = [env.uid for env in started]
    loop.run(backend.close())
    assert all(processes_of(uid) == [] for uid in uids)
    assert backend.environments == {}
