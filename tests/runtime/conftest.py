"""Fixtures of the Ray tests (the session's cluster, ``ray_cluster``, is in tests/conftest.py)."""

import pytest

from .fixtures import ModuleRegistries, registry_for


@pytest.fixture(scope="module")
def module_registries(ray_cluster):
    """The registries a module's tests borrow, one per set of ``connect`` options."""
    lent = ModuleRegistries()
    yield lent
    lent.shutdown()


@pytest.fixture
def registry(ray_cluster, request):
    """The test's registry, with one executor (an actor costs about a second of CPU to
    start, and most tests are not about the pool). In a module marked ``shares_registry``
    a test borrows the module's registry and gives it back as it found it; a test that
    kills or ends something of its registry marks itself ``own_registry`` (a fresh one),
    a test about the pool's spread ``two_executors`` (its own, with the default pool)."""
    if request.node.get_closest_marker("two_executors"):
        request.applymarker(pytest.mark.own_registry)
        yield from registry_for(request, executors=None)
    else:
        yield from registry_for(request)
