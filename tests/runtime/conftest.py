"""Fixtures of the Ray tests (the session's cluster, ``ray_cluster``, is in tests/conftest.py)."""

import os

import pytest

_counter = iter(range(10**6))


@pytest.fixture
def registry(ray_cluster, request):
    """A fresh registry (its own actor and version) for each test, with one executor: an
    actor costs about a second of CPU to start, and most tests are not about the pool. A
    test about executors dying, or the pool's spread, marks itself ``two_executors``."""
    from dsh_actors.runtime import ToolRegistry

    executors = None if request.node.get_closest_marker("two_executors") else 1
    reg = ToolRegistry.connect(f"test-{os.getpid()}-{next(_counter)}", executors=executors)
    yield reg
    reg.shutdown()
