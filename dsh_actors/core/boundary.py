"""The pipeline's error boundary: which raised values become a call's result.

Everything user code raises — a tool body, a listener, a guard, an approval seam — ends
as one error result, whatever its class: an ``Exception`` as it is, a ``CancelledError``
that is not the call's own cancellation as :class:`ExecutionCancelledError`, and any
other ``BaseException`` (``KeyboardInterrupt``, ``SystemExit``, ``GeneratorExit``) as
:class:`ProcessControlError`. Only the call's own cancellation (its task is being
cancelled) keeps propagating, so a cancel is never swallowed.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from .errors import ExecutionCancelledError, ProcessControlError, error_message

__all__ = ["Carried", "as_failure", "carry", "is_own_cancellation", "kind_of"]


class Carried(Exception):
    """A ``BaseException`` a plain body raised in a worker thread, carried back to the
    event loop as an ``Exception`` (a ``GeneratorExit`` arriving through an awaited
    future escapes ``except`` clauses of the coroutines above it; so may the others)."""

    def __init__(self, thrown: BaseException) -> None:
        super().__init__(thrown)
        self.thrown = thrown


def carry(fn: Callable[[], Any]) -> Callable[[], Any]:
    """``fn`` for a worker thread: a non-``Exception`` it raises comes back as :class:`Carried`."""
    def call() -> Any:
        try:
            return fn()
        except Exception:
            raise
        except BaseException as exc:
            raise Carried(exc) from None

    return call


def kind_of(thrown: object) -> type:
    """The class of a raised value, read without running its code: ``isinstance`` would
    look up ``__class__``, which a hostile value can make raise (then the error raised
    while normalising, not the value, would become the call's result)."""
    return type(thrown)


def is_own_cancellation(thrown: BaseException) -> bool:
    """True when ``thrown`` is the running task's own cancellation (it must propagate)."""
    if not issubclass(kind_of(thrown), asyncio.CancelledError):
        return False
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no running loop: a plain call, nothing to propagate to
        return False
    return task is not None and task.cancelling() > 0


def as_failure(thrown: BaseException, origin: str) -> BaseException:
    """What a call reports for ``thrown`` (raised by ``origin``, e.g. ``tool "x"``)."""
    if kind_of(thrown) is Carried:
        thrown = thrown.thrown  # type: ignore[attr-defined]
    if issubclass(kind_of(thrown), Exception):
        return thrown
    if issubclass(kind_of(thrown), asyncio.CancelledError):
        return ExecutionCancelledError(f"{origin} was cancelled inside its own code")
    detail = error_message(thrown)
    return ProcessControlError(origin, kind_of(thrown).__name__ + (f"({detail!r})" if detail else ""))
