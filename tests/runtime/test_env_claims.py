"""Environment claims (which node starts an environment wanted from several at once), on an
in-memory stand-in for the cluster's KV store: the rules, without Ray."""

import pytest

from dsh_actors.runtime import env_claims
from dsh_actors.runtime.env_claims import EnvClaim, release

pytestmark = pytest.mark.timeout(30)


class _Store:
    """The three KV calls the claims make, over a dict (put answers whether the key was there)."""

    def __init__(self):
        self.data = {}

    def put(self, key, value, overwrite=True, *, namespace=None):
        there = key in self.data
        if overwrite or not there:
            self.data[key] = value
        return there

    def get(self, key, *, namespace=None):
        return self.data.get(key)

    def delete(self, key, *, del_by_prefix=False, namespace=None):
        doomed = [k for k in self.data if (k.startswith(key) if del_by_prefix else k == key)]
        for k in doomed:
            del self.data[k]
        return len(doomed)


@pytest.fixture
def on(monkeypatch):
    """``on(node)``: make the claims' process one of node ``node``; the store is shared."""
    store = _Store()
    monkeypatch.setattr(env_claims.internal_kv, "_internal_kv_put", store.put)
    monkeypatch.setattr(env_claims.internal_kv, "_internal_kv_get", store.get)
    monkeypatch.setattr(env_claims.internal_kv, "_internal_kv_del", store.delete)

    def switch(node):
        monkeypatch.setattr(env_claims, "this_node", lambda: node)
    switch.store = store
    return switch


def test_the_first_claim_wins_and_every_later_one_hears_of_it(on):
    on("a")
    first = EnvClaim("k/env-1").take()
    on("b")
    second = EnvClaim("k/env-1").take()
    assert first[0] == "a" and second == first  # b is told: a claimed it, and when
    on("c")
    assert EnvClaim("k/env-2").take()[0] == "c"  # another environment: a claim of its own


def test_two_that_take_over_from_the_same_claimant_agree_on_one(on):
    on("a")
    EnvClaim("k/env").take()
    on("b")
    taken = EnvClaim("k/env").take(over="a")
    on("c")
    told = EnvClaim("k/env").take(over="a")  # (it too saw a gone)
    assert taken[0] == "b" and told == taken
    on("d")
    assert EnvClaim("k/env").take()[0] == "b"  # a newcomer is told the new claimant
    assert EnvClaim("k/env").take(over="b")[0] == "d"  # and b gone too: d takes it


def test_a_claim_is_released_only_by_the_node_it_names_and_with_its_marks(on):
    on("a")
    claim = EnvClaim("k/env")
    claim.take()
    on("b")
    claim.take(over="a")
    release(claim.key, "a")  # a's environment ended late: the claim is b's now, and stays
    assert EnvClaim("k/env").take()[0] == "b"
    on("c")
    EnvClaim("k/env-other").take()
    release(claim.key, "b")
    assert all(key.startswith(b"k/env-other/") for key in on.store.data)  # b's claim and marks gone, no other
    assert EnvClaim("k/env").take()[0] == "c"  # claimed afresh
    on("c")
    EnvClaim("k/env").drop()
    on("e")
    assert EnvClaim("k/env").take()[0] == "e"


def test_each_beat_of_a_claimant_changes_its_heartbeat_and_a_release_clears_it(on):
    on("a")
    claim = EnvClaim("k/env")
    claim.take()
    assert claim.heartbeat() is None  # no beat yet
    beats = []
    for _ in range(3):
        claim.beat()
        beats.append(EnvClaim("k/env").heartbeat())  # as a waiter on another node reads it
    assert None not in beats and len(set(beats)) == 3
    release(claim.key, "a")
    assert claim.heartbeat() is None
