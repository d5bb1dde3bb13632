"""Attack: one run watches what another run (or the host) opens (found by a security review).

Every sandbox bind-mounts the same host inodes read-only (the Python install, ``/usr/lib``),
and ``inotify`` is not refused: a run can watch them and is told, with timing, whenever any
other process opens them — which modules a concurrent run imports, and when a process
starts on the host (its loader opens ``libc``). Judged from outside: the spy run's result
names the module the victim run imported after the spy started.
"""

import asyncio
import os

import pytest

from dsh_actors.codemode.contract import CodeRuntimeConfig
from dsh_actors.codemode.sandbox import SubprocessRuntime


@pytest.fixture(scope="module")
def runtime():
    rt = SubprocessRuntime(CodeRuntimeConfig(backend="cpython", compute_ms=3000, max_wall_ms=20_000))
    yield rt
    rt.close()


SPY = """
import ctypes, os, select, struct, time
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
if fd < 0:
    return "refused"
cache = os.path.join(os.path.dirname(os.__file__), "sqlite3", "__pycache__")
libc.inotify_add_watch(fd, cache.encode(), 0x20)   # IN_OPEN of anything in it
seen, end = [], time.monotonic() + 3
while time.monotonic() < end:
    if select.select([fd], [], [], 0.1)[0]:
        data, off = os.read(fd, 4096), 0
        while off < len(data):
            _, _, _, size = struct.unpack_from("iIII", data, off)
            seen.append(data[off + 16:off + 16 + size].rstrip(bytes(1)).decode())
            off += 16 + size
return sorted(set(seen))
"""

VICTIM = "import time\ntime.sleep(1)\nimport sqlite3\nreturn 'imported'"


def test_a_run_cannot_see_what_a_concurrent_run_imports(runtime):
    if not os.path.isdir(os.path.join(os.path.dirname(os.__file__), "sqlite3", "__pycache__")):
        pytest.skip("no compiled sqlite3 package in this install")

    async def scenario():
        spy = asyncio.ensure_future(runtime.run(SPY, {}))
        await asyncio.sleep(0.3)
        victim = await runtime.run(VICTIM, {})
        return await spy, victim

    spy, victim = asyncio.run(scenario())
    assert victim.value == "imported" and spy.error is None, (spy, victim)
    assert spy.value in ("refused", "[]"), f"the spy run saw the victim run open {spy.value}"
