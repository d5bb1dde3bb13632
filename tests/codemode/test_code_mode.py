"""Code Mode through the in-process registry: modes, reserved transport, bridge, SDK."""

import asyncio
import time

import pytest
from hypothesis import given, strategies as st

from dsh_actors import (
    DefinitionError, InMemoryRegistry, ReservedNameError, RestrictionError, accept, define_tool, deny, text_block,
)
from dsh_actors.codemode.runtime import CodeRuntimeConfig, SubprocessRuntime, make_runtime
from dsh_actors.codemode.sdk import SDK_SECTION, json_schema_to_python, render_sdk


@pytest.fixture(scope="module")
def runtime():
    rt = SubprocessRuntime(CodeRuntimeConfig(compute_ms=3000, max_wall_ms=30_000))
    yield rt
    rt.close()


def echo(name="echo", body=None):
    return define_tool(name=name, description=f"{name} tool", parameters={"text": {"type": "string"}},
                       execute=body or (lambda a, c: [text_block(f"{name}:{a.get('text', '')}")]))


def code_registry(runtime, mode="code", **extra):
    events = []

    def record(agent, event):
        events.append((agent, event))

    registry = InMemoryRegistry(mode=mode, code_runtime=runtime, on_code_dispatch=record, **extra)
    registry.register(echo())
    return registry, events


def run_code(registry, code, call_id="rc", **fields):
    return asyncio.run(registry.execute(call_id=call_id, name="run_code", arguments={"code": code}, **fields))


def test_run_code_is_in_every_view_in_code_modes_and_absent_in_native(runtime):
    registry, _ = code_registry(runtime)
    assert [d.name for d in registry.visible()] == ["echo", "run_code"]
    scope = registry.scope("a1")
    scope.restrict(allow=[])
    assert [d.name for d in scope.visible()] == ["run_code"]
    assert registry.get("run_code") is registry.get("run_code", "a1")
    assert registry.schemas()[-1]["parameters"] == {
        "type": "object", "properties": {"code": {"type": "string", "description": "The body of an async Python function."}},
        "required": ["code"]}
    assert "Execute a Python program" in registry.schemas()[-1]["description"]
    native = InMemoryRegistry()
    native.register(echo("run_code"))  # native mode: an ordinary name
    assert [d.name for d in native.visible()] == ["run_code"]


def test_the_reserved_name_cannot_be_registered_shadowed_or_restricted(runtime):
    registry, _ = code_registry(runtime, mode="both")
    message = 'tool name "run_code" is reserved for the Code Mode presentation transport'
    with pytest.raises(ReservedNameError, match=message):
        registry.register(echo("run_code"))
    with pytest.raises(ReservedNameError, match=message):
        registry.scope("a1").register(echo("run_code"))
    with pytest.raises(RestrictionError, match='cannot name reserved Code Mode presentation transport "run_code"'):
        registry.scope("a1").restrict(deny=["run_code"])
    with pytest.raises(DefinitionError, match="mode must be one of"):
        InMemoryRegistry(mode="turbo")


def test_without_a_python_runtime_run_code_and_the_sdk_fail_with_an_actionable_error():
    registry = InMemoryRegistry(mode="code")
    result = run_code(registry, "return 1")
    assert result.is_error and "requires a code runtime" in result.text
    with pytest.raises(Exception, match="requires a code runtime"):
        registry.sdk()

    class Other:
        language = "typescript"

    with pytest.raises(Exception, match='language is "typescript"'):
        InMemoryRegistry(mode="code", code_runtime=Other()).sdk()


def test_logs_and_the_returned_value_come_back_with_meta_logs(runtime):
    registry, _ = code_registry(runtime)
    result = run_code(registry, 'print("saw", await tools.echo(text="one"))\nreturn await tools.echo(text="two")')
    assert result.text == "saw echo:one\necho:two" and result.meta == {"logs": ["saw echo:one"]}
    assert run_code(registry, "x = 1").text == "(run_code completed with no output)"


