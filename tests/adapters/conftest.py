"""What the frameworks leave behind after a test, collected before the next one starts."""

import gc
import warnings

import pytest

LEFT_BY_FRAMEWORKS = (
    # inspect_ai's sample event emitter (inspect_ai/hooks/_hooks.py) closes the send end of its
    # stream and never the receive end; anyio warns when the cycle holding it is collected.
    r"Unclosed <MemoryObjectReceiveStream",
)


@pytest.fixture(autouse=True)
def collect_what_the_frameworks_left():
    """Collect the cycles a framework's run left, with its own known leaks (above) quiet:
    collected later, inside some other test, a leak becomes that test's error (a CI run
    failed an environment test so). Anything else found here still fails this test."""
    yield
    with warnings.catch_warnings():
        for message in LEFT_BY_FRAMEWORKS:
            warnings.filterwarnings("ignore", message=message, category=ResourceWarning)
        gc.collect()
