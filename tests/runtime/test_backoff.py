"""The one retry policy (pure: no Ray): pauses start short, double, stop growing, and end
at the deadline with a last attempt whose failure is the caller's."""

import pytest

from dsh_actors.runtime.backoff import WHILE_RESTARTING, Backoff


@pytest.mark.timeout(10)
def test_pauses_double_to_a_ceiling_and_the_attempts_end_at_the_deadline():
    pauses = list(Backoff(first_s=0.05, factor=2, max_s=0.5, deadline_s=2.0).pauses())
    assert pauses[:5] == [0.05, 0.1, 0.2, 0.4, 0.5] and pauses[-1] is None
    waited = [p for p in pauses if p is not None]
    assert sum(waited) <= 2.0 and sum(waited) + 0.5 > 2.0  # as long as the deadline allows, no longer
    assert list(Backoff(deadline_s=0).pauses()) == [None]  # no time: one attempt, then the caller raises
    runtime = [p for p in WHILE_RESTARTING.pauses() if p is not None]
    assert 29 < sum(runtime) <= 30 and max(runtime) == 0.5
    assert sum(p for p in WHILE_RESTARTING.within(10).pauses() if p is not None) <= 10
