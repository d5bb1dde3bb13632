"""What the operating system can wall a sandbox in with, and how a sandbox is launched.

The CPython sandbox's boundary is the kernel's, never Python's: an audit hook or a block
list inside the sandboxed interpreter can be reached and undone by the program it is meant
to contain. The mechanisms, each applied by ``_launcher.py`` before the program is read:

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
               io_uring or other calls a program never needs; AF_UNIX sockets only
=============  ===========================================================================

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

__all__ = ["MECHANISMS", "SandboxUnavailableError", "launch_config", "probe", "required"]

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
    """Every site directory: inside the sandbox nothing installed is importable."""
    found = set(site.getsitepackages()) | {site.getusersitepackages()}
    found |= {p for p in sys.path if p.endswith(("site-packages", "dist-packages"))}
    return sorted(os.path.realpath(p) for p in found if p)


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


def launch_config(*, mechanisms: Iterable[str], root: str, frames_fd: int, outside_ids: tuple[int, int],
                  limits: dict[str, int], disk_mb: int, probe: bool = False) -> dict[str, object]:
    """The launcher's configuration (its one argument, as JSON)."""
    return {
        "mechanisms": sorted(mechanisms), "root": root, "frames_fd": frames_fd, "probe": probe,
        "host_root": os.geteuid() == 0, "outside_ids": list(outside_ids) if os.geteuid() == 0 else [0, 0],
        "libs": _library_dirs(), "sonames": _sonames(), "readonly": _readonly_paths(), "hidden": _hidden_dirs(),
        "limits": limits, "disk_mb": disk_mb, "fallback_workdir": root,
    }


@functools.lru_cache(maxsize=8)
def probe(outside_ids: tuple[int, int] = (65534, 65534)) -> dict[str, str]:
    """Each mechanism's state on this host: ``"ok"`` or why it is missing (cached)."""
    root = _mount_point()
    config = launch_config(mechanisms=MECHANISMS, root=root, frames_fd=1, outside_ids=outside_ids, probe=True,
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
