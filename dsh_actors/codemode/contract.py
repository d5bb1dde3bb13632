"""The code runtime seam: what every Code Mode backend promises, and the budgets it keeps.

A backend (:class:`CodeRuntime`) has a ``language`` (``"python"``), a ``dialect`` (the
language the SDK text tells the model it writes), an ``isolation`` label, and
``run(program, bindings, signal) -> RunResult``. Every program outcome is a result —
``RunResult.error`` with ``kind`` ``exception`` | ``timeout`` | ``abort`` | ``worker-exit``
— and only misuse raises. No state survives between runs.

The budgets (:class:`CodeRuntimeConfig`) bound the program *and* the host's side of its
run: what the host process (the node's executor, shared by every agent there) may hold,
copy or compute for one run. Each is a hard bound, the same on every backend:

=======================  ===========  ====================================================
budget                   default      when it is exceeded
=======================  ===========  ====================================================
``compute_ms``           60 s         the run ends: ``timeout`` "compute budget exhausted";
                                      the program's CPU *and* the host's CPU spent on its
                                      frames count (waiting on a tool does not)
``max_wall_ms``          600 s        the run ends: ``timeout`` "wall-clock ceiling"
``max_memory_mb``        512 MB       ``MemoryError`` in the program, or the run ends:
                                      ``worker-exit`` "memory budget exhausted"
``max_log_bytes``        64 KiB       output past it is dropped after one truncation
                                      marker; a line costs its bytes plus one (its newline)
``max_value_bytes``      32 KiB       the returned value's rendering is cut, with a marker
``max_arg_bytes``        1 MiB        that sub-call alone fails: ``[ARGS_TOO_LARGE]``
``max_result_bytes``     1 MiB        that sub-call alone fails: ``[RESULT_TOO_LARGE]``
``max_calls_in_flight``  64           that sub-call alone fails: ``[TOO_MANY_CALLS]``
``max_bytes_in_flight``  8 MiB        that sub-call alone fails: ``[TOO_MANY_BYTES]``
=======================  ===========  ====================================================

A sub-call's arguments are measured (as JSON) and checked against the caps *before* the
host parses, copies or queues them; calls in flight are those a run has started and not
yet had answered. A queued call holds only its JSON text; the arguments are parsed when the
call's turn comes, and a run's sub-calls take turns one at a time. So the host holds for a
run at most about ``max_log_bytes + max_bytes_in_flight + max_result_bytes`` plus the
parsed copies of one argument (a few times ``max_arg_bytes``; more for a pathological shape
such as a million empty objects, which parse to ~20x their text), whatever the program does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Literal, Mapping, Protocol

from ..core.signal import AbortSignal

__all__ = ["BACKENDS", "ERROR_KINDS", "Binding", "CodeRuntime", "CodeRuntimeConfig", "RunError", "RunResult",
           "check_run"]

ErrorKind = Literal["exception", "timeout", "abort", "worker-exit"]
ERROR_KINDS = ("exception", "timeout", "abort", "worker-exit")
Binding = Callable[[Any], Awaitable[str]]
BACKENDS = ("auto", "cpython", "monty")


@dataclass(frozen=True, slots=True)
class RunError:
    kind: ErrorKind
    message: str


@dataclass(frozen=True, slots=True)
class RunResult:
    """``value`` (the rendered returned value, absent for ``None``), ``logs`` in emission
    order, and ``error`` when the program did not complete."""

    logs: list[str] = field(default_factory=list)
    value: str | None = None
    error: RunError | None = None


class CodeRuntime(Protocol):
    language: str
    dialect: str
    isolation: str

    async def run(self, program: str, bindings: Mapping[str, Binding],
                  signal: AbortSignal | None = None) -> RunResult: ...

    def close(self) -> None: ...


_POSITIVE = ("compute_ms", "max_wall_ms", "max_log_bytes", "max_value_bytes", "max_memory_mb", "max_arg_bytes",
             "max_result_bytes", "max_calls_in_flight", "max_bytes_in_flight", "max_workers")


@dataclass(frozen=True, slots=True)
class CodeRuntimeConfig:
    """The budgets (each a positive finite number; see the module docs), the backend, and
    what the CPython sandbox may do without."""

    compute_ms: float = 60_000
    """CPU time the program may use, host work on its frames included (time waiting on a
    binding does not count)."""
    max_wall_ms: float = 600_000
    """Wall-clock ceiling for the whole run."""
    max_log_bytes: int = 65_536
    """Printed output kept (a line costs its bytes plus one); past it, one truncation marker."""
    max_value_bytes: int = 32_768
    """The returned value's rendering is cut to this many bytes."""
    max_memory_mb: int = 512
    """Memory the program may use (CPython: its address space, and everything it holds
    resident where the host has a memory cgroup; Monty: its heap)."""
    max_arg_bytes: int = 1 << 20
    """One sub-call's arguments, encoded as JSON."""
    max_result_bytes: int = 1 << 20
    """One sub-call's result text, as handed back to the program."""
    max_calls_in_flight: int = 64
    """Sub-calls a run may have started and not yet had answered."""
    max_bytes_in_flight: int = 8 << 20
    """Their arguments' bytes, together."""
    backend: str = "auto"
    """``"auto"`` (the CPython sandbox where this host has its walls, else Monty),
    ``"cpython"`` or ``"monty"``."""
    allow_missing: tuple[str, ...] = ()
    """CPython only: isolation mechanisms this host may lack (by name, see
    :data:`~dsh_actors.codemode.isolation.MECHANISMS`). Empty: refuse to run without all."""
    max_workers: int = 8
    """Monty only: worker processes at most, however many runs there are at once (more
    wait for a worker)."""
    retry_unsupported: bool = True
    """Monty only: a program Monty refuses while parsing it (before anything ran) runs on
    the CPython sandbox instead, when this host can run that."""

    def __post_init__(self) -> None:
        for key in _POSITIVE:
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"dsh-code-runtime: config.{key} must be a positive number, got {value!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"dsh-code-runtime: config.backend must be one of {list(BACKENDS)}, got {self.backend!r}")
        if not isinstance(self.allow_missing, tuple):
            object.__setattr__(self, "allow_missing", tuple(self.allow_missing))
        if not isinstance(self.retry_unsupported, bool):
            raise ValueError(f"dsh-code-runtime: config.retry_unsupported must be a bool, got {self.retry_unsupported!r}")


def check_run(closed: bool, program: Any, bindings: Any, signal: AbortSignal | None) -> RunResult | None:
    """The seam's checks before a run: misuse raises; an already-aborted signal is the
    run's result (and nothing starts)."""
    if closed:
        raise RuntimeError("dsh-code-runtime: run() after disposal")
    if not isinstance(program, str):
        raise TypeError("program must be a str")
    if not isinstance(bindings, Mapping) or not all(isinstance(n, str) and callable(f) for n, f in bindings.items()):
        raise TypeError("bindings must map binding names (str) to async functions")
    if signal is not None and signal.aborted:
        return RunResult(error=RunError("abort", str(signal.reason)))
    return None