def test_sub_calls_run_through_the_full_pipeline_as_the_calling_agent_with_the_outer_token(runtime):
    registry, events = code_registry(runtime)
    seen = []
    registry.on("tools/result", lambda e, r: seen.append((e.call_id, e.name, e.agent, e.parent, e.token)))
    registry.scope("a1").on("tools/pre-execute",
                            lambda e, n: deny("no secrets here") if e.arguments.get("text") == "secret" else n())
    code = ('try:\n    await tools.echo(text="secret")\nexcept Exception as exc:\n    print("caught:", exc)\n'
            'return await tools.echo(text="ok")')
    result = run_code(registry, code, agent="a1")
    assert result.text == "caught: Error: no secrets here\necho:ok"
    subs, outer = seen[:2], seen[2]
    assert [(s[0], s[1], s[2]) for s in subs] == [("rc:code:1", "echo", "a1"), ("rc:code:2", "echo", "a1")]
    assert all(s[3] == outer[4] for s in subs) and outer[0] == "rc"
    assert [e for _, e in events] == [
        {"type": "tool/code-dispatch", "parent_call_id": "rc", "sub_call_id": "rc:code:1", "name": "echo",
         "arguments": {"text": "secret"}, "is_error": True, "result_summary": "Error: no secrets here"},
        {"type": "tool/code-dispatch", "parent_call_id": "rc", "sub_call_id": "rc:code:2", "name": "echo",
         "arguments": {"text": "ok"}, "is_error": False, "result_summary": "echo:ok"},
    ]


def test_calls_run_one_at_a_time_in_submission_order_even_under_gather(runtime):
    spans = []

    async def slow(args, ctx):
        start = time.monotonic()
        await asyncio.sleep(0.05)
        spans.append((args["text"], start, time.monotonic()))
        return [text_block(args["text"])]

    registry, _ = code_registry(runtime)
    registry.register(echo("slow", body=slow))
    result = run_code(registry, 'import asyncio\nreturn await asyncio.gather(*(tools.slow(text=str(i)) for i in range(4)))')
    assert result.text == "['0', '1', '2', '3']"
    assert [s[0] for s in spans] == ["0", "1", "2", "3"]
    assert all(later[1] >= earlier[2] for earlier, later in zip(spans, spans[1:]))


def test_sub_call_context_reaches_the_outer_result_and_failures_raise_in_the_program(runtime):
    context = {"content": "from a sub-call", "source": {"kind": "plugin", "plugin": "p"}}
    registry, _ = code_registry(runtime)
    registry.on("tools/post-execute", lambda e, r, n: accept(additional_context=[context]) if e.name == "echo" else n())
    registry.register(echo("broken", body=lambda a, c: 1 / 0))
    result = run_code(registry, 'await tools.echo(text="x")\nawait tools.broken()')
    assert result.error == {"name": "CodeRunFailedError", "code": "CODE_RUN_FAILED"}
    assert result.text.startswith("Error: code run failed (exception): ")
    assert "RuntimeError: Error: division by zero" in result.text
    assert result.additional_context == [context]


NOT_JSON_CASES = [
    ("text={1, 2}", "tool arguments must be JSON-serializable: Object of type set is not JSON serializable"),
    ("text=f", "tool arguments must be JSON-serializable: Object of type function is not JSON serializable"),
    ("f", "tool arguments must be JSON-serializable (got a value JSON cannot represent)"),
    ("len", "tool arguments must be JSON-serializable (got a value JSON cannot represent)"),
    ("text=float('nan')", "tool arguments must be JSON-serializable: Out of range float values are not JSON compliant"),
    ("None", "tool arguments must be JSON-serializable (call the tool with an arguments object, e.g. `{}`)"),
]


