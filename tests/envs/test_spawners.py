"""An environment's spawners, seen from the host: one per command in flight, each parked in its
command's slot, so that overlapping commands are born where a spawner already is (a cgroup
move takes a node-wide lock, and after an idle spell waits for an RCU grace period); the pool
has a cap, and the idle spawners beyond the first exit."""

import asyncio
import time
from pathlib import Path

import pytest

from dsh_actors.envs import DiskBoundError
from dsh_actors.envs.native import NativeBackend

from .host import processes_of, wait_until

pytestmark = pytest.mark.timeout(60)

IDLE_S = 2.0


@pytest.fixture(scope="module")
def backend(loop):
    """Spare spawners kept 2 s (30 s by default), so that their end is seen soon."""
    made = NativeBackend(spawner_idle_s=IDLE_S)
    yield made
    loop.run(made.close())


def spawners_of(env):
    """``{host pid: its /proc/<pid>/cgroup}`` of the environment's spawners."""
    found = {}
    for pid in processes_of(env.uid):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == "dsh-envs-spawne":  # cut at 15 characters
                found[pid] = Path(f"/proc/{pid}/cgroup").read_bytes()
        except OSError:
            pass
    return found


def wave(loop, env, command, count, timeout_s=20.0):
    async def together():
        return await asyncio.gather(*(env.run(command, timeout_s=timeout_s) for _ in range(count)))
    return loop.run(together())


def test_overlapping_commands_each_get_a_spawner_that_stays_in_their_slot(envs, env, loop):
    first = wave(loop, env, "cat /proc/self/cgroup; sleep 0.5", 6)
    assert all(r.exit_code == 0 for r in first)
    slots = {r.output for r in first}
    assert len(slots) == 6  # each command tracked in a cgroup of its own
    parked = spawners_of(env)
    assert len(parked) == 6 and set(parked.values()) == slots  # each spawner in the slot it spawned in

    second = wave(loop, env, "cat /proc/self/cgroup; sleep 0.5", 6)
    assert {r.output for r in second} == slots
    assert spawners_of(env) == parked  # the same processes, where they were: no move, no new one


def test_a_command_killed_in_its_slot_spares_the_spawner_parked_there(envs, env, loop):
    killed = wave(loop, env, "sleep 30 & sleep 30", 3, timeout_s=0.5)
    assert [r.bound for r in killed] == ["wall"] * 3
    parked = spawners_of(env)
    assert len(parked) == 3
    again = wave(loop, env, "echo again", 3)
    assert [r.output for r in again] == [b"again\n"] * 3
    assert spawners_of(env) == parked


def test_the_pool_is_capped_by_the_processes_bound_and_its_idle_spawners_exit(envs, loop):
    env = envs(processes=32)  # at most 32 // 8 = 4 spawners
    ran = wave(loop, env, "cat /proc/self/cgroup; sleep 0.5", 8)
    assert all(r.exit_code == 0 for r in ran)
    assert len({r.output for r in ran}) == 8  # past the cap a spawner moves: still a slot each
    assert len(spawners_of(env)) == 4
    assert wait_until(lambda: len(spawners_of(env)) == 1, timeout_s=IDLE_S + 5)
    assert envs.sh(env, "echo after").output == b"after\n"


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), 3e6])
def test_the_backend_refuses_a_spawner_idle_time_that_is_not_seconds(bad):
    with pytest.raises(ValueError, match="spawner_idle_s is seconds, from 0 to 86400"):
        NativeBackend(spawner_idle_s=bad)


def test_commands_that_kill_their_own_spawner_are_each_answered_and_run_once(envs, env, loop):
    """A spawner's ``pid`` message may still be unread when the init reaps its orphaned bash
    (with a spawner per command, 16 die at once): each command is answered all the same."""
    ran = wave(loop, env, "kill -9 $PPID; echo $RANDOM$$ >> log", 16, timeout_s=10)
    assert len(ran) == 16 and all(r.bound in (None, "wall") for r in ran)
    lines = envs.sh(env, "cat log").output.split()
    assert len(lines) == len(set(lines)) <= 16  # none ran twice
    assert envs.sh(env, "echo after").output == b"after\n"


def test_commands_handed_to_a_stopped_spawner_past_its_socket_buffer_each_run_once(envs, loop):
    """One spawner (processes=15), stopped for a second by a command: six commands of 120 KiB
    fill its socket. The init hands them again as room comes, finds it stopped, kills it and
    gives them to another; none runs twice (it used to take the full socket for a dead
    spawner, and the stopped one ran what it had queued once it went on)."""
    env = envs(processes=15)
    spawner = "$(pgrep -x dsh-envs-spawne)"
    stopper = f"(sleep 0.3; kill -STOP {spawner}; sleep 1; kill -CONT {spawner}) >/dev/null 2>&1 &"
    assert envs.sh(env, stopper).exit_code == 0
    time.sleep(0.8)
    pad = "#" + "x" * (120 * 1024)

    async def together():
        return await asyncio.gather(*(env.run(f"echo {i} >> log\n{pad}", timeout_s=30) for i in range(6)))
    ran = loop.run(together())
    time.sleep(1.5)  # the stopped spawner would have gone on by now
    assert [r.exit_code for r in ran] == [0] * 6
    assert sorted(envs.sh(env, "cat log").output.split(), key=int) == [str(i).encode() for i in range(6)]


def test_writing_below_the_disk_bound_leaves_it_unspent(envs):
    """The bytes a command wrote were counted twice once it ended (read live, then reported by
    its spawner): 40 MB of 64 spent the bound for good."""
    env = envs(disk_mb=64)
    assert envs.sh(env, "head -c 40000000 /dev/zero > big && sync big").exit_code == 0
    after = envs.sh(env, "echo still")
    assert (after.output, after.bound) == (b"still\n", None)


def test_a_spare_stopped_before_it_retires_keeps_its_bytes_in_the_disk_bound(envs, loop):
    """Four commands write 60 MB of a 100 MiB bound on four spawners; one command stops the
    other spawners; they retire (killed, their counts the init's once reaped): 50 MB more is
    still refused (the stopped spares' bytes used to drop out of the count, and it fit)."""
    env = envs(disk_mb=100)
    wrote = wave(loop, env, "head -c 15000000 /dev/zero > f$$ && sleep 0.3", 4)
    assert [r.exit_code for r in wrote] == [0] * 4
    stop = "for p in $(pgrep -x dsh-envs-spawne); do [ $p != $PPID ] && kill -STOP $p; done; echo stopped"
    assert envs.sh(env, stop).output == b"stopped\n"
    assert wait_until(lambda: len(spawners_of(env)) == 1, timeout_s=IDLE_S + 5)
    with pytest.raises(DiskBoundError):
        loop.run(env.write_file("big", b"\0" * 50_000_000))
