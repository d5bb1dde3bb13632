"""The choice of Code Mode backend, in one place.

=============  ==============================================================================
``backend``    what :func:`make_runtime` builds
=============  ==============================================================================
``"auto"``     the CPython sandbox where this host has every wall it needs (or the operator
               accepted the missing ones by name in ``allow_missing``); Monty elsewhere
``"cpython"``  the CPython sandbox, or :class:`~.isolation.SandboxUnavailableError` naming
               what this host lacks
``"monty"``    Monty; with ``retry_unsupported``, a program Monty cannot run (and that has
               started no sub-call) runs again on the CPython sandbox when this host has it
=============  ==============================================================================

Why CPython first: it runs what models write (the corpus in ``tests/codemode/corpus``:
every program on CPython, about 40 % fail on Monty, see benchmarks/RESULTS.md), and its
fork server starts a walled-in run in milliseconds. Monty has no operating-system surface
at all, which makes it the right fallback where the kernel's walls are missing.
"""

from __future__ import annotations

from typing import Any

from . import isolation
from .contract import CodeRuntime, CodeRuntimeConfig

__all__ = ["dialect", "make_runtime", "resolved_backend"]


def _cpython_possible(config: CodeRuntimeConfig) -> bool:
    try:
        isolation.required(isolation.probe(), config.allow_missing)
    except isolation.SandboxUnavailableError:
        return False
    return True


def resolved_backend(config: CodeRuntimeConfig) -> str:
    """``"cpython"`` or ``"monty"``: what ``config.backend`` means on this host."""
    if config.backend != "auto":
        return config.backend
    return "cpython" if _cpython_possible(config) else "monty"


def make_runtime(config: CodeRuntimeConfig | None = None) -> CodeRuntime:
    """The backend ``config`` names on this host, with ``config``'s budgets."""
    config = config or CodeRuntimeConfig()
    if resolved_backend(config) == "cpython":
        from .sandbox import SubprocessRuntime

        return SubprocessRuntime(config, allow_missing=config.allow_missing)
    from .monty import MontyRuntime

    def fallback() -> CodeRuntime | None:
        if not config.retry_unsupported or not _cpython_possible(config):
            return None
        from .sandbox import SubprocessRuntime

        return SubprocessRuntime(config, allow_missing=config.allow_missing)

    return MontyRuntime(config, fallback=fallback)


def dialect(runtime_or_config: Any) -> str | None:
    """The language a runtime (or a config's backend, on this host) runs, for the SDK text."""
    if isinstance(runtime_or_config, CodeRuntimeConfig):
        if resolved_backend(runtime_or_config) == "cpython":
            from .sandbox import DIALECT
        else:
            from .monty import DIALECT
        return DIALECT
    found = getattr(runtime_or_config, "dialect", None)
    return found if isinstance(found, str) else None
