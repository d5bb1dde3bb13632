"""How the runtime tries again while an actor it needs is restarting: one policy for every
such loop (the registry's actors, session writers, the signal hub, Code Mode queues).

Only what ran nothing is tried again — a call Ray refused because its actor was not there
(executions never retry). The pauses start short, double, and stop growing at
``max_s``; the attempts end at ``deadline_s``. Ray restarts an actor here in well under a
second, so most waits end after the first few pauses, and a dead cluster is given up on
after the deadline, never retried forever.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator

__all__ = ["Backoff", "WHILE_RESTARTING"]


@dataclass(frozen=True, slots=True)
class Backoff:
    first_s: float = 0.05
    factor: float = 2.0
    max_s: float = 0.5
    deadline_s: float = 30.0

    def within(self, deadline_s: float) -> "Backoff":
        """The same pauses, ending at ``deadline_s``."""
        return replace(self, deadline_s=deadline_s)

    def pauses(self) -> Iterator[float | None]:
        """Before each attempt's outcome is known: the pause to take if it fails, or
        ``None`` when it is the last one (its failure is the caller's to raise)."""
        spent, pause = 0.0, self.first_s
        while True:
            pause = min(pause, self.max_s)
            if spent + pause > self.deadline_s:
                yield None
                return
            yield pause
            spent += pause
            pause *= self.factor


WHILE_RESTARTING = Backoff()
"""The runtime's policy: 50 ms, doubling to 0.5 s, for up to 30 s."""
