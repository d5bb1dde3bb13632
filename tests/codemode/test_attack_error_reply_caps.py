"""Attack: a failed call's error text is not held to ``max_result_bytes`` (found by a
security review).

The host checks a tool's *result* against ``max_result_bytes`` ("that sub-call alone
fails: [RESULT_TOO_LARGE]"), but sends a tool's *error* text (``str(exc)``, or on the Code
Mode bridge the whole text of a failed tool result) uncut. So an error over the cap reaches
the program, and one over the reply buffer (``2 * max_result_bytes + 64 KiB``) ends the
whole run as ``worker-exit`` "the sandbox stopped reading" — although the sandbox was
reading, and the contract says only that call fails.
"""

import asyncio
import json

import pytest

from dsh_actors.codemode.contract import CodeRuntimeConfig
from dsh_actors.codemode.sandbox import SubprocessRuntime

CAP = 1 << 20


@pytest.fixture(scope="module")
def runtime():
    rt = SubprocessRuntime(CodeRuntimeConfig(backend="cpython", compute_ms=3000, max_wall_ms=10_000,
                                             max_result_bytes=CAP))
    yield rt
    rt.close()


async def check(args):
    raise ValueError("invalid input: " + "e" * int(args["n"]))


PROGRAM = """
try:
    await tools.check(n={n})
    return ["answered"]
except RuntimeError as exc:
    return ["failed", len(str(exc).encode())]
"""


def test_an_error_text_over_the_result_cap_does_not_reach_the_program(runtime):
    result = asyncio.run(runtime.run(PROGRAM.format(n=int(1.5 * CAP)), {"check": check}))
    assert result.error is None, result
    outcome, size = json.loads(result.value.replace("'", '"'))
    assert outcome == "failed" and size <= CAP, f"the program read a {size}-byte error; max_result_bytes is {CAP}"


def test_an_error_text_over_the_reply_buffer_fails_that_call_alone(runtime):
    result = asyncio.run(runtime.run(PROGRAM.format(n=3 * CAP), {"check": check}))
    assert result.error is None and result.value.startswith("['failed'"), result
