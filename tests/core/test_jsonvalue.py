import copy
import json
import math
import pickle

import msgpack
import pytest
from hypothesis import given, strategies as st

from dsh_actors.core.jsonvalue import FrozenDict, FrozenList, FrozenValueError, NotLosslessJSONError, check_lossless, detach, is_lossless, snapshot, thaw
from dsh_actors.core.jsonvalue import json_equal

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text()
    | st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not (f == 0 and math.copysign(1, f) < 0)),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=20,
)


@given(json_values)
def test_every_lossless_value_survives_a_json_round_trip_and_snapshot_equals_it(value):
    assert is_lossless(value)
    assert json.loads(json.dumps(value)) == value
    frozen = snapshot(value)
    assert frozen == value
    assert json.loads(json.dumps(frozen)) == value
    assert msgpack.unpackb(msgpack.packb(frozen), strict_map_key=False) == value
    assert pickle.loads(pickle.dumps(frozen)) == value
    assert thaw(frozen) == value


@given(json_values)
def test_snapshot_shares_no_container_with_its_input(value):
    frozen = snapshot(value)
    seen = set()

    def ids(node):
        if isinstance(node, (dict, list)):
            seen.add(id(node))
            for child in (node.values() if isinstance(node, dict) else node):
                ids(child)

    ids(value)
    def check(node):
        if isinstance(node, (dict, list)):
            assert id(node) not in seen
            for child in (node.values() if isinstance(node, dict) else node):
                check(child)
    check(frozen)


class Custom:
    pass


class MyDict(dict):
    pass


class MyList(list):
    pass


class MyStr(str):
    pass


class MyInt(int):
    pass


@pytest.mark.parametrize(
    "value, path",
    [
        ((1, 2), "$"),
        ({"a": {1, 2}}, "$.a"),
        ({"a": [1, b"x"]}, "$.a[1]"),
        ({"a": float("nan")}, "$.a"),
        ([float("inf")], "$[0]"),
        ([-0.0], "$[0]"),
        ({1: "x"}, "$"),
        (MyDict(a=1), "$"),
        ([MyList()], "$[0]"),
        ({"s": MyStr("x")}, "$.s"),
        ({"i": MyInt(3)}, "$.i"),
        ({"o": Custom()}, "$.o"),
        ({"bad-key": ()}, "$['bad-key']"),
        ({"big": 2**64}, "$.big"),
    ],
)
def test_values_that_would_change_on_a_json_round_trip_are_rejected_with_their_path(value, path):
    with pytest.raises(NotLosslessJSONError) as info:
        snapshot(value)
    assert info.value.path == path
    assert not is_lossless(value)


def test_bool_is_accepted_as_bool_and_not_confused_with_int():
    frozen = snapshot({"t": True, "one": 1})
    assert type(frozen["t"]) is bool and type(frozen["one"]) is int
    assert not json_equal(True, 1) and json_equal(1, 1.0)


def test_a_cycle_is_rejected_but_a_shared_sibling_is_copied_twice():
    shared = {"x": 1}
    copied = snapshot({"a": shared, "b": shared})
    assert copied == {"a": {"x": 1}, "b": {"x": 1}} and copied["a"] is not shared
    loop: list = []
    loop.append(loop)
    with pytest.raises(NotLosslessJSONError, match="cycle") as info:
        check_lossless({"k": loop})
    assert info.value.path == "$.k[0]"


def test_frozen_containers_refuse_every_mutation():
    frozen = snapshot({"a": [1, {"b": 2}]})
    attempts = [
        lambda: frozen.__setitem__("a", 1), lambda: frozen.pop("a"), lambda: frozen.update(x=1),
        lambda: frozen.setdefault("z", 1), lambda: frozen.clear(), lambda: frozen.__delitem__("a"),
        lambda: frozen["a"].append(3), lambda: frozen["a"].__setitem__(0, 9), lambda: frozen["a"].sort(),
        lambda: frozen["a"][1].__setitem__("b", 3),
    ]
    for attempt in attempts:
        with pytest.raises(FrozenValueError, match="frozen"):
            attempt()
    assert frozen == {"a": [1, {"b": 2}]}


def test_frozen_values_pickle_deepcopy_and_encode_as_their_frozen_types():
    frozen = snapshot({"a": [1, 2.5, None, "x"]})
    again = pickle.loads(pickle.dumps(frozen))
    assert type(again) is FrozenDict and type(again["a"]) is FrozenList
    assert copy.deepcopy(frozen) is frozen
    assert json.dumps(frozen) == '{"a": [1, 2.5, null, "x"]}'
    assert hash(frozen) == hash(snapshot({"a": [1, 2.5, None, "x"]}))


def test_frozen_values_are_accepted_again_and_detach_gives_plain_mutable_data():
    frozen = snapshot({"a": [1]})
    assert snapshot(frozen) == frozen
    plain = detach(frozen)
    assert type(plain) is dict and type(plain["a"]) is list
    plain["a"].append(2)
    assert frozen == {"a": [1]}


def test_a_str_with_a_lone_surrogate_is_not_lossless_in_a_value_or_a_key():
    assert is_lossless("fine é ✓")
    for value in ("lone \ud800", {"k": ["x", "\udfff"]}, {"key \ud800": 1}):
        assert not is_lossless(value)
        with pytest.raises(NotLosslessJSONError, match="lone surrogate"):
            snapshot(value)
