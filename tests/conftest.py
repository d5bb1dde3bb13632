import os

# Keep every Ray address on loopback; Ray reads this when it is first imported.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import asyncio

import pytest


@pytest.fixture
def run():
    """Run a coroutine to completion on a fresh event loop."""
    return lambda coroutine: asyncio.run(coroutine)
