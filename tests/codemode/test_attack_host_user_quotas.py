"""Attack: a run spends the host user's own kernel quotas (found by a security review).

The program's user namespace is created by the launcher while it is still the host's uid
(root here), so the kernel charges the namespace's per-user counts (ucounts) to that uid
in the parent namespace too. A run that holds POSIX timers (pending-signal slots) or
inotify watches uses up the host user's quota: while the run lasts (up to ``max_wall_ms``,
sleeping, so no compute budget is spent), the host process — and every other process of
that user on the machine — is refused. Judged from outside: the host's own
``timer_create`` / ``inotify_add_watch`` / ``inotify_init1`` calls during the run.
"""

import asyncio
import ctypes
import os

import pytest

from dsh_actors.codemode.contract import CodeRuntimeConfig
from dsh_actors.codemode.sandbox import SubprocessRuntime

libc = ctypes.CDLL(None, use_errno=True)


@pytest.fixture(scope="module")
def runtime():
    rt = SubprocessRuntime(CodeRuntimeConfig(backend="cpython", compute_ms=10_000, max_wall_ms=20_000))
    yield rt
    rt.close()


def host_timer_create():
    """0 if this (host) process can create a POSIX timer now, else the errno."""
    timer = ctypes.c_void_p()
    if libc.timer_create(1, None, ctypes.byref(timer)) != 0:  # CLOCK_MONOTONIC, SIGEV_SIGNAL
        return ctypes.get_errno()
    libc.timer_delete(timer)
    return 0


def host_inotify_watch(path):
    """0 if this (host) process can add an inotify watch now, else the errno."""
    fd = libc.inotify_init1(0)
    if fd < 0:
        return ctypes.get_errno()
    try:
        return 0 if libc.inotify_add_watch(fd, os.fsencode(path), 0x100) >= 0 else ctypes.get_errno()
    finally:
        os.close(fd)


async def probe_during(runs, probe, first_s=0.5):
    """The host's probe results every 200 ms while the runs go, and the runs' results."""
    tasks = [asyncio.ensure_future(run) for run in runs]
    await asyncio.sleep(first_s)
    seen = []
    while not all(task.done() for task in tasks):
        seen.append(probe())
        await asyncio.sleep(0.2)
    return seen, [task.result() for task in tasks]


TIMERS = """
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
timer, made = ctypes.c_long(), 0
while libc.syscall(222, 1, None, ctypes.byref(timer)) == 0:   # timer_create until refused
    made += 1
time.sleep(3)
return made
"""

WATCHES = """
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
paths = []
for root, dirs, files in os.walk(os.path.dirname(os.__file__)):   # the read-only install
    paths += [os.path.join(root, n).encode() for n in dirs + files]
    if len(paths) > 4000:
        break
watches, full = 0, False
while not full:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    for p in paths:
        if libc.inotify_add_watch(fd, p, 0x20) >= 0:
            watches += 1
        elif ctypes.get_errno() == 28:   # ENOSPC: the user's max_user_watches is reached
            full = True
            break
time.sleep(3)
return watches
"""

INSTANCES = """
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
held = 0
while libc.inotify_init1(0) >= 0:
    held += 1
time.sleep(3)
return held
"""


def test_a_run_holding_posix_timers_leaves_the_host_user_none(runtime):
    assert host_timer_create() == 0
    seen, (result,) = asyncio.run(probe_during([runtime.run(TIMERS, {})], host_timer_create))
    assert result.error is None, result  # the run made ~RLIMIT_SIGPENDING timers and slept
    assert set(seen) == {0}, f"the host's timer_create failed during the run: errnos {seen}, run made {result.value}"


def test_a_run_holding_inotify_watches_leaves_the_host_user_none(runtime, tmp_path):
    assert host_inotify_watch(tmp_path) == 0
    seen, (result,) = asyncio.run(probe_during([runtime.run(WATCHES, {})], lambda: host_inotify_watch(tmp_path),
                                               first_s=1.5))
    assert result.error is None, result
    assert set(seen) == {0}, f"the host's inotify_add_watch failed during the run: errnos {seen}"


def test_three_runs_holding_inotify_instances_leave_the_host_user_none(runtime, tmp_path):
    assert host_inotify_watch(tmp_path) == 0
    seen, results = asyncio.run(probe_during([runtime.run(INSTANCES, {}) for _ in range(3)],
                                             lambda: host_inotify_watch(tmp_path), first_s=1.0))
    assert all(r.error is None for r in results), results
    assert set(seen) == {0}, f"the host's inotify_init1 failed during the runs: errnos {seen}"
