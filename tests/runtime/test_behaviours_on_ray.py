"""The behaviour table (tests/behaviours.py) on the Ray registry: the same scenarios the
in-process registry passes (tests/core/test_behaviours.py), through the Ray client, its
registry actor, scope hosts and executors; under both scope hostings where they differ."""

import asyncio

import pytest

from ..behaviours import BOTH_HOSTINGS, SCENARIOS
from .fixtures import registry_for

CASES = [(name, hosting) for name in sorted(SCENARIOS)
         for hosting in (("dedicated", "shared") if name in BOTH_HOSTINGS else ("shared",))]

# The table is about semantics, not the pool: one executor, and one registry per hosting that
# each scenario borrows and gives back as it found it (nothing registered, no scope left).
pytestmark = pytest.mark.shares_registry(executors=1)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name, hosting", CASES, ids=[f"{n}[{h}]" for n, h in CASES])
def test_the_ray_registry(ray_cluster, request, name, hosting):
    lent = registry_for(request, scope_hosting=hosting)
    registry = next(lent)
    try:
        asyncio.run(SCENARIOS[name](registry))
    finally:
        next(lent, None)  # given back (the test fails if the scenario left something behind)
