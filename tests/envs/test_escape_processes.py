"""Escapes through other processes: signals, tracing and /proc of the host's processes and of
another environment's. Each environment sees and reaches its own processes only."""

import asyncio
import time

import pytest

from .host import Sentinel, processes_of

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def sentinel():
    process = Sentinel()
    yield process
    process.stop()


def test_a_host_process_can_be_neither_seen_nor_signalled(envs, env, sentinel):
    for attempt in (f"kill -9 {sentinel.pid}", f"kill -STOP {sentinel.pid}", f"cat /proc/{sentinel.pid}/cmdline",
                    f"ls /proc/{sentinel.pid}/root/", "pkill -9 sleep", "killall -9 sleep"):
        envs.sh(env, attempt)
    assert envs.sh(env, "ps -e -o comm").output.split().count(b"sleep") == 0
    assert sentinel.alive()


def test_killing_everything_it_may_reaches_only_its_own_processes(envs, env, sentinel):
    other = envs()
    assert envs.sh(other, "nohup sleep 300 >/dev/null 2>&1 &").exit_code == 0
    theirs = processes_of(other.uid)
    assert theirs
    envs.sh(env, "kill -9 -1; kill -9 -1")
    assert sentinel.alive()
    assert set(theirs) <= set(processes_of(other.uid))
    assert envs.sh(env, "echo still serving").output == b"still serving\n"  # its spawner died too, and came back


def test_another_environments_processes_are_out_of_reach_by_host_pid(envs, env):
    other = envs()
    assert envs.sh(other, "nohup sleep 300 >/dev/null 2>&1 &").exit_code == 0
    theirs = processes_of(other.uid)
    for pid in theirs:
        assert envs.sh(env, f"kill -9 {pid} || kill -9 -{pid}; cat /proc/{pid}/environ").exit_code != 0
    assert set(theirs) <= set(processes_of(other.uid))


def test_two_environments_have_different_uids(envs, env):
    other = envs()
    assert env.uid != other.uid
    assert envs.sh(env, "id -u").output != envs.sh(other, "id -u").output


def test_the_init_ignores_signals_from_inside(envs, env):
    for attempt in ("kill -9 1", "kill -TERM 1", "kill -INT 1", "kill -STOP 1", "kill -SEGV 1"):
        envs.sh(env, attempt)
    assert envs.sh(env, "echo still here").output == b"still here\n"


def test_the_environments_processes_run_in_their_own_pid_namespace(envs, env):
    assert envs.sh(env, "echo $$").output.strip() != b"1"
    assert envs.sh(env, "ps -e -o pid= | wc -l").output.strip() in (b"3", b"4", b"5", b"6")


def test_stopping_or_killing_the_spawner_only_delays_the_next_command(envs, env):
    spawner = "$(pgrep -x dsh-envs-spawne)"  # its name, cut at 15 characters
    assert envs.sh(env, f"kill -STOP {spawner}").exit_code == 0
    assert envs.sh(env, "echo after a stop").output == b"after a stop\n"  # within SPAWN_TIMEOUT_S
    assert envs.sh(env, f"kill -9 {spawner}").exit_code in (0, 137)
    assert envs.sh(env, "echo after a kill").output == b"after a kill\n"


def test_a_command_handed_to_a_spawner_that_never_took_it_runs_once_on_the_next(envs, env):
    """A background process stops the spawner between two commands: the second is handed to
    it, never taken, and runs once on the spawner the init forks in its place (it used to end
    killed, as if it had run)."""
    spawner = "$(pgrep -x dsh-envs-spawne)"
    assert envs.sh(env, f"(sleep 0.5; kill -STOP {spawner}) >/dev/null 2>&1 &").exit_code == 0
    time.sleep(1.5)  # no command runs as it stops: the init notices only once one is handed to it
    ran = envs.sh(env, "echo handed >> ran.txt; echo handed")
    assert (ran.exit_code, ran.output, ran.signal) == (0, b"handed\n", None)
    assert envs.sh(env, "cat ran.txt").output == b"handed\n"


def test_a_command_cancelled_before_its_spawner_took_it_never_runs(envs, env, loop):
    spawner = "$(pgrep -x dsh-envs-spawne)"
    assert envs.sh(env, f"(sleep 0.5; kill -STOP {spawner}) >/dev/null 2>&1 &").exit_code == 0
    time.sleep(1.5)

    async def cancelled():  # well before the init looks at the spawner (a measure, WATCH_S after the send)
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(env.run("echo ran > cancelled.txt", timeout_s=20), 0.01)

    loop.run(cancelled())
    assert envs.sh(env, "echo next").output == b"next\n"  # after the init replaced the stopped spawner
    assert envs.sh(env, "ls").output.split() == []  # cancelled.txt never written
