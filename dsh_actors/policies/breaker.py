"""Breakers: stop sending work to a dependency that keeps failing, then try it again.

A fleet whose tool server (or model endpoint) is down would otherwise make every episode
wait for each call to fail on its own — a timeout each, the whole fleet long. A
:class:`Breaker` counts its dependency's consecutive *infrastructure* failures (the codes of
:data:`~dsh_actors.core.errors.INFRA_CODES`; a tool answering an error is not one): past
``threshold`` it opens, and calls fail at once with ``BREAKER_OPEN`` (itself an
infrastructure code: a trainer masks the episode, ``--retry-infra`` runs it again). After
``pause_s`` it lets one call through as a probe: a success closes it, another failure opens
it for another pause. Each change is told to ``on_change`` (the batch job records them for
its summary).

:func:`breaker_policy` is the ``tools/execute`` wrapper keeping one breaker per tool in
each process that runs calls (an executor: per node); the model client keeps one per
endpoint (:class:`~dsh_actors.agent.model.ChatModel`).
"""

from __future__ import annotations

import time
from typing import Any, Awaitable, Callable

from ..core.errors import INFRA_CODES, HarnessError, error_result
from ..core.types import ToolExecution, ToolExecutionResult

__all__ = ["Breaker", "BreakerOpenError", "breaker_policy"]

Listener = Callable[[str, str, float], None]
"""``on_change(name, state, at)``: ``state`` is ``open`` or ``closed``; ``at`` wall-clock."""


class BreakerOpenError(HarnessError):
    """The call's dependency kept failing on infrastructure: its breaker is open, and the
    call failed at once rather than wait to fail too."""

    code = "BREAKER_OPEN"


class Breaker:
    """One dependency's breaker (see the module docs)."""

    def __init__(self, name: str, threshold: int = 5, pause_s: float = 30.0,
                 on_change: Listener | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 1:
            raise ValueError(f"a breaker's threshold is a whole number of failures, at least 1; got {threshold!r}")
        if not pause_s > 0:
            raise ValueError(f"a breaker's pause is a positive number of seconds; got {pause_s!r}")
        self.name, self.threshold, self.pause_s = name, threshold, pause_s
        self.on_change, self._clock = on_change, clock
        self.failures = 0
        self._open_until: float | None = None  # set while open (or half open: a probe may go)
        self._probing = False

    @property
    def state(self) -> str:
        if self._open_until is None:
            return "closed"
        return "half_open" if self._clock() >= self._open_until else "open"

    def admit(self) -> bool:
        """Whether a call may go now: always while closed; once a pause is over, one probe
        at a time; never while open."""
        state = self.state
        if state == "closed":
            return True
        if state == "half_open" and not self._probing:
            self._probing = True
            return True
        return False

    def abandoned(self) -> None:
        """A call it admitted ended without saying anything of the dependency (cancelled):
        another probe may go."""
        self._probing = False

    def succeeded(self) -> None:
        self.failures, self._probing = 0, False
        if self._open_until is not None:
            self._open_until = None
            self._tell("closed")

    def failed(self) -> None:
        """An infrastructure failure of the dependency."""
        self.failures += 1
        was_open = self._open_until is not None
        if was_open or self.failures >= self.threshold:
            self._open_until, self._probing = self._clock() + self.pause_s, False
            if not was_open:
                self._tell("open")

    def _tell(self, state: str) -> None:
        if self.on_change is not None:
            try:
                self.on_change(self.name, state, time.time())
            except Exception:  # noqa: BLE001 - a recorder that fails never fails a call
                pass


def breaker_policy(threshold: int = 5, pause_s: float = 30.0,
                   on_change: Listener | None = None) -> Callable[..., Awaitable[Any]]:
    """A ``tools/execute`` wrapper keeping one :class:`Breaker` per tool in each process
    that runs calls: past ``threshold`` consecutive infrastructure failures of a tool, its
    calls fail ``BREAKER_OPEN`` at once for ``pause_s``, then one probe decides."""
    Breaker("check", threshold, pause_s)  # misuse raises here, where the policy is made
    breakers: dict[str, Breaker] = {}

    async def guarded(execution: ToolExecution, call_next: Callable[[], Awaitable[Any]]) -> Any:
        breaker = breakers.get(execution.name)
        if breaker is None:
            breaker = breakers[execution.name] = Breaker(execution.name, threshold, pause_s, on_change)
        if not breaker.admit():
            return ToolExecutionResult(error_result(BreakerOpenError(
                f'tool "{execution.name}" failed on infrastructure {breaker.failures} times in a row: its breaker is '
                f"open, and calls fail at once until a probe after {pause_s:g} s succeeds")))
        try:
            result = await call_next()
        except BaseException:
            breaker.abandoned()  # cancelled, or a wrapper failed: says nothing of the tool
            raise
        error = result.get("error") if result.get("is_error") else None
        if isinstance(error, dict) and error.get("code") in INFRA_CODES:
            breaker.failed()
        else:
            breaker.succeeded()
        return result

    guarded.__name__ = f"breaker_policy({threshold}, {pause_s:g} s)"
    return guarded
