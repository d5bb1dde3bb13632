"""A Python driver's expectations, as with Ray's own handles: a call happens when it is made,
what was passed is what was sent, and nothing fails in silence."""

import asyncio
import gc
import logging
import os
import subprocess
import sys
import textwrap
import time

import pytest


from dsh_actors import HarnessError, define_tool, text_block

from .fixtures import echo, shares_one_host_registry

pytestmark = shares_one_host_registry

T = 120


def eventually(check, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "never happened"
        time.sleep(0.05)


def names(registry, scope=None):
    return [s["name"] for s in registry.schemas(scope).result(T)]


def test_a_registration_nobody_waits_for_still_happens(registry):
    registry.register(echo("fire-and-forget"))  # not awaited, no .result()
    eventually(lambda: "fire-and-forget" in names(registry))

    async def in_async_code():
        registry.register(echo("from-a-coroutine"))  # not awaited either
        await asyncio.sleep(0)
        deadline = time.monotonic() + 60
        while "from-a-coroutine" not in [s["name"] for s in await registry.schemas()]:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)

    asyncio.run(in_async_code())


def test_a_disposer_called_without_waiting_disposes_and_a_second_call_is_the_same_undo(registry):
    dispose = registry.register(echo("short-lived")).result(T)
    first = dispose()  # dropped on purpose: the undo has started
    assert dispose() is first
    eventually(lambda: "short-lived" not in names(registry))
    eventually(lambda: dispose.disposed)
    first.result(T)


def test_arguments_and_restrictions_are_taken_when_the_call_is_made(registry):
    registry.register(echo()).result(T)
    registry.register(echo("rm")).result(T)
    arguments = {"text": "as sent"}
    response = registry.execute(call_id="1", name="echo", arguments=arguments)
    arguments["text"] = "changed later"
    assert response.result(T).text == "as sent"
    deny = ["rm"]
    scope = registry.scope("snap")
    restricted = scope.restrict(deny=deny)
    deny.clear()
    deny.append("echo")
    restricted.result(T)
    assert names(registry, scope) == ["echo"]  # "rm" hidden, as passed; "echo" still there


def test_views_take_a_scope_object_or_its_agent_id(registry):
    registry.register(echo()).result(T)
    scope = registry.scope("viewer")
    scope.register(echo("mine")).result(T)
    assert names(registry, scope) == names(registry, "viewer") == ["echo", "mine"]
    assert [d.name for d in registry.visible(scope).result(T)] == ["echo", "mine"]
    assert registry.get("mine", scope).result(T).name == "mine"


def test_a_harness_error_raised_by_a_tool_carries_its_own_code(registry):
    def full(args, ctx):
        raise HarnessError("disk full", "ENOSPC")

    registry.register(define_tool(name="write", description="w", parameters={}, execute=full)).result(T)
    result = registry.execute(call_id="1", name="write", arguments={}).result(T)
    assert result.is_error and result.error == {"name": "HarnessError", "code": "ENOSPC"}
    assert result.text == "Error: disk full"


def test_arguments_that_are_not_json_text_are_refused_as_invalid_input(registry):
    registry.register(echo()).result(T)
    for arguments in ({"text": "lone \ud800 surrogate"}, {"key \udfff": "x"}):
        result = registry.execute(call_id="1", name="echo", arguments=arguments).result(T)
        assert result.is_error and result.error == {"name": "InvalidExecutionInputError", "code": "INVALID_INPUT"}


@pytest.mark.own_registry  # it kills or ends a part of its registry, or counts its calls
def test_an_error_nobody_collected_is_logged_not_lost(registry, caplog):
    registry.register(echo("dup")).result(T)
    with caplog.at_level(logging.WARNING, logger="dsh_actors.response"):
        registry.register(echo("dup"))  # fails (already registered); nobody looks
        gc.collect()
        eventually(lambda: any("nobody awaited" in r.getMessage() and "DuplicateToolError" in r.getMessage()
                               for r in caplog.records))


CANCEL_THEN_EXIT = textwrap.dedent("""
    import asyncio, sys, time
    import ray
    from dsh_actors import define_tool, text_block
    from dsh_actors.runtime import ToolRegistry

    ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
    registry = ToolRegistry(sys.argv[2])

    async def main():
        call = registry.execute(call_id="1", name="sleepy", arguments={})
        try:
            await asyncio.wait_for(call, 0.5)
        except asyncio.TimeoutError:
            pass
        other = registry.execute(call_id="2", name="sleepy", arguments={})
        await asyncio.sleep(0.3)
        other.cancel()

    asyncio.run(main())
    ray.shutdown()
    time.sleep(3)  # past the grace after which a cancelled task is force-killed
    print("initialized after shutdown:", ray.is_initialized(), flush=True)
""")


@pytest.mark.own_registry  # it kills or ends a part of its registry, or counts its calls
def test_a_call_cancelled_just_before_exit_never_starts_a_second_ray(registry, ray_cluster):
    async def sleepy(args, ctx):
        await asyncio.sleep(30)
        return [text_block("late")]

    registry.register(define_tool(name="sleepy", description="s", parameters={}, execute=sleepy)).result(T)
    out = subprocess.run([sys.executable, "-c", CANCEL_THEN_EXIT, ray_cluster["cluster"].address, registry.name],
                         capture_output=True, text=True, timeout=T)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "initialized after shutdown: False" in out.stdout
    assert "Started a local Ray instance" not in out.stderr


