"""What the operating system can wall a sandbox in with, and how a sandbox is launched.

The CPython sandbox's boundary is the kernel's, never Python's: an audit hook or a block
list inside the sandboxed interpreter can be reached and undone by the program it is meant
to contain. The mechanisms, each applied afresh for every run by ``_walls.py`` before the
program is read:

=============  ===========================================================================
``userns``     the program's uid/gid map to an unprivileged outside id; no capabilities
``mountns``    a private root: the Python install and system libraries read-only, an empty
               ``/tmp``, a private ``/work``, a minimal ``/dev``; no ``/proc``, no site dirs
``pidns``      its own PID namespace whose PID 1 is a reaper: nothing outlives the run
``netns``      a network namespace with no interfaces
``ipcns``      its own System V IPC and POSIX message queues
``landlock``   files: read the install, write ``/work`` and ``/tmp``; no TCP; no signals
               or abstract sockets outside the sandbox (kernel Landlock ABI ≥ 6 for scopes)
``seccomp``    no process creation, exec, ptrace, mounts, namespaces, keyrings, BPF,
               io_uring, memfd, System V or POSIX IPC, or other calls a program never
               needs; AF_UNIX sockets only
=============  ===========================================================================

Where the host has them (a writable memory and pids cgroup hierarchy, as root on cgroup v1,
or a delegated cgroup v2 subtree), each run also gets cgroups of its own
(:func:`cgroup_parents`): its resident memory — heap, tmpfs files, pipe and socket
buffers, kernel memory — is bounded by the memory budget, and its threads by a count.
Without them, the routes to memory the address-space limit does not count are refused
(see the seccomp row) and ``/tmp`` and ``/work`` are small tmpfs mounts.

Why these tools: namespaces, pivot_root and the id maps are a handful of system calls
made through ``ctypes`` (bubblewrap would do the same, but it is a system package the
project cannot install with pip); the seccomp filter is compiled by libseccomp through
``pyseccomp`` (it handles architectures and the x32 ABI, which hand-written BPF gets
wrong); Landlock rules go through ``landlockpy`` (ABI-aware, typed).

:func:`probe` tries every mechanism once per process in a throwaway launcher. A runtime
refuses to start when one is missing unless the operator named it in ``allow_missing``.
"""

from __future__ import annotations

import ctypes.util
import functools
import json
import os
import site
import subprocess
import sys
from pathlib import Path
from typing import Iterable

from ..core.errors import HarnessError

__all__ = ["MECHANISMS", "CgroupParents", "SandboxUnavailableError", "cgroup_parents", "launch_config", "probe",
           "required"]

MECHANISMS = ("userns", "mountns", "pidns", "netns", "ipcns", "landlock", "seccomp")

LAUNCHER = str(Path(__file__).with_name("_launcher.py"))


class SandboxUnavailableError(HarnessError):
    """The host lacks an isolation mechanism the operator did not agree to do without."""

    code = "SANDBOX_UNAVAILABLE"


def _library_dirs() -> list[str]:
    """Directories holding the launcher's imports (and nothing the program will see)."""
    import landlockpy
    import msgpack
    import pyseccomp

    dirs = {str(Path(__file__).parent)}
    for module in (msgpack, landlockpy):
        dirs.add(str(Path(module.__file__).parent.parent))  # type: ignore[arg-type]
    dirs.add(str(Path(pyseccomp.__file__).parent))  # type: ignore[arg-type]
    return sorted(dirs)


def _hidden_dirs() -> list[str]:
    """Every site directory the sandbox could see — this interpreter's, the base
    interpreter's and the system's (``dist-packages`` under the read-only paths): inside
    the sandbox nothing installed is importable, only the standard library."""
    import glob
    import sysconfig

    found = set(site.getsitepackages()) | set(site.getsitepackages([sys.base_prefix])) | {site.getusersitepackages()}
    found |= {p for p in sys.path if p.endswith(("site-packages", "dist-packages"))}
    for scheme_var in ("purelib", "platlib"):
        found.add(sysconfig.get_paths(vars={"base": sys.base_prefix, "platbase": sys.base_prefix})[scheme_var])
    for root in _readonly_paths():
        for depth in ("*", "*/*", "*/*/*"):
            found |= {p for p in glob.glob(os.path.join(root, depth)) if p.endswith(("site-packages", "dist-packages"))}
    return sorted({os.path.realpath(p) for p in found if p and os.path.isdir(p)})


