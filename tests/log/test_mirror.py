"""The session client's memory of its own appends (dsh_actors/log/mirror.py), without Ray."""

import pytest

from dsh_actors.log.mirror import EventMirror


def test_a_client_that_appended_everything_holds_everything_from_any_index():
    mirror = EventMirror()
    mirror.remember([0, 1], [{"n": 0}, {"n": 1}])
    mirror.remember([2], [{"n": 2}])
    assert mirror.gap(0) is None and mirror.length == 3
    assert mirror.read(0) == [{"n": 0}, {"n": 1}, {"n": 2}]
    assert mirror.read(2) == [{"n": 2}] and mirror.read(3) == []


def test_an_index_another_process_filled_is_a_gap_until_it_is_read():
    mirror = EventMirror()
    mirror.remember([0], [{"n": 0}])
    mirror.remember([2], [{"n": 2}])  # index 1 was someone else's append
    assert mirror.gap(0) == 1 and mirror.gap(1) == 1 and mirror.gap(2) is None
    with pytest.raises(LookupError):
        mirror.read(0)
    mirror.fill(1, [{"other": True}, {"n": 2}, {"n": 3}])  # what the writer answered from 1 on
    assert mirror.read(0) == [{"n": 0}, {"other": True}, {"n": 2}, {"n": 3}] and mirror.length == 4


def test_acknowledgements_arriving_out_of_order_still_land_at_their_indexes():
    mirror = EventMirror()
    mirror.remember([1], [{"n": 1}])
    assert mirror.gap(0) == 0
    mirror.remember([0], [{"n": 0}])
    assert mirror.read(0) == [{"n": 0}, {"n": 1}]


def test_a_log_opened_with_events_already_in_it_starts_with_a_gap():
    mirror = EventMirror()
    mirror.remember([5], [{"n": 5}])
    assert mirror.gap(0) == 0 and mirror.gap(5) is None and mirror.read(5) == [{"n": 5}]


def test_past_its_bound_the_oldest_events_are_asked_of_the_writer_again():
    mirror = EventMirror(keep=3)
    mirror.remember(range(5), [{"n": i} for i in range(5)])
    assert mirror.length == 5 and mirror.gap(2) is None and mirror.read(2) == [{"n": 2}, {"n": 3}, {"n": 4}]
    assert mirror.gap(0) == 0 and mirror.gap(1) == 1  # dropped: a read from there asks the writer
    mirror.fill(0, [{"n": i} for i in range(5)])  # refilling what it no longer keeps changes nothing
    assert mirror.gap(0) == 0 and mirror.read(2) == [{"n": 2}, {"n": 3}, {"n": 4}]
    with pytest.raises(ValueError):
        EventMirror(keep=0)
    with pytest.raises(ValueError):
        mirror.remember([5], [None])
