"""The behaviour table (tests/behaviours.py) on the Ray registry: the same scenarios the
in-process registry passes (tests/core/test_behaviours.py), through the Ray client, its
registry actor, scope hosts and executors; under both scope hostings where they differ."""

import asyncio
import os

import pytest

from dsh_actors.runtime import ToolRegistry

from ..behaviours import BOTH_HOSTINGS, SCENARIOS

CASES = [(name, hosting) for name in sorted(SCENARIOS)
         for hosting in (("dedicated", "shared") if name in BOTH_HOSTINGS else ("shared",))]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name, hosting", CASES, ids=[f"{n}[{h}]" for n, h in CASES])
def test_the_ray_registry(ray_cluster, name, hosting):
    registry = ToolRegistry.connect(f"table-{os.getpid()}-{name[:40]}-{hosting}", scope_hosting=hosting,
                                    executors=1)  # the table is about semantics, not the pool
    try:
        asyncio.run(SCENARIOS[name](registry))
    finally:
        registry.shutdown()