def _readonly_paths() -> list[str]:
    paths = [os.path.realpath(sys.base_prefix)]
    paths += [p for p in ("/usr/lib", "/usr/lib64", "/usr/lib32", "/usr/libx32") if os.path.isdir(p)]
    paths += [p for p in ("/etc/ld.so.cache",) if os.path.exists(p)]
    unique: list[str] = []
    for path in sorted(set(paths)):
        if not any(path.startswith(parent.rstrip("/") + "/") for parent in unique):
            unique.append(path)
    return unique


@functools.lru_cache(maxsize=None)
def _sonames() -> dict[str, str]:
    return {name: found for name in ("c", "seccomp") if (found := ctypes.util.find_library(name))}


def interpreter() -> str:
    """The base interpreter (a venv's python is only a pointer to it)."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def library_dirs() -> list[str]:
    """Where the trusted entry points find their imports."""
    return _library_dirs()


def sonames() -> dict[str, str]:
    """The paths of the C library and libseccomp, resolved once here: the trusted entry
    points (Code Mode's and Episode environments') cannot run ``ldconfig`` behind walls."""
    return _sonames()


OUTSIDE_RANGE = (200_000, 4096)
"""The outside uids (and gids) a root host gives its runs, one each while it runs: the
kernel's per-user counts (timers, pipes, pending signals) are then a run's own."""


def launch_config(*, mechanisms: Iterable[str], root: str, outside_ids: tuple[int, int] | None, limits: dict[str, int],
                  disk_mb: int, cgroups: Iterable[tuple[str, list[tuple[str, int]]]] = (),
                  probe: bool = False) -> dict[str, object]:
    """What ``_walls.Launch`` applies for a run (and, with ``probe``, reports on).
    ``outside_ids`` ``None``: each run gets ids of its own from :data:`OUTSIDE_RANGE`."""
    root_host = os.geteuid() == 0
    return {
        "mechanisms": sorted(mechanisms), "root": root, "probe": probe, "host_root": root_host,
        "outside_ids": (list(outside_ids) if outside_ids is not None else None) if root_host else [0, 0],
        "outside_range": list(OUTSIDE_RANGE),
        "libs": _library_dirs(), "sonames": _sonames(), "readonly": _readonly_paths(), "hidden": _hidden_dirs(),
        "limits": limits, "disk_mb": disk_mb, "fallback_workdir": root,
        "cgroups": [[parent, [list(limit) for limit in limits_of]] for parent, limits_of in cgroups],
    }


@functools.lru_cache(maxsize=8)
def probe(outside_ids: tuple[int, int] = (65534, 65534)) -> dict[str, str]:
    """Each mechanism's state on this host: ``"ok"`` or why it is missing (cached)."""
    root = _mount_point()
    config = launch_config(mechanisms=MECHANISMS, root=root, outside_ids=outside_ids, probe=True,
                           limits={"cpu_s": 5, "memory_bytes": 512 * 2**20, "file_bytes": 2**20}, disk_mb=1)
    try:
        done = subprocess.run([interpreter(), "-I", "-S", "-B", LAUNCHER, json.dumps(config)], env={},
                              capture_output=True, timeout=30, cwd="/")
        report = json.loads(done.stdout.decode() or "{}")
    except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
        report = {"launcher": f"{type(exc).__name__}: {exc}"}
    if not isinstance(report, dict):
        report = {}
    return {name: str(report.get(name, "not reached: the launcher failed before it")) for name in MECHANISMS}


def required(mechanisms_state: dict[str, str], allow_missing: Iterable[str]) -> tuple[str, ...]:
    """The mechanisms to apply; raises when one is missing and not allowed to be."""
    allowed = set(allow_missing)
    unknown = allowed - set(MECHANISMS)
    if unknown:
        raise ValueError(f"dsh-code-runtime: unknown isolation mechanisms {sorted(unknown)}; known: {list(MECHANISMS)}")
    missing = {name: why for name, why in mechanisms_state.items() if why != "ok"}
    refused = {name: why for name, why in missing.items() if name not in allowed}
    if refused:
        detail = "; ".join(f"{name} ({why})" for name, why in sorted(refused.items()))
        raise SandboxUnavailableError(
            f"dsh-code-runtime: this host cannot isolate untrusted code: missing {detail}. Fix the host, or accept "
            f"weaker isolation explicitly with allow_missing={sorted(refused)!r}, or use the monty backend")
    return tuple(name for name in MECHANISMS if name not in missing)


