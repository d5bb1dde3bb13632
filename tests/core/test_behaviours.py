"""The behaviour table (tests/behaviours.py) on the registry in one process."""

import pytest

from dsh_actors import InMemoryRegistry

from ..behaviours import SCENARIOS


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_in_process_registry(run, name):
    run(SCENARIOS[name](InMemoryRegistry()))
