"""dsh tools in a pydantic-ai agent (dsh_actors/adapters/pydantic_ai.py), driven by
pydantic-ai's own FunctionModel, in one process: each call through the registry's pipeline,
a denial shown as pydantic-ai shows a failed tool, an ask answered through pydantic-ai's
deferred tool calls, a tool shadowed for one agent. Judged from outside: files the bodies
write, what the model was shown, what the registry's observers heard."""

import asyncio

import pytest

pytest.importorskip("pydantic_ai")

from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults  # noqa: E402
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart  # noqa: E402
from pydantic_ai.models.function import FunctionModel  # noqa: E402

from dsh_actors import InMemoryRegistry, ask, define_tool, deny  # noqa: E402
from dsh_actors.adapters.pydantic_ai import DshToolset  # noqa: E402

pytestmark = pytest.mark.timeout(60)


def _registry(folder):
    registry = InMemoryRegistry()

    def write(args, ctx):
        (folder / args["name"]).write_text(ctx.agent)
        return [{"type": "text", "text": f"wrote {args['name']}"}]

    registry.register(define_tool(name="add", description="Add two integers.",
                                  parameters={"a": {"type": "number"}, "b": {"type": "number"}},
                                  execute=lambda args, ctx: [{"type": "text", "text": str(int(args["a"] + args["b"]))}],
                                  extras={"read_only": True}))
    registry.register(define_tool(name="write", description="Write a file.", parameters={"name": {"type": "string"}},
                                  execute=write))
    registry.register(define_tool(name="rm", description="Remove a file.", parameters={"name": {"type": "string"}},
                                  execute=lambda args, ctx: (folder / args["name"]).unlink()))
    registry.register(define_tool(name="whoami", description="Who answers.", parameters={},
                                  execute=lambda args, ctx: [{"type": "text", "text": "the global one"}]))
    registry.scope("alice").register(define_tool(name="whoami", description="Alice's own.", parameters={},
                                                 execute=lambda args, ctx: [{"type": "text", "text": "alice's own"}]))

    def gate(execution, call_next):
        if execution.name == "rm":
            return deny("deleting is not allowed here")
        if execution.name == "write":
            return ask("writes need a human")
        return call_next()

    registry.on("tools/pre-execute", gate)
    heard = []
    registry.on("tools/result", lambda execution, result: heard.append((execution.name, result.is_error)))
    return registry, heard


class _Appended:
    """A session log as the adapters take one: anything with ``append(event)``."""

    def __init__(self, events):
        self.append = events.append


class _Script:
    """A model that makes four calls at once, then answers with what it was shown."""

    def __init__(self):
        self.shown = []

    def __call__(self, messages, info):
        returns = [p for p in messages[-1].parts if p.part_kind in ("tool-return", "retry-prompt")]
        if not returns:
            self.tools = sorted(t.name for t in info.function_tools)
            return ModelResponse(parts=[ToolCallPart("add", {"a": 2, "b": 3}, tool_call_id="c-add"),
                                        ToolCallPart("rm", {"name": "keep.txt"}, tool_call_id="c-rm"),
                                        ToolCallPart("whoami", {}, tool_call_id="c-who"),
                                        ToolCallPart("write", {"name": "out.txt"}, tool_call_id="c-write")])
        self.shown += [(p.tool_name, getattr(p, "outcome", p.part_kind), str(p.content)) for p in returns]
        return ModelResponse(parts=[TextPart("done")])


