"""The code runtime contract, held by both backends: budgets, values, logs, misuse, bindings."""

import asyncio
import time

import pytest

from dsh_actors import AbortController
from dsh_actors.codemode.isolation import SandboxUnavailableError, required
from dsh_actors.codemode.runtime import (CodeRuntimeConfig, MontyRuntime, SubprocessRuntime, dialect, make_runtime,
                                         resolved_backend)

BUDGETS = dict(compute_ms=1500, max_wall_ms=20_000, max_log_bytes=4096, max_value_bytes=256, max_memory_mb=256)


@pytest.fixture(scope="module", params=["monty", "cpython"])
def runtime(request):
    rt = make_runtime(CodeRuntimeConfig(backend=request.param, **BUDGETS))
    yield rt
    rt.close()


async def echo(args):
    return f"echo:{args.get('text')}"


def run(runtime, program, bindings=None, signal=None):
    return asyncio.run(runtime.run(program, {"echo": echo} if bindings is None else bindings, signal))


def test_make_runtime_builds_the_backend_the_config_names_and_auto_is_the_cpython_sandbox_here():
    auto = make_runtime(CodeRuntimeConfig())
    assert isinstance(auto, SubprocessRuntime)  # this host has every wall: the default runs full CPython
    assert auto.isolation.startswith("os:userns+mountns+pidns+netns+ipcns+landlock+seccomp")
    auto.close()
    assert isinstance(make_runtime(CodeRuntimeConfig(backend="monty")), MontyRuntime)
    with pytest.raises(ValueError, match=r"config.backend must be one of \['auto', 'cpython', 'monty'\], got 'node'"):
        CodeRuntimeConfig(backend="node")


def test_auto_falls_back_to_monty_where_a_wall_is_missing_unless_the_operator_accepts_it(monkeypatch):
    from dsh_actors.codemode import isolation

    lacking = {name: "ok" for name in isolation.MECHANISMS} | {"landlock": "landlock: not supported by this kernel"}
    monkeypatch.setattr(isolation, "probe", lambda *a: lacking)
    assert resolved_backend(CodeRuntimeConfig()) == "monty"
    assert resolved_backend(CodeRuntimeConfig(allow_missing=("landlock",))) == "cpython"
    assert resolved_backend(CodeRuntimeConfig(backend="cpython")) == "cpython"  # and then refuses, naming it
    assert dialect(CodeRuntimeConfig()).startswith("Monty, a subset of Python 3")


def test_a_program_prints_calls_bindings_and_returns_a_value(runtime):
    result = run(runtime, 'print("saw", await tools.echo(text="one"))\nreturn await tools["echo"]({"text": "two"})')
    assert result.logs == ["saw echo:one"] and result.value == "echo:two" and result.error is None
    assert runtime.language == "python" and runtime.dialect


def test_returning_nothing_gives_no_value_and_a_non_string_is_rendered(runtime):
    assert run(runtime, "x = 1").value is None
    assert run(runtime, 'return {"n": 42}').value == "{'n': 42}"


def test_a_multi_line_string_in_the_program_keeps_its_exact_contents(runtime):
    assert run(runtime, 'x = """a\n  b\nc"""\nreturn x').value == "a\n  b\nc"


def test_a_long_value_is_cut_at_the_byte_cap_with_a_marker(runtime):
    assert run(runtime, 'return "y" * 10000').value == "y" * 256 + "… [truncated]"


def test_a_raising_program_reports_its_own_traceback_without_host_paths(runtime):
    result = run(runtime, 'print("before")\nraise ValueError("boom")')
    assert result.logs == ["before"] and result.error.kind == "exception"
    assert result.error.message.endswith("ValueError: boom") and "line 2, in program" in result.error.message
    for host_detail in ("_child", "_launcher", "dsh_actors", "__dsh", "prelude"):
        assert host_detail not in result.error.message


def test_a_failed_sub_call_raises_inside_the_program_with_the_tool_text(runtime):
    async def failing(args):
        raise RuntimeError("Error: disk full")

    program = 'try:\n    await tools.bad()\nexcept RuntimeError as exc:\n    return "caught " + str(exc)'
    assert run(runtime, program, {"bad": failing}).value == "caught Error: disk full"


@pytest.mark.parametrize("name", ["_private", "__init__", "__getitem__", "keys", "names"])
def test_every_binding_name_is_reachable_as_an_attribute_and_by_key(runtime, name):
    async def named(args):
        return f"{name}:{args}"

    result = run(runtime, f"return [await tools.{name}(), await tools[{name!r}]({{'a': 1}})]", {name: named})
    assert result.value == repr([f"{name}:{{}}", f"{name}:{{'a': 1}}"]), result


def test_an_unknown_binding_is_an_attribute_error_inside_the_program(runtime):
    result = run(runtime, "try:\n    await tools.run_code(code='1')\nexcept AttributeError:\n    return 'refused'")
    assert result.value == "refused"


