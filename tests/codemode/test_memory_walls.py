"""Memory a CPython program could hold outside its address-space limit: bounded or refused.

Where the host has a memory cgroup (here: cgroup v1, as root), each run has one of its
own, limited to the memory budget, so files in its tmpfs mounts, pipe buffers and kernel
memory count with its heap; the peak is read from the runtime's parent cgroup, outside
the sandbox. Everywhere, the routes a program never needs are refused by the kernel
(memfd, System V shared memory and message queues, POSIX message queues), /tmp and /work
are small, and threads are few.
"""

import asyncio
import os

import pytest

from dsh_actors.codemode.contract import CodeRuntimeConfig
from dsh_actors.codemode.sandbox import SubprocessRuntime

from .watch import watched

MB = 1 << 20
BUDGET_MB = 128


@pytest.fixture(scope="module")
def runtime():
    rt = SubprocessRuntime(CodeRuntimeConfig(backend="cpython", max_memory_mb=BUDGET_MB, compute_ms=10_000,
                                             max_wall_ms=30_000))
    yield rt
    rt.close()


def run(rt, program, **watch):
    return asyncio.run(watched(rt, program, {}, **watch))


REFUSED = {
    "memfd_create": "os.memfd_create('hold')",
    "System V shared memory": "ctypes.CDLL(None, use_errno=True).shmget(0, 64 << 20, 0o1600)",
    "System V message queues": "ctypes.CDLL(None, use_errno=True).msgget(0, 0o1600)",
    "POSIX message queues": "ctypes.CDLL(None, use_errno=True).syscall(240, b'/q', 0o102, 0o600, None)",
}


@pytest.mark.parametrize("route", list(REFUSED))
def test_routes_to_memory_outside_the_address_space_limit_are_refused(runtime, route):
    program = f"import os, ctypes\ntry:\n    r = {REFUSED[route]}\nexcept OSError as exc:\n    return exc.errno\nreturn r"
    result, _ = run(runtime, program)
    assert result.value in ("1", "-1"), (route, result)  # EPERM, or -1 from the raw call: refused


def test_tmpfs_files_are_small_and_count_against_the_memory_budget(runtime):
    program = ("import os\nwritten = {}\n"
               "for place in ('/tmp', '/work'):\n"
               "    written[place] = 0\n"
               "    try:\n"
               "        for n in range(10):\n"  # files of at most 16 MB each (the file-size limit)
               "            with open(f'{place}/fill{n}', 'wb') as f:\n"
               "                for _ in range(16):\n"
               "                    f.write(b'f' * (1 << 20))\n"
               "                    f.flush()\n"
               "                    written[place] += 1\n"
               "    except OSError as exc:\n"
               "        written[place] = (written[place], exc.errno)\n"
               "held = []\n"
               "for _ in range(40):\n"  # well under the address-space limit by itself
               "    held.append(bytearray(1 << 20))\n"
               "return [written, len(held)]")
    memory = runtime._cgroups.parents["memory"] if runtime._cgroups else None
    files = [os.path.join(memory, "memory.usage_in_bytes")] if memory else []
    result, watch = run(runtime, program, files=files)
    if memory:  # 128 MB of files and 40 MB of heap: only the memory cgroup sees they are over 128 MB
        assert result.error is not None and "memory budget exhausted" in result.error.message, result
        peak = watch.peaks.get(files[0], 0)
        assert 0 < peak <= (BUDGET_MB + 16) * MB, peak  # the kernel's count of all it held, files included
    else:  # no memory cgroup: the files stop at each mount's size
        written = eval(result.value)[0]  # noqa: S307 - the program's own report
        assert all(isinstance(w, tuple) and w[0] <= 64 for w in written.values()), written
    assert run(runtime, "return 'next'")[0].value == "next"


def test_a_thread_bomb_stops_at_the_task_limit(runtime):
    program = ("import threading, time\nthreading.stack_size(65536)\nstarted = 0\n"
               "try:\n"
               "    for _ in range(5000):\n"
               "        threading.Thread(target=time.sleep, args=(5,), daemon=True).start()\n"
               "        started += 1\n"
               "except RuntimeError:\n    pass\n"
               "return started")
    result, _ = run(runtime, program)
    assert result.error is None and int(result.value) < 100, result


def test_pipe_buffers_are_few_and_small(runtime):
    program = ("import os, fcntl\npipes = []\n"
               "try:\n"
               "    while True:\n"
               "        r, w = os.pipe()\n"
               "        try:\n            fcntl.fcntl(w, 1031, 1 << 20)\n"  # F_SETPIPE_SZ
               "        except OSError:\n            pass\n"
               "        os.set_blocking(w, False)\n"
               "        try:\n            while True:\n                os.write(w, b'p' * 65536)\n"
               "        except BlockingIOError:\n            pass\n"
               "        pipes.append((r, w))\n"
               "except OSError:\n    pass\n"
               "return len(pipes)")
    result, _ = run(runtime, program)
    assert result.error is None and int(result.value) <= 32, result  # 64 descriptors at most