@pytest.mark.parametrize("backend", ["cpython", "monty"])
def test_non_json_binding_arguments_are_rejected_with_the_reference_texts_before_dispatch(backend):
    rt = make_runtime(CodeRuntimeConfig(backend=backend, compute_ms=3000, max_wall_ms=30_000))
    registry, events = code_registry(rt)
    ran = []
    registry.on("tools/pre-execute", lambda e, n: ran.append(e.name) or n())
    program = "def f():\n    return 1\nseen = []\n" + "".join(
        f"try:\n    await tools.echo({call})\nexcept Exception as exc:\n    seen.append(str(exc))\n"
        for call, _ in NOT_JSON_CASES) + "return seen"
    result = run_code(registry, program, agent="a1")
    rt.close()
    seen = eval(result.text)  # the rendered list of the texts the program caught
    assert [text[:len(expected)] for text, (_, expected) in zip(seen, NOT_JSON_CASES)] == [e for _, e in NOT_JSON_CASES]
    assert ran == ["run_code"] and events == []  # nothing dispatched, nothing logged


def test_an_in_process_runtime_passing_python_values_gets_the_same_rejections():
    class Direct:
        """A runtime that calls its bindings with Python values, as an in-process one may."""
        language, dialect, isolation = "python", "Python", "none"

        async def run(self, program, bindings, signal=None):
            from dsh_actors.codemode.contract import RunResult
            caught = []
            for raw in ({"text": {1, 2}}, len, None, {"text": "ok"}):
                try:
                    caught.append(await bindings["echo"](raw))
                except TypeError as exc:
                    caught.append(str(exc))
            return RunResult(value=repr(caught))

        def close(self):
            pass

    registry, events = code_registry(Direct())
    assert eval(run_code(registry, "ignored", agent="a1").text) == [
        "tool arguments must be JSON-serializable: Object of type set is not JSON serializable",
        "tool arguments must be JSON-serializable (got a value JSON cannot represent)",
        "tool arguments must be JSON-serializable (call the tool with an arguments object, e.g. `{}`)",
        "echo:ok"]
    assert len(events) == 1


class Raising:
    """A runtime whose run raises ``error`` after its program's first sub-call started."""
    language, dialect, isolation = "python", "Python", "none"

    def __init__(self, error):
        self.error = error

    async def run(self, program, bindings, signal=None):
        asyncio.ensure_future(bindings["echo"]({"text": "in flight"}))
        await asyncio.sleep(0)
        raise self.error

    def close(self):
        pass


def test_a_runtime_that_raises_fails_the_call_as_the_reference_does_after_draining_its_sub_calls():
    from dsh_actors.codemode.isolation import SandboxUnavailableError
    from dsh_actors.core.errors import error_result

    registry, events = code_registry(Raising(ValueError("backend exploded")))
    post = []
    registry.on("tools/post-execute", lambda e, r, n: post.append((e.name, r.text)) or n())
    result = run_code(registry, "ignored", agent="a1")
    assert result.text == "Error: backend exploded" and result.is_error and "error" not in result
    assert post == [("echo", "echo:in flight"), ("run_code", "Error: backend exploded")]
    assert [event["sub_call_id"] for _, event in events] == ["rc:code:1"]  # drained before the result
    coded = SandboxUnavailableError("this host lacks landlock")
    result = run_code(code_registry(Raising(coded))[0], "ignored", agent="a1")
    assert {k: result[k] for k in ("content", "is_error", "error")} == error_result(coded)
    assert result.error["code"] == coded.code  # a HarnessError keeps its own name and code


def test_run_code_is_never_a_binding_and_restrictions_change_the_bindings(runtime):
    registry, _ = code_registry(runtime, mode="both")
    registry.register(echo("hidden"))
    registry.scope("a1").restrict(deny=["hidden"])
    result = run_code(registry, "return sorted(dir(tools))", agent="a1")
    assert result.text == "['echo']"


def test_settlement_aborts_the_in_flight_sub_call_and_logs_it_before_returning(runtime):
    saw = []

    async def waits(args, ctx):
        reason = await ctx.signal
        saw.append(reason)
        return [text_block("stopped")]

    registry, events = code_registry(runtime)
    registry.register(echo("waits", body=waits))
    code = "import asyncio\nasyncio.ensure_future(tools.waits())\nawait asyncio.sleep(0.3)\nraise RuntimeError('gave up')"
    result = run_code(registry, code, agent="a1")
    assert result.error["code"] == "CODE_RUN_FAILED" and "gave up" in result.text
    assert saw == ["run_code settled"]
    assert [e["sub_call_id"] for _, e in events] == ["rc:code:1"]