def test_an_agent_run_goes_through_dsh_policies_and_its_asks_through_deferred_tool_calls(tmp_path):
    registry, heard = _registry(tmp_path)
    (tmp_path / "keep.txt").write_text("precious")
    script, log = _Script(), []
    agent = Agent(FunctionModel(script), toolsets=[DshToolset(registry, "alice", log=_Appended(log))],
                  output_type=[str, DeferredToolRequests])

    first = asyncio.run(agent.run("go"))
    assert isinstance(first.output, DeferredToolRequests)
    [approval] = first.output.approvals
    assert (approval.tool_name, approval.tool_call_id) == ("write", "c-write")
    assert first.output.metadata["c-write"] == {"dsh": {"reason": "writes need a human"}}
    assert not (tmp_path / "out.txt").exists()  # asked: nothing ran yet

    second = asyncio.run(agent.run(message_history=first.all_messages(),
                                   deferred_tool_results=DeferredToolResults(approvals={"c-write": True})))
    assert second.output == "done"
    assert (tmp_path / "out.txt").read_text() == "alice"  # approved through pydantic-ai: ran once, as alice
    assert (tmp_path / "keep.txt").read_text() == "precious"  # denied: never ran
    shown = {name: (kind, text) for name, kind, text in script.shown}
    assert shown["add"] == ("success", "5")
    assert shown["whoami"] == ("success", "alice's own")  # alice's shadow of the global tool
    assert shown["write"] == ("success", "wrote out.txt")
    assert shown["rm"] == ("failed", "Error: deleting is not allowed here")  # pydantic-ai's failed tool
    assert script.tools == ["add", "rm", "whoami", "write"]
    assert sorted((e["name"], e["is_error"]) for e in log) == [("add", False), ("rm", True), ("whoami", False),
                                                                ("write", False)]  # the log: each call's result
    # Every call was heard once: the ask's first attempt (denied, nothing ran), then its run.
    assert sorted(heard) == sorted([("add", False), ("rm", True), ("whoami", False), ("write", True),
                                    ("write", False)])


def test_a_refused_approval_never_runs_the_call(tmp_path):
    registry, _ = _registry(tmp_path)
    script = _Script()
    agent = Agent(FunctionModel(script), toolsets=[DshToolset(registry, "bob")], output_type=[str, DeferredToolRequests])
    first = asyncio.run(agent.run("go"))
    second = asyncio.run(agent.run(message_history=first.all_messages(),
                                   deferred_tool_results=DeferredToolResults(approvals={"c-write": False})))
    assert second.output == "done" and not (tmp_path / "out.txt").exists()
    assert dict((n, t) for n, _, t in script.shown)["whoami"] == "the global one"  # bob has no shadow


def test_a_cancelled_run_cancels_the_call_and_aborts_its_signal(tmp_path):
    """A body that does not stop on its signal is cancelled after the grace; the log still
    holds the call, CANCELLED."""
    registry = InMemoryRegistry()
    signals, log = [], []

    async def wait(args, ctx):
        signals.append(ctx.signal)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            (tmp_path / "cancelled").write_text("")
            raise
        (tmp_path / "finished").write_text("")
        return [{"type": "text", "text": "finished"}]

    registry.register(define_tool(name="wait", description="Wait.", parameters={}, execute=wait))

    def model(messages, info):
        return ModelResponse(parts=[ToolCallPart("wait", {}, tool_call_id="c-wait")])

    agent = Agent(FunctionModel(model), toolsets=[DshToolset(registry, "carol", log=_Appended(log))])
    asyncio.run(_run_and_give_up(agent, signals))
    assert (tmp_path / "cancelled").exists() and not (tmp_path / "finished").exists()
    assert signals[0].aborted and signals[0].reason == "the framework cancelled the call"  # for what else listens
    assert [(e["call_id"], e["is_error"], e["error"]["code"]) for e in log] == [("c-wait", True, "CANCELLED")]


async def _run_and_give_up(agent, signals):
    run = asyncio.ensure_future(agent.run("go"))
    while not signals:
        await asyncio.sleep(0.01)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run


def test_a_cancelled_call_that_stops_on_its_signal_ends_through_the_pipeline():
    """Its observers hear what it returned, and the log records it (not a bare CANCELLED)."""
    registry = InMemoryRegistry()
    signals, log, heard = [], [], []

    async def wait(args, ctx):
        signals.append(ctx.signal)
        await ctx.signal
        return [{"type": "text", "text": f"stopped: {ctx.signal.reason}"}]

    registry.register(define_tool(name="wait", description="Wait.", parameters={}, execute=wait))
    registry.on("tools/result", lambda execution, result: heard.append((execution.call_id, result["content"])))

    def model(messages, info):
        return ModelResponse(parts=[ToolCallPart("wait", {}, tool_call_id="c-wait")])

    agent = Agent(FunctionModel(model), toolsets=[DshToolset(registry, "carol", log=_Appended(log))])
    asyncio.run(_run_and_give_up(agent, signals))
    said = [{"type": "text", "text": "stopped: the framework cancelled the call"}]
    assert heard == [("c-wait", said)]
    assert [(e["call_id"], e["content"]) for e in log] == [("c-wait", said)]
