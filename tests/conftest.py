import asyncio

import pytest


@pytest.fixture
def run():
    """Run a coroutine to completion on a fresh event loop."""
    return lambda coroutine: asyncio.run(coroutine)
