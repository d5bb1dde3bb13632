"""Code Mode's public entry: the seam, its budgets and the backends, importable from one place.

The pieces live beside this module: :mod:`.contract` (what every backend promises, and
the budgets), :mod:`.bounds` (the host side's bounds), :mod:`.backends` (which backend a
config means on this host), :mod:`.sandbox` (CPython behind the kernel's walls, forked by
:mod:`.forkserver`) and :mod:`.monty` (the Monty interpreter). Nothing imports this
module back, so there is no import circle.
"""

from __future__ import annotations

from typing import Any

from .backends import dialect, make_runtime, resolved_backend
from .bounds import TRUNCATED, VALUE_MARKER, Ledger, cap_error, cap_value
from .contract import BACKENDS, Binding, CodeRuntime, CodeRuntimeConfig, RunError, RunResult, check_run

__all__ = ["BACKENDS", "TRUNCATED", "VALUE_MARKER", "Binding", "CodeRuntime", "CodeRuntimeConfig", "Ledger",
           "MontyRuntime", "RunError", "RunResult", "SubprocessRuntime", "cap_error", "cap_value", "check_run",
           "dialect", "make_runtime", "resolved_backend"]


def __getattr__(name: str) -> Any:  # the backends, importable from here without importing both
    if name == "SubprocessRuntime":
        from .sandbox import SubprocessRuntime

        return SubprocessRuntime
    if name == "MontyRuntime":
        from .monty import MontyRuntime

        return MontyRuntime
    raise AttributeError(name)
