"""Attack: walls that do not hold as documented (found by a security review).

- "no capabilities anywhere": the program enters its user namespace while still root
  outside it, and its ``setresuid`` to the inside uid never clears capabilities (uid 0 is
  not mapped inside, so the kernel's root-to-nonroot rule does not apply): it runs with
  the full capability set of its user namespace.
- "no ... namespaces": with those capabilities, ``clone`` with ``CLONE_THREAD`` (which the
  filter lets through for threads) and ``CLONE_NEWNET`` / ``CLONE_NEWNS`` / ... gives the
  program threads in namespaces of its own. (No escape was found through them: seccomp and
  Landlock still refuse mounts, other socket families, signals.)
- "no installed packages" / "no site packages": only the venv's site directories are hidden;
  the base interpreter's ``site-packages`` (and ``/usr/lib/python3/dist-packages``) are
  readable and importable.

Judged from outside: the program process's ``/proc/<pid>/status`` and its threads'
``/proc/<pid>/task/*/ns/net`` read by the host while it runs; the path of a module the
run imported.
"""

import asyncio
import os
import site
import sys

import pytest

from dsh_actors.codemode.contract import CodeRuntimeConfig
from dsh_actors.codemode.sandbox import SubprocessRuntime

from .watch import processes_of

IDS = (65530, 65530)


@pytest.fixture(scope="module")
def runtime():
    rt = SubprocessRuntime(CodeRuntimeConfig(backend="cpython", compute_ms=3000, max_wall_ms=20_000),
                           warm_spare=False, outside_ids=IDS)
    yield rt
    rt.close()


def program_pids():
    return processes_of(IDS[0])


CLONE = """
import ctypes, time
libc = ctypes.CDLL(None, use_errno=True)
run = ctypes.cast(libc.syscall, ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p))   # the thread runs syscall(SYS_pause)
stack = ctypes.create_string_buffer(1 << 16)
flags = 0x100 | 0x400 | 0x800 | 0x10000 | 0x40000000 | 0x00020000   # VM FILES SIGHAND THREAD | NEWNET NEWNS
tid = libc.clone(run, ctypes.c_void_p(ctypes.addressof(stack) + (1 << 16) - 64), flags, ctypes.c_void_p(34))
time.sleep(2)
return tid
"""


def test_the_program_holds_no_capabilities_and_makes_no_namespaces(runtime):
    async def scenario():
        # Read once the program has run for 0.5 s (its clone is done; it then sleeps 2 s): its
        # sandbox may take a while to start on a busy machine, so wait for its process first.
        task = asyncio.ensure_future(runtime.run(CLONE, {}))
        while not program_pids() and not task.done():
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        seen = []
        for proc in program_pids():
            try:
                caps = next(line.split()[1] for line in (proc / "status").read_text().splitlines()
                            if line.startswith("CapEff:"))
                nets = {os.readlink(thread / "ns" / "net") for thread in (proc / "task").iterdir()}
            except OSError:
                continue
            seen.append((caps, nets))
        return seen, await task

    seen, result = asyncio.run(scenario())
    assert result.error is None and seen, (result, seen)
    for caps, nets in seen:
        assert int(caps, 16) == 0, f"the program runs with capabilities {caps}"
        assert len(nets) == 1, f"the program's threads are in {len(nets)} network namespaces: {nets}"


def test_the_base_interpreters_installed_packages_are_not_importable(runtime):
    base = [p for p in site.getsitepackages([sys.base_prefix]) if os.path.isdir(os.path.join(p, "attr"))]
    if not base:
        pytest.skip("no pure-Python package (attr) in the base interpreter's site-packages here")
    program = f"import sys\nsys.path.append({base[0]!r})\nimport attr\nreturn attr.__file__"
    result = asyncio.run(runtime.run(program, {}))
    assert result.error is not None and "ModuleNotFoundError" in result.error.message, result
