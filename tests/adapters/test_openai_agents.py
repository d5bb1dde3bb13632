"""dsh tools in an OpenAI Agents SDK agent (dsh_actors/adapters/openai_agents.py), driven by a
scripted model of the SDK's own Model interface (tests/adapters/agents_sdk.py), in one process: each call through the registry's pipeline, a denial shown as the
SDK shows a failed tool, an ask answered through the SDK's tool approvals, a tool shadowed
for one agent. Judged from outside: files the bodies write, what the model was shown, what the
registry's observers heard."""

import asyncio

import pytest

pytest.importorskip("agents")

from agents import Agent, Runner, set_tracing_disabled  # noqa: E402

from dsh_actors import InMemoryRegistry, ask, define_tool  # noqa: E402
from dsh_actors.adapters.openai_agents import dsh_tools  # noqa: E402
from tests.adapters.agents_sdk import ScriptedModel  # noqa: E402
from tests.adapters.test_pydantic_ai import _registry  # noqa: E402

pytestmark = pytest.mark.timeout(60)

set_tracing_disabled(True)  # the SDK would send its traces to OpenAI


CALLS = [("add", {"a": 2, "b": 3}, "c-add"), ("rm", {"name": "keep.txt"}, "c-rm"), ("whoami", {}, "c-who"),
         ("write", {"name": "out.txt"}, "c-write")]


def test_an_agent_run_goes_through_dsh_policies_and_its_asks_through_the_sdks_approvals(tmp_path):
    registry, heard = _registry(tmp_path)
    (tmp_path / "keep.txt").write_text("precious")
    model = ScriptedModel(CALLS)

    async def run():
        tools = await dsh_tools(registry, "alice")
        strictness.update({t.name: t.strict_json_schema for t in tools})
        agent = Agent(name="alice", model=model, tools=tools)
        first = await Runner.run(agent, "go")
        [item] = first.interruptions
        denied.update({i.raw_item["call_id"]: i.custom_data for i in first.new_items if i.type == "tool_call_output_item"})
        assert not (tmp_path / "out.txt").exists()  # asked: nothing ran yet
        state = first.to_state()
        state.approve(item)
        return item, await Runner.run(agent, state)

    denied, strictness = {}, {}
    item, second = asyncio.run(run())
    # strict where every argument is required (here: only whoami, which has none)
    assert strictness == {"add": False, "rm": False, "whoami": True, "write": False}
    assert (item.tool_name, item.call_id) == ("write", "c-write")
    assert second.final_output == "done"
    assert (tmp_path / "out.txt").read_text() == "alice"  # approved through the SDK: ran once, as alice
    assert (tmp_path / "keep.txt").read_text() == "precious"  # denied: never ran
    assert model.tools == ["add", "rm", "whoami", "write"]
    assert model.shown["c-add"] == "5" and model.shown["c-who"] == "alice's own"
    assert model.shown["c-rm"] == "Error: deleting is not allowed here" and model.shown["c-write"] == "wrote out.txt"
    assert denied["c-rm"] == {"dsh": {"call_id": "c-rm", "is_error": True}}  # kept where the SDK keeps custom data
    assert denied["c-add"] is None  # a plain result has nothing more to keep
    assert sorted(heard) == sorted([("add", False), ("rm", True), ("whoami", False), ("write", True),
                                    ("write", False)])


def test_a_rejected_approval_never_runs_the_call(tmp_path):
    registry, _ = _registry(tmp_path)
    model = ScriptedModel(CALLS)

    async def run():
        agent = Agent(name="bob", model=model, tools=await dsh_tools(registry, "bob"))
        first = await Runner.run(agent, "go")
        state = first.to_state()
        state.reject(first.interruptions[0])
        return await Runner.run(agent, state)

    assert asyncio.run(run()).final_output == "done"
    assert not (tmp_path / "out.txt").exists()
    assert model.shown["c-who"] == "the global one"  # bob has no shadow


def test_without_sdk_approvals_an_ask_goes_to_the_registrys_own_seam(tmp_path):
    registry, _ = _registry(tmp_path)
    asked = []

    class Allows:
        def request(self, request):
            asked.append((request.tool_name, request.reason))
            return "allowed-once"

    registry.set_approval(Allows())
    model = ScriptedModel(CALLS)

    async def run():
        agent = Agent(name="carol", model=model, tools=await dsh_tools(registry, "carol", sdk_approvals=False))
        return await Runner.run(agent, "go")

    result = asyncio.run(run())
    assert result.final_output == "done" and not result.interruptions
    assert asked == [("write", "writes need a human")] and (tmp_path / "out.txt").read_text() == "carol"


def test_the_sdk_is_asked_about_approvals_only_while_a_policy_may_ask(tmp_path):
    """Its approval question costs ~40 µs a call, so a registry whose policies cannot ask is not
    asked it; a policy added after the tools were made asks, and its call does not run."""
    registry = InMemoryRegistry()

    def write(args, ctx):
        (tmp_path / args["name"]).write_text(ctx.agent)
        return [{"type": "text", "text": f"wrote {args['name']}"}]

    registry.register(define_tool(name="write", description="Write a file.", parameters={"name": {"type": "string"}},
                                  execute=write))
    calls = [("write", {"name": "out.txt"}, "c-write")]

    async def run():
        before = await dsh_tools(registry, "dora")
        assert [t.needs_approval for t in before] == [False]
        registry.on("tools/pre-execute", lambda execution, call_next: ask("writes need a human"))
        model = ScriptedModel(calls)
        stale = await Runner.run(Agent(name="dora", model=model, tools=before), "go")
        assert not stale.interruptions and not (tmp_path / "out.txt").exists()
        assert model.shown["c-write"].startswith('Error: approval for tool "write" is required (writes need a human)')
        after = await dsh_tools(registry, "dora")
        assert all(callable(t.needs_approval) for t in after)
        first = await Runner.run(Agent(name="dora", model=ScriptedModel(calls), tools=after), "go")
        assert [i.call_id for i in first.interruptions] == ["c-write"] and not (tmp_path / "out.txt").exists()

    asyncio.run(run())
