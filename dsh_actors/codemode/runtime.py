"""The code runtime seam: what every Code Mode backend promises, and the budgets they share.

The seam (:class:`CodeRuntime`): ``language`` (``"python"``), ``dialect`` (what the SDK
text tells the model it writes), an ``isolation`` label, and ``run(program, bindings,
signal) -> RunResult``. Every program outcome is a result — ``RunResult.error`` with
``kind`` ``exception`` | ``timeout`` | ``abort`` | ``worker-exit`` — and only misuse
raises. No state survives between runs.

Backends (chosen with ``CodeRuntimeConfig.backend``; :func:`make_runtime` builds one):

- ``"monty"`` (:class:`~dsh_actors.codemode.monty.MontyRuntime`, the default): a Python
  subset interpreted by Monty, a Rust interpreter with no file, network, process or
  environment access at all, in a pool of worker processes. About a millisecond a run.
- ``"cpython"`` (:class:`~dsh_actors.codemode.sandbox.SubprocessRuntime`): full CPython in
  a fresh process behind the kernel's walls (namespaces, Landlock, seccomp, rlimits; see
  :mod:`~dsh_actors.codemode.isolation`). Tens of milliseconds a run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Literal, Mapping, Protocol

from ..core.signal import AbortSignal

if TYPE_CHECKING:
    from .monty import MontyRuntime
    from .sandbox import SubprocessRuntime

__all__ = ["BACKENDS", "CodeRuntime", "CodeRuntimeConfig", "Ledger", "MontyRuntime", "RunError", "RunResult",
           "SubprocessRuntime", "cap_error", "cap_value", "check_run", "dialect", "make_runtime"]

ErrorKind = Literal["exception", "timeout", "abort", "worker-exit"]
ERROR_KINDS = ("exception", "timeout", "abort", "worker-exit")
Binding = Callable[[Any], Awaitable[str]]
TRUNCATED = "[dsh-code-runtime] log capture truncated at {n} bytes"
VALUE_MARKER = "… [truncated]"
BACKENDS = ("monty", "cpython")
DIALECTS = {
    "monty": ("Monty, a subset of Python 3: functions, async/await, classes, comprehensions, f-strings, "
              "try/except and the modules asyncio, json, re, math, datetime and time; no generators, no other "
              "imports, no files, network or processes"),
    "cpython": ("CPython 3 with its standard library, in a sandbox: files only under the working directory "
                "and /tmp, no network, no processes, no installed packages"),
}
"""What the SDK text tells the model it writes, by backend."""


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


@dataclass(frozen=True, slots=True)
class CodeRuntimeConfig:
    """Budgets (each a positive finite number), the backend, and the isolation it may lack."""

    compute_ms: float = 60_000
    """CPU time the program may use (time waiting on a binding does not count)."""
    max_wall_ms: float = 600_000
    """Wall-clock ceiling for the whole run."""
    max_log_bytes: int = 65_536
    """Printed output kept; the first entry over the budget becomes a truncation marker."""
    max_value_bytes: int = 32_768
    """The returned value's rendering is cut to this many bytes."""
    max_memory_mb: int = 512
    """Memory the program may use (CPython: address space; Monty: heap)."""
    backend: str = "monty"
    """``"monty"`` or ``"cpython"`` (see the module docs)."""
    allow_missing: tuple[str, ...] = ()
    """CPython only: isolation mechanisms this host may lack (by name, see
    :data:`~dsh_actors.codemode.isolation.MECHANISMS`). Empty: refuse to run without all."""

    def __post_init__(self) -> None:
        for key in ("compute_ms", "max_wall_ms", "max_log_bytes", "max_value_bytes", "max_memory_mb"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"dsh-code-runtime: config.{key} must be a positive number, got {value!r}")
        if self.backend not in BACKENDS:
            raise ValueError(f"dsh-code-runtime: config.backend must be one of {list(BACKENDS)}, got {self.backend!r}")
        if not isinstance(self.allow_missing, tuple):
            object.__setattr__(self, "allow_missing", tuple(self.allow_missing))


def make_runtime(config: CodeRuntimeConfig | None = None) -> "CodeRuntime":
    """The backend ``config.backend`` names, with ``config``'s budgets."""
    config = config or CodeRuntimeConfig()
    if config.backend == "cpython":
        from .sandbox import SubprocessRuntime

        return SubprocessRuntime(config, allow_missing=config.allow_missing)
    from .monty import MontyRuntime

    return MontyRuntime(config)


def dialect(runtime_or_config: Any) -> str | None:
    """The language a runtime (or a config's backend) runs, for the SDK text."""
    if isinstance(runtime_or_config, CodeRuntimeConfig):
        return DIALECTS[runtime_or_config.backend]
    found = getattr(runtime_or_config, "dialect", None)
    return found if isinstance(found, str) else None


def __getattr__(name: str) -> Any:  # the backends, importable from here as before
    if name == "SubprocessRuntime":
        from .sandbox import SubprocessRuntime

        return SubprocessRuntime
    if name == "MontyRuntime":
        from .monty import MontyRuntime

        return MontyRuntime
    raise AttributeError(name)


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


class Ledger:
    """The host's own log budget: forged or stray output is bounded too."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.logs: list[str] = []
        self.full = False

    def add(self, text: str) -> None:
        if self.full:
            return
        size = len(text.encode("utf-8"))
        if self.used + size > self.limit:
            self.logs.append(TRUNCATED.format(n=self.limit))
            self.full = True
            return
        self.used += size
        self.logs.append(text)


def cap_value(text: str, cap: int) -> str:
    """A value's rendering cut on a code-point boundary with a marker; a value already cut
    (within the marker's length of slack) passes unchanged."""
    data = text.encode("utf-8")
    if len(data) <= cap + len(VALUE_MARKER.encode("utf-8")):
        return text
    return data[:cap].decode("utf-8", "ignore") + VALUE_MARKER


def cap_error(text: str, cap: int) -> str:
    """An error text cut to exactly ``cap`` bytes on a code-point boundary (no marker)."""
    return text.encode("utf-8")[:cap].decode("utf-8", "ignore")


def settled(message: Any, ledger: Ledger, cap: int) -> RunResult | None:
    """The result a ``done`` message settles the run with, or ``None`` if it is malformed.

    Only a well-formed ``done`` settles: ``value`` absent or a string, ``error`` absent
    or ``{kind, message}`` with a known kind and a string message. A forged ``done`` may
    carry both, and both are reported.
    """
    if not isinstance(message, dict):
        return None
    value, error = message.get("value"), message.get("error")
    if value is not None and not isinstance(value, str):
        return None
    if error is not None and not (isinstance(error, dict) and error.get("kind") in ERROR_KINDS
                                  and isinstance(error.get("message", ""), str)):
        return None
    run_error = RunError(error["kind"], cap_error(error.get("message", ""), cap)) if error is not None else None
    return RunResult(ledger.logs, cap_value(value, cap) if value is not None else None, run_error)
