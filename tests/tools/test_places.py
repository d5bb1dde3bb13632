"""An environment's place (pure: no Ray): a request that never reached its environment goes
to the one that took its place; one that may have run there is never sent again."""

import asyncio

import pytest

from dsh_actors.envs.contract import EnvironmentGoneError
from dsh_actors.tools.places import EnvPlace

pytestmark = pytest.mark.timeout(10)


class _Env:
    """Counts the commands it is sent; fails each with ``failure`` if given."""

    def __init__(self, failure=None):
        self.failure, self.sent = failure, []

    async def run(self, command, *, timeout_s, max_output):
        self.sent.append(command)
        if self.failure is not None:
            raise self.failure
        return f"ran {command}"


def _place(old, successor):
    asked = []

    async def fresh(stale):
        asked.append(stale)
        return successor
    return EnvPlace(old, "/work", fresh), asked


def test_a_request_that_never_reached_its_environment_goes_to_its_successor_once():
    old, successor = _Env(EnvironmentGoneError("no connection", unsent=True)), _Env()
    place, asked = _place(old, successor)
    assert asyncio.run(place.run("echo hi", timeout_s=5, max_output=100)) == "ran echo hi"
    assert asked == [old] and old.sent == successor.sent == ["echo hi"]


def test_a_request_whose_environment_died_under_it_is_not_sent_again():
    old, successor = _Env(EnvironmentGoneError("the environment ended or died")), _Env()
    place, asked = _place(old, successor)
    with pytest.raises(EnvironmentGoneError) as gone:
        asyncio.run(place.run("echo once >> log", timeout_s=5, max_output=100))
    assert gone.value.code == "ENV_GONE" and not gone.value.unsent
    assert asked == [] and successor.sent == []  # it may have run: it runs nowhere else


def test_an_unsent_failure_is_kept_across_processes():
    import pickle

    copy = pickle.loads(pickle.dumps(EnvironmentGoneError("gone", unsent=True)))
    assert copy.unsent and copy.code == "ENV_GONE" and str(copy) == "gone"