def test_the_outer_signal_aborts_the_run(runtime):
    from dsh_actors import AbortController

    registry, _ = code_registry(runtime)
    controller = AbortController()

    async def scenario():
        asyncio.get_running_loop().call_later(0.3, controller.abort, "caller stop")
        return await registry.execute(call_id="rc", name="run_code", arguments={"code": "import time\ntime.sleep(20)"},
                                      signal=controller.signal)

    result = asyncio.run(scenario())
    assert result.text == "Error: code run failed (abort): caller stop"


def test_presenters_render_the_code_and_the_logs(runtime):
    registry, _ = code_registry(runtime)
    definition = registry.get("run_code")
    assert definition.present_call({"code": "return 1"}) == {
        "card": "generic", "title": "return 1", "kind": "execute", "raw_input": "return 1"}
    result = run_code(registry, 'print("a")\nreturn 2')
    assert definition.present_result({"code": "x"}, result) == {"card": "generic", "content": [text_block("a\n2")]}
    assert definition.present_result({"code": "x"}, {"content": [], "is_error": True}) is None


def test_the_sdk_is_sorted_deterministic_and_follows_restrictions(runtime):
    registry, _ = code_registry(runtime, mode="both")
    registry.register(echo("alpha"))
    registry.register(define_tool(name="my-mcp.tool", description="Search.", parameters={}, execute=lambda a, c: []))
    text = registry.sdk()
    assert text == registry.sdk()
    for phrase in ("body of an async Python function", "await tools.name(", 'tools["exotic-name"]',
                   "JSON-serializable", "raises an exception", "even under `asyncio.gather`",
                   "Only what you print or return comes back", "The available tools:"):
        assert phrase in text
    assert text.index("def alpha") < text.index("def echo") < text.index('tools["my-mcp.tool"]')
    assert "run_code" not in text.split("```python")[1]
    registry.scope("a1").restrict(deny=["alpha"])
    assert "def alpha" not in registry.sdk("a1") and SDK_SECTION == "tools:sdk"


def test_json_schema_to_python_examples():
    schema = {"type": "object", "properties": {
        "path": {"type": "string", "description": "Absolute file path"}, "limit": {"type": "number"},
        "opts": {"type": "object", "properties": {"deep": {"type": "boolean"}}, "required": ["deep"]},
        "mode": {"type": "string", "enum": ["fast", "slow"]}, "tags": {"type": "array", "items": {"type": "string"}},
    }, "required": ["path"]}
    assert json_schema_to_python(schema) == (
        'TypedDict({"path": str, "limit": NotRequired[float], "opts": NotRequired[TypedDict({"deep": bool})], '
        '"mode": NotRequired[Literal["fast", "slow"]], "tags": NotRequired[list[str]]})')
    for unknown in (None, 3, {"oneOf": []}, {"$ref": "#/x"}, {"type": ["string", "null"]}):
        assert json_schema_to_python(unknown) == "Any"
    assert render_sdk([]).endswith("# (no tools are available to this program)")


anything = st.recursive(st.none() | st.booleans() | st.integers() | st.text() | st.floats(),
                        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                        max_leaves=15)


@given(anything)
def test_json_schema_to_python_is_total(schema):
    assert isinstance(json_schema_to_python(schema), str)
    assert isinstance(render_sdk([{"name": "t", "description": "d", "parameters": schema}]), str)


def test_sub_results_flatten_to_text_with_placeholders_and_summaries_are_cut_at_200():
    from dsh_actors.codemode.transport import flatten, summary

    assert flatten({"content": [text_block("long"), {"type": "reasoning"}, {"type": "image", "data": "x"}]}) == \
        "long\n[reasoning content]\n[image content]"
    assert summary("/work/dir/file.txt", cwd="/work/dir") == "./file.txt"
    assert summary("/x", cwd="/") == "/x"
    cut = summary("€" * 300)
    assert len(cut) == 201 and cut.endswith("…")