def test_the_program_sees_an_empty_environment(runtime):
    result = run(runtime, "import os\nreturn sorted(os.environ)")
    if isinstance(runtime, MontyRuntime):  # Monty has no environment at all
        assert result.error.message.endswith("RuntimeError: 'os.environ' is not supported in this environment")
    else:  # not even the LC_CTYPE that CPython's locale coercion sets
        assert result.value == "[]", result


def test_an_already_aborted_signal_never_starts_and_an_abort_mid_run_stops_it(runtime):
    controller = AbortController()
    controller.abort("stop")
    assert run(runtime, "return 1", signal=controller.signal).error.message == "stop"

    async def aborted_mid_run():
        later = AbortController()
        asyncio.get_running_loop().call_later(0.3, later.abort, "user stop")
        started = time.monotonic()
        result = await runtime.run("while True:\n    pass", {}, later.signal)
        return result, time.monotonic() - started

    result, took = asyncio.run(aborted_mid_run())
    # The abort ended it, not the 1.5 s compute budget (that would be a "timeout" error).
    assert (result.error.kind, result.error.message) == ("abort", "user stop"), (result, took)


def test_an_infinite_loop_exhausts_the_compute_budget(runtime):
    result = run(runtime, "while True:\n    pass")
    assert result.error.kind == "timeout" and "compute budget exhausted" in result.error.message


def test_time_waiting_on_a_binding_does_not_count_against_the_compute_budget(runtime):
    async def slow(args):
        await asyncio.sleep(2.0)
        return "slow"

    assert run(runtime, "return await tools.slow()", {"slow": slow}).value == "slow"


def test_the_wall_clock_ceiling_ends_a_run_that_waits_forever():
    for backend in ("monty", "cpython"):
        rt = make_runtime(CodeRuntimeConfig(backend=backend, max_wall_ms=600))

        async def forever(args):
            await asyncio.sleep(3600)

        result = run(rt, "return await tools.wait()", {"wait": forever})
        rt.close()
        assert (result.error.kind, result.error.message) == ("timeout", "wall-clock ceiling reached (600ms)"), backend


def test_huge_output_is_capped_with_a_marker(runtime):
    result = run(runtime, 'for i in range(100000):\n    print("x" * 100)')
    assert result.logs[-1] == "[dsh-code-runtime] log capture truncated at 4096 bytes"
    assert sum(len(line) for line in result.logs[:-1]) <= 4096


@pytest.mark.parametrize("backend", ["monty", "cpython"])
def test_many_short_lines_fill_the_default_log_budget_once_per_byte_and_say_they_were_cut(backend):
    rt = make_runtime(CodeRuntimeConfig(backend=backend, compute_ms=10_000, max_wall_ms=30_000))
    result = run(rt, "for i in range(100000):\n    print(i)\nreturn 'done'")
    rt.close()
    assert result.value == "done" and result.logs[-1] == "[dsh-code-runtime] log capture truncated at 65536 bytes"
    kept = result.logs[:-1]
    assert kept == [str(i) for i in range(len(kept))]
    # Each line costs its bytes and its newline, once: the budget is full to within one line.
    assert 65536 - len(str(len(kept))) - 1 < sum(len(line) + 1 for line in kept) <= 65536


def test_a_memory_bomb_fails_the_run_and_the_next_run_is_fine(runtime):
    result = run(runtime, 'x = "a" * (2 * 1024**3)\nreturn len(x)')
    assert result.error.kind == "exception" and "MemoryError" in result.error.message, result
    assert run(runtime, "return 7").value == "7"


def test_misuse_raises_and_config_is_validated(runtime):
    with pytest.raises(TypeError):
        asyncio.run(runtime.run(42, {}))
    with pytest.raises(ValueError, match=r"config.compute_ms must be a positive number, got 0"):
        CodeRuntimeConfig(compute_ms=0)
    closed = type(runtime)(CodeRuntimeConfig(backend="cpython" if isinstance(runtime, SubprocessRuntime) else "monty"))
    closed.close()
    with pytest.raises(RuntimeError, match="after disposal"):
        asyncio.run(closed.run("return 1", {}))


def test_a_missing_mechanism_refuses_to_run_unless_the_operator_allows_it_by_name():
    state = {"userns": "ok", "mountns": "ok", "pidns": "ok", "netns": "ok", "ipcns": "ok",
             "landlock": "landlock: not supported by this kernel", "seccomp": "ok"}
    with pytest.raises(SandboxUnavailableError, match=r"missing landlock \(landlock: not supported by this kernel\)"
                                                      r".*allow_missing=\['landlock'\]") as caught:
        required(state, ())
    assert caught.value.code == "SANDBOX_UNAVAILABLE"
    assert required(state, ["landlock"]) == ("userns", "mountns", "pidns", "netns", "ipcns", "seccomp")
    with pytest.raises(ValueError, match="unknown isolation mechanisms"):
        required(state, ["apparmor"])


def test_a_program_outside_the_monty_subset_is_told_what_is_unsupported():
    rt = MontyRuntime(CodeRuntimeConfig())
    result = run(rt, "def numbers():\n    yield 1\nreturn list(numbers())")
    rt.close()
    assert result.error.kind == "exception"
    assert "yield" in result.error.message and "this sandbox runs Monty, a subset of Python" in result.error.message
