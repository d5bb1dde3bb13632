"""The subprocess sandbox: budgets, misuse, and the escape suite (each contained, host unharmed)."""

import asyncio
import os

import pytest

from dsh_actors import AbortController
from dsh_actors.codemode.runtime import CodeRuntimeConfig, SubprocessRuntime


@pytest.fixture(scope="module")
def runtime():
    rt = SubprocessRuntime(CodeRuntimeConfig(compute_ms=1500, max_wall_ms=20_000, max_log_bytes=4096,
                                             max_value_bytes=256, max_memory_mb=256))
    yield rt
    rt.close()


async def echo(args):
    return f"echo:{args.get('text')}"


def run(runtime, program, bindings=None, signal=None):
    return asyncio.run(runtime.run(program, {"echo": echo} if bindings is None else bindings, signal))


def test_a_program_prints_calls_bindings_and_returns_a_value(runtime):
    result = run(runtime, 'print("saw", await tools.echo(text="one"))\nreturn await tools["echo"]({"text": "two"})')
    assert result.logs == ["saw echo:one"] and result.value == "echo:two" and result.error is None
    assert runtime.language == "python" and runtime.isolation.startswith("subprocess")


def test_returning_nothing_gives_no_value_and_a_non_string_is_rendered(runtime):
    assert run(runtime, "x = 1").value is None
    assert run(runtime, 'return {"n": 42}').value == "{'n': 42}"


def test_a_long_value_is_cut_at_the_byte_cap_with_a_marker(runtime):
    assert run(runtime, 'return "y" * 10000').value == "y" * 256 + "… [truncated]"


def test_a_raising_program_reports_its_own_traceback_without_host_paths(runtime):
    result = run(runtime, 'print("before")\nraise ValueError("boom")')
    assert result.logs == ["before"] and result.error.kind == "exception"
    assert result.error.message.endswith("ValueError: boom") and "line 2" in result.error.message
    assert "_child.py" not in result.error.message and "dsh_actors" not in result.error.message


def test_an_already_aborted_signal_never_spawns_and_an_abort_mid_run_stops_it(runtime):
    controller = AbortController()
    controller.abort("stop")
    assert run(runtime, "return 1", signal=controller.signal).error.message == "stop"

    async def aborted_mid_run():
        later = AbortController()
        asyncio.get_running_loop().call_later(0.3, later.abort, "user stop")
        return await runtime.run("import time\ntime.sleep(30)", {}, later.signal)

    result = asyncio.run(aborted_mid_run())
    assert (result.error.kind, result.error.message) == ("abort", "user stop")


def test_time_waiting_on_a_binding_does_not_count_against_the_compute_budget(runtime):
    async def slow(args):
        await asyncio.sleep(2.0)
        return "slow"

    assert run(runtime, "return await tools.slow()", {"slow": slow}).value == "slow"


def test_misuse_raises_and_config_is_validated(runtime):
    with pytest.raises(TypeError):
        asyncio.run(runtime.run(42, {}))
    with pytest.raises(ValueError, match=r"config.compute_ms must be a positive number, got 0"):
        CodeRuntimeConfig(compute_ms=0)
    closed = SubprocessRuntime()
    closed.close()
    with pytest.raises(RuntimeError, match="after disposal"):
        asyncio.run(closed.run("return 1", {}))


ESCAPES = {
    "host environment": ("import os\nreturn sorted(os.environ)", None),
    "files outside the work dir": ('return open("/etc/hostname").read()', "not allowed"),
    "a file found by walking up": ('import os\nreturn open(os.path.join(os.getcwd(), "..", "..", "etc", "passwd")).read()',
                                   "not allowed"),
    "the ray module": ("import ray\nreturn 1", "importing 'ray' is not allowed"),
    "ray from site-packages": ('import sys\nsys.path += [p.replace("lib-dynload", "site-packages") for p in sys.path]\n'
                               "import ray\nreturn 1", "not allowed"),
    "sockets": ("import socket\nsocket.create_connection(('127.0.0.1', 6379))", "not allowed"),
    "ctypes": ("import ctypes\nreturn ctypes.CDLL(None)", "not allowed"),
    "a subprocess": ("import subprocess\nsubprocess.run(['sh', '-c', 'echo pwned'])", "not allowed"),
    "a fork bomb": ("import os\nwhile True:\n    os.fork()", "not allowed"),
    "os.system": ("import os\nos.system('touch /tmp/dsh-pwned')", "not allowed"),
    "a memory bomb": ("x = bytearray(8 * 1024**3)\nreturn len(x)", "MemoryError"),
    "an infinite loop": ("while True:\n    pass", "compute budget exhausted"),
}


@pytest.mark.parametrize("name", list(ESCAPES))
def test_an_escape_attempt_is_contained_and_the_next_run_is_clean(runtime, name):
    program, expected = ESCAPES[name]
    result = run(runtime, program)
    if expected is None:  # nothing to escape to: the child's environment is empty
        assert result.value in ("[]", "['LC_CTYPE']"), result
    else:
        assert result.error is not None, result
        assert expected in result.error.message, result.error
    assert not os.path.exists("/tmp/dsh-pwned")
    again = run(runtime, 'import os\nprint(os.listdir("."))\nreturn globals().get("x", "clean")')
    assert again.logs == ["[]"] and again.value == "clean" and again.error is None


def test_huge_output_is_capped_with_a_marker(runtime):
    result = run(runtime, 'for i in range(100000):\n    print("x" * 100)')
    assert result.logs[-1] == "[dsh-code-runtime] log capture truncated at 4096 bytes"
    assert sum(len(line) for line in result.logs[:-1]) <= 4096


def test_forged_frames_are_dropped_and_unknown_bindings_refused(runtime):
    program = (
        "import sys\n"
        "main = sys.modules['__main__']\n"
        "main._send({'t': 'call', 'id': 'x', 'name': 'echo', 'args': {}})\n"  # malformed id: dropped
        "main._send({'t': 'weird'})\n"                                          # unknown frame: dropped
        "main._send({'t': 'call', 'id': 99, 'name': 'secret_host_fn', 'args': {}})\n"
        "try:\n"
        "    await tools.run_code(code='1')\n"
        "except AttributeError as exc:\n"
        "    print(exc)\n"
        "return await tools.echo(text='still fine')"
    )
    result = run(runtime, program)
    assert result.value == "echo:still fine" and result.logs == ['unknown binding "tools.run_code"']
