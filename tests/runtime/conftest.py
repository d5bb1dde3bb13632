"""Fixtures of the Ray tests (the session's cluster, ``ray_cluster``, is in tests/conftest.py)."""

import os

import pytest

_counter = iter(range(10**6))


@pytest.fixture
def registry(ray_cluster):
    """A fresh registry (its own actor and version) for each test."""
    from dsh_actors.runtime import ToolRegistry

    reg = ToolRegistry.connect(f"test-{os.getpid()}-{next(_counter)}")
    yield reg
    reg.shutdown()
