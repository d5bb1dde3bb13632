"""Attack: lone surrogates in the text the host frames (found by a security review).

A Python ``str`` may hold a lone surrogate (``json.loads('"\\\\udcff"')`` makes one, and so
does a file name decoded with ``surrogateescape``), but the host frames replies and the
``start`` message with ``msgpack``, which refuses them:

- a tool's result or error text that carries the program's argument back (``f"no such
  file: {path}"``) crashes the host's task for that call: no reply is ever sent, the
  program waits, and the run ends at the wall ceiling (default ten minutes) instead of the
  call failing alone;
- a program text holding one makes ``rt.run`` raise a raw ``UnicodeEncodeError`` instead
  of returning a result.
"""

import asyncio
import time

import pytest

from dsh_actors.codemode.contract import CodeRuntimeConfig, RunResult
from dsh_actors.codemode.sandbox import SubprocessRuntime

WALL_MS = 4000


@pytest.fixture(scope="module")
def runtime():
    rt = SubprocessRuntime(CodeRuntimeConfig(backend="cpython", compute_ms=3000, max_wall_ms=WALL_MS))
    yield rt
    rt.close()


async def echo(args):
    return f"echo: {args['text']}"


async def read_file(args):
    raise FileNotFoundError(f"no such file: {args['path']}")


@pytest.mark.parametrize("call", ["tools.echo(text='\\udcff')", "tools.read_file(path='\\udcff')"])
def test_a_tool_answer_carrying_a_lone_surrogate_fails_that_call_alone(runtime, call):
    program = f"try:\n    return 'answered: ' + await {call}\nexcept Exception as exc:\n    return 'failed: ' + str(exc)[:40]"
    started = time.monotonic()
    result = asyncio.run(runtime.run(program, {"echo": echo, "read_file": read_file}))
    elapsed = time.monotonic() - started
    # Never answered, the program would wait for the wall ceiling: its result would be that error.
    assert result.error is None, f"{result.error} after {elapsed:.1f}s: the call was never answered"
    assert str(result.value).startswith(("answered: ", "failed: ")), result


def test_a_program_holding_a_lone_surrogate_is_a_result_not_a_raised_error(runtime):
    outcome = asyncio.run(runtime.run("return '\udc80'", {}))  # a real lone surrogate in the program text
    assert isinstance(outcome, RunResult)
