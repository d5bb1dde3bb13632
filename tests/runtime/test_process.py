"""A process's runtime caches live in one place, and a test can empty them (no Ray)."""

import pytest

from dsh_actors.runtime import process
from dsh_actors.runtime.caller.owner import owner
from dsh_actors.runtime.errors import DEAD_ACTORS

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def kept():
    """What this (test) process holds is given back after the test (other modules' registries,
    hosts and runtimes)."""
    import dataclasses

    state = process.current()
    held = {f.name: getattr(state, f.name) for f in dataclasses.fields(state)}
    copies = {name: dict(value.items()) if hasattr(value, "items") else set(value)
              for name, value in held.items() if hasattr(value, "clear")}
    yield
    process.reset()
    for name, copy in copies.items():
        held[name].update(copy)
    state.anchor = held["anchor"]


def test_the_caches_a_process_fills_are_its_state_and_reset_empties_them_in_place(kept):
    state = process.current()
    made = owner("process-test", "ns")
    assert state.owners[("ns", "process-test")] is made and owner("process-test", "ns") is made
    DEAD_ACTORS.add("feedface")
    assert "feedface" in state.dead_actors  # the errors module's set is the state's
    process.reset()
    assert state.owners == {} and state.dead_actors == set() and state.anchor is None
    assert DEAD_ACTORS is state.dead_actors  # emptied in place: a module holding it sees the empty one
    assert owner("process-test", "ns") is not made  # a fresh owner, as in a fresh process