@functools.lru_cache(maxsize=1)
def _mount_point() -> str:
    """An empty directory each sandbox mounts its own root over, privately (never removed:
    every process shares it, and it holds nothing)."""
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"dsh-sandbox-root-{os.geteuid()}"
    path.mkdir(mode=0o755, exist_ok=True)
    return str(path)


mount_point = _mount_point


# --- cgroups of the runs' own ----------------------------------------------------------------

_V1 = "/sys/fs/cgroup"


class CgroupParents:
    """This process's parent cgroups for its runs (one per controller), made on first use
    and removed by :meth:`close`; each run's launcher makes ``run-<pid>`` under them."""

    def __init__(self, parents: dict[str, str], version: int) -> None:
        self.parents, self.version = parents, version

    def limits(self, memory_bytes: int, tasks: int) -> list[tuple[str, list[tuple[str, int]]]]:
        """``(parent, [(file, value), ...])`` for a run with these limits."""
        out = []
        for controller, parent in sorted(self.parents.items()):
            if controller == "memory":
                if self.version == 1:
                    files = [("memory.limit_in_bytes", memory_bytes)]
                    if os.path.exists(os.path.join(parent, "memory.memsw.limit_in_bytes")):
                        files.append(("memory.memsw.limit_in_bytes", memory_bytes))
                else:
                    files = [("memory.max", memory_bytes)]
                    if os.path.exists(os.path.join(parent, "memory.swap.max")):
                        files.append(("memory.swap.max", 0))
            else:
                files = [("pids.max", tasks)]
            out.append((parent, files))
        return out

    def close(self) -> None:
        for parent in set(self.parents.values()):
            _remove_tree(parent)


def _remove_tree(parent: str) -> None:
    try:
        for entry in os.scandir(parent):
            if entry.is_dir(follow_symlinks=False) and entry.name.startswith("run-"):
                try:
                    os.rmdir(entry.path)
                except OSError:
                    pass
        os.rmdir(parent)
    except OSError:
        pass


def _own_cgroups() -> tuple[dict[str, str], int]:
    """This process's cgroup directories by controller (``memory``, ``pids``), and the version."""
    found: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return found, 0
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for controller in controllers.split(","):
            if controller in ("memory", "pids"):
                found[controller] = os.path.join(_V1, controller, path.lstrip("/"))
    if found:
        return found, 1
    unified = next((line.split(":", 2)[2] for line in lines if line.startswith("0::")), None)
    if unified is not None and os.path.exists(os.path.join(_V1, "cgroup.controllers")):
        here = os.path.join(_V1, unified.lstrip("/"))
        return {c: here for c in ("memory", "pids")}, 2
    return found, 0


def _sweep(directory: str) -> None:
    """Remove parents left by processes that died without removing them."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith("dsh-sandbox-"):
            try:
                owner = int(entry.name.split("-")[2])
            except (IndexError, ValueError):
                continue
            if not os.path.exists(f"/proc/{owner}"):
                _remove_tree(entry.path)


_parents_made = iter(range(1 << 62))


def cgroup_parents() -> CgroupParents | None:
    """Parent cgroups for this process's runs, or ``None`` where the host offers no memory
    cgroup this process may write (the routes are then refused instead: see the module)."""
    own, version = _own_cgroups()
    if "memory" not in own:
        return None
    name = f"dsh-sandbox-{os.getpid()}-{next(_parents_made)}"
    made: dict[str, str] = {}
    for directory in sorted(set(own.values())):
        _sweep(directory)
        parent = os.path.join(directory, name)
        try:
            os.mkdir(parent)
        except OSError:
            continue
        if version == 1:
            made.update({c: parent for c, d in own.items() if d == directory})
            continue
        try:  # cgroup v2: one directory; only the controllers delegated to it
            enabled = set(Path(parent, "cgroup.controllers").read_text().split())
        except OSError:
            enabled = set()
        made.update({c: parent for c in ("memory", "pids") if c in enabled})
        if not made:
            _remove_tree(parent)
    if "memory" not in made:
        for parent in set(made.values()):
            _remove_tree(parent)
        return None
    return CgroupParents(made, version)