def test_the_readme_driving_section_runs_as_written(ray_cluster):
    import os
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    code = re.search(r"## Driving it from Python\n.*?```python\n(.*?)```", readme, re.S).group(1)
    env = {**os.environ, "RAY_ADDRESS": ray_cluster["cluster"].address}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    printed = [line for line in out.stdout.splitlines() if not line.startswith("(")]  # not workers' lines
    assert printed == ["['2', '3', 'Error: budget spent']", "['add']"]


ASKING_DRIVER = textwrap.dedent("""
    import sys
    import ray
    from dsh_actors import ask, define_tool, text_block
    from dsh_actors.runtime import ToolRegistry

    from dsh_actors.runtime.local import ensure_ray

    if sys.argv[1] == "local":
        ensure_ray()  # a Ray of its own, as a driver without RAY_ADDRESS starts one
    else:
        ray.init(address=sys.argv[1], logging_level="ERROR")  # actor output forwarded, as by default
    registry = ToolRegistry.connect(sys.argv[2])
    registry.register(define_tool(name="risky", description="r", parameters={},
                                  execute=lambda a, c: [text_block("ran")])).result(60)
    registry.on("tools/pre-execute", lambda e, n: ask("check")).result(60)
    registry.approvals(policy="ask").result(60)
    result = registry.scope("a1").execute(call_id="1", name="risky", arguments={}).result(180)
    print("RESULT", result.text, result.is_error, flush=True)
""")


def clean_env():
    """A new shell's environment: none of the switches this test session set for Ray."""
    env = dict(os.environ)
    for key in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_AUTH_MODE", "RAY_ADDRESS"):
        env.pop(key, None)
    return env


def printed_command(driver):
    import re

    for line in driver.stdout:
        found = re.search(r"`dsh-actors (approvals allow [^`]+)`", line)
        if found:
            return found.group(1).split()
    raise AssertionError(driver.stderr.read()[-2000:])


@pytest.mark.parametrize("cluster", ["the session's cluster", "the driver's own local Ray"])
def test_a_queued_ask_prints_the_command_that_answers_it_and_that_command_works_from_a_new_shell(ray_cluster, cluster):
    name = f"asking-{time.monotonic_ns()}"
    address = ray_cluster["cluster"].address if cluster == "the session's cluster" else "local"
    # The driver is set up for its cluster; the answer comes from a new shell, knowing nothing.
    driver = subprocess.Popen([sys.executable, "-c", ASKING_DRIVER, address, name],
                              env=dict(os.environ) if address != "local" else clean_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        command = printed_command(driver)
        if cluster == "the session's cluster":
            assert command[command.index("--address") + 1] == ray_cluster["cluster"].address
        wrong = subprocess.run([sys.executable, "-m", "dsh_actors", *command[:command.index("--registry") + 1],
                                "no-such-registry", *command[command.index("--registry") + 2:]],
                               env=clean_env(), capture_output=True, text=True, timeout=T)
        assert wrong.returncode == 1 and len(wrong.stderr.strip().splitlines()) == 1, wrong.stderr
        assert "registry 'no-such-registry' has no approval queue" in wrong.stderr
        started = time.monotonic()
        answer = subprocess.run([sys.executable, "-m", "dsh_actors", *command], env=clean_env(),
                                capture_output=True, text=True, timeout=T)
        assert answer.returncode == 0, answer.stderr[-2000:]  # loopback kept, the token found: as printed
        assert time.monotonic() - started < 60
        rest = driver.stdout.read()
        assert "RESULT ran False" in rest, rest[-2000:]
    finally:
        driver.kill()
        driver.communicate()  # reaps it and closes its pipes
        if cluster == "the session's cluster":
            from dsh_actors.runtime import ToolRegistry

            try:
                ToolRegistry(name).shutdown()
            except Exception:
                pass


def test_the_approval_command_gives_up_on_a_cluster_that_is_gone_and_stops_on_sigterm():
    import signal

    started = time.monotonic()
    gone = subprocess.run([sys.executable, "-m", "dsh_actors", "approvals", "list", "--address", "127.0.0.1:9",
                           "--timeout", "3"], env=clean_env(), capture_output=True, text=True, timeout=T)
    assert gone.returncode == 1 and "no Ray cluster answered at 127.0.0.1:9 within 3s" in gone.stderr
    assert time.monotonic() - started < 30
    waiting = subprocess.Popen([sys.executable, "-m", "dsh_actors", "approvals", "list", "--address", "127.0.0.1:9",
                                "--timeout", "300"], env=clean_env(), stderr=subprocess.PIPE, text=True)
    time.sleep(3)  # connecting, retrying inside Ray
    stopped = time.monotonic()
    waiting.send_signal(signal.SIGTERM)
    _, said = waiting.communicate(timeout=10)
    assert waiting.returncode == 128 + signal.SIGTERM and time.monotonic() - stopped < 10
    assert "stopped (SIGTERM)" in said