"""The adapters over a registry on Ray: the tools run on its executors as the agent, and an
ask waits in dsh's approval queue (answered here as any process would), for pydantic-ai and
for the OpenAI Agents SDK. Judged from outside: files the bodies write, what the model was
shown."""

import asyncio
import uuid

import pytest

pytest.importorskip("pydantic_ai")
pytest.importorskip("agents")

from dsh_actors import ToolRegistry, ask, define_tool  # noqa: E402

pytestmark = pytest.mark.timeout(180)

T = 60


def _write(folder):
    def write(args, ctx):
        (folder / args["name"]).write_text(ctx.agent)
        return [{"type": "text", "text": f"wrote {args['name']}"}]
    return write


@pytest.fixture(scope="module")
def on_ray(ray_cluster, tmp_path_factory):
    folder = tmp_path_factory.mktemp("adapters")
    registry = ToolRegistry.connect(f"adapters-{uuid.uuid4().hex[:8]}")
    registry.register(define_tool(name="write", description="Write a file.", parameters={"name": {"type": "string"}},
                                  execute=_write(folder))).result(T)
    registry.register(define_tool(name="whoami", description="Who answers.", parameters={},
                                  execute=lambda args, ctx: [{"type": "text", "text": "global"}])).result(T)
    registry.scope("shadowed").register(define_tool(
        name="whoami", description="Its own.", parameters={},
        execute=lambda args, ctx: [{"type": "text", "text": "its own"}])).result(T)
    registry.on("tools/pre-execute", lambda execution, call_next: ask("writes need a human")
                if execution.name == "write" else call_next()).result(T)
    queue = registry.approvals().result(T)
    try:
        yield registry, queue, folder
    finally:
        registry.shutdown()


async def _answer(queue, *verdicts):
    """Answer the asks in the approval queue as they come, in turn with ``verdicts``."""
    answered = set()
    for _ in range(T * 10):
        for ask_ in await queue.pending():
            if ask_["id"] not in answered:
                verdict = verdicts[len(answered)]
                assert await (queue.allow(ask_["id"]) if verdict == "allow" else queue.reject(ask_["id"]))
                answered.add(ask_["id"])
        if len(answered) == len(verdicts):
            return
        await asyncio.sleep(0.1)
    raise AssertionError("not every ask reached the approval queue")


def _writes_model(shown, prefix):
    """A FunctionModel script: two writes and a whoami at once, then "done"."""
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart

    def model(messages, info):
        returns = [p for p in messages[-1].parts if p.part_kind in ("tool-return", "retry-prompt")]
        if not returns:
            return ModelResponse(parts=[ToolCallPart("write", {"name": f"{prefix}-{k}"}, tool_call_id=f"w{k}")
                                        for k in (1, 2)] + [ToolCallPart("whoami", {}, tool_call_id="who")])
        shown.update({p.tool_call_id: (getattr(p, "outcome", p.part_kind), str(p.content)) for p in returns})
        return ModelResponse(parts=[TextPart("done")])

    return model


def test_a_pydantic_ai_agent_on_ray_answers_asks_through_deferred_tool_calls(on_ray):
    """The calls wait in this process, their asks in the queue, while pydantic-ai's run ends
    with its deferred requests; the resumed run approves one (it runs once, as the agent) and
    denies the other (its ask is cancelled after ask_ttl_s: it never runs)."""
    from pydantic_ai import Agent, DeferredToolRequests, DeferredToolResults
    from pydantic_ai.models.function import FunctionModel

    from dsh_actors.adapters.pydantic_ai import DshToolset
    from dsh_actors.log import read_records
    from dsh_actors.runtime.session.client import SessionLog

    registry, queue, folder = on_ray
    shown = {}

    async def run():
        log = await SessionLog.open_async(registry.session_id("shadowed"), str(folder / "shadowed.log"))
        agent = Agent(FunctionModel(_writes_model(shown, "pa")), output_type=[str, DeferredToolRequests],
                      toolsets=[DshToolset(registry, "shadowed", log=log, ask_ttl_s=3)])
        first = await agent.run("go")
        asked = sorted((a.tool_call_id, a.tool_name) for a in first.output.approvals)
        waiting = sorted(p["call_id"] for p in await queue.pending())
        second = await agent.run(message_history=first.all_messages(), deferred_tool_results=DeferredToolResults(
            approvals={"w1": True, "w2": False}))
        for _ in range(T * 10):  # the denied call's ask lapses after ask_ttl_s
            if not await queue.pending():
                break
            await asyncio.sleep(0.1)
        return asked, waiting, second.output, await queue.pending()

    asked, waiting, output, left = asyncio.run(run())
    assert asked == [("w1", "write"), ("w2", "write")] and waiting == ["w1", "w2"]  # held, asks in the queue
    assert output == "done" and left == []
    assert (folder / "pa-1").read_text() == "shadowed" and not (folder / "pa-2").exists()
    assert shown["who"] == ("success", "its own") and shown["w1"] == ("success", "wrote pa-1")
    logged = {e["call_id"]: e for e in read_records(str(folder / "shadowed.log")) if e.get("type") == "tool/result"}
    assert sorted(logged) == ["w1", "who"]  # the session log holds every call that ran


def test_without_framework_asks_the_approval_queue_answers(on_ray):
    from pydantic_ai import Agent
    from pydantic_ai.models.function import FunctionModel

    from dsh_actors.adapters.pydantic_ai import DshToolset

    registry, queue, folder = on_ray
    shown = {}
    agent = Agent(FunctionModel(_writes_model(shown, "q")),
                  toolsets=[DshToolset(registry, "queued", framework_asks=False)])

    async def run():
        answers = asyncio.ensure_future(_answer(queue, "allow", "reject"))
        result = await agent.run("go")
        await answers
        return result

    assert asyncio.run(run()).output == "done"
    ran = sorted(p.name for p in folder.glob("q-*"))
    assert len(ran) == 1 and (folder / ran[0]).read_text() == "queued"  # the allowed one, as the agent
    refused = "w2" if ran == ["q-1"] else "w1"
    assert shown[refused][0] == "failed" and "reject" in shown[refused][1]
    assert shown["who"] == ("success", "global")


def test_an_openai_agents_sdk_agent_on_ray_answers_asks_through_the_sdks_approvals(on_ray):
    from agents import Agent, Runner, set_tracing_disabled

    from dsh_actors.adapters.openai_agents import dsh_tools
    from tests.adapters.agents_sdk import ScriptedModel

    set_tracing_disabled(True)
    registry, queue, folder = on_ray
    model = ScriptedModel([("write", {"name": "oa-1"}, "w1"), ("whoami", {}, "who")])

    async def run():
        agent = Agent(name="plain", model=model, tools=await dsh_tools(registry, "plain"))
        first = await Runner.run(agent, "go")
        [item] = first.interruptions
        assert not (folder / "oa-1").exists()  # held: asked, nothing ran
        state = first.to_state()
        state.approve(item)
        return await Runner.run(agent, state)

    result = asyncio.run(run())
    assert result.final_output == "done" and not result.interruptions
    assert model.shown == {"w1": "wrote oa-1", "who": "global"}
    assert (folder / "oa-1").read_text() == "plain"


def test_an_inspect_sandbox_with_ray_running_is_started_by_the_nodes_environment_host(on_ray, tmp_path):
    pytest.importorskip("inspect_ai")
    from dsh_actors.adapters.inspect_ai import DshSandboxConfig, DshSandboxEnvironment
    from dsh_actors.runtime.envhost import _ask_host
    from dsh_actors.runtime.local import this_node
    from dsh_actors.runtime.wire import DEFAULT_NAMESPACE

    async def sample():
        made = await DshSandboxEnvironment.sample_init("on-ray", DshSandboxConfig(root=str(tmp_path), nodes="local"),
                                                       {})
        running = await _ask_host(this_node(), DEFAULT_NAMESPACE, "running")
        try:
            result = await made["default"].exec(["sh", "-c", "echo $(id -u) > uid; cat uid"])
        finally:
            await DshSandboxEnvironment.sample_cleanup("on-ray", None, made, interrupted=True)
        return running, result, await _ask_host(this_node(), DEFAULT_NAMESPACE, "running")

    running, result, after = asyncio.run(sample())
    assert [e for e in running if e.startswith("inspect_on-ray")] and result.success
    assert not [e for e in after if e.startswith("inspect_on-ray")]  # the host ended it with the sample
    assert list(tmp_path.iterdir()) == []


def test_inspect_samples_spread_over_the_clusters_nodes_each_reached_through_its_nodes_host(on_ray, tmp_path):
    """Four samples on the session's two nodes: two environments on each node's host, each
    sample's commands run in its own (its workspace written), and all ended and removed after."""
    pytest.importorskip("inspect_ai")
    import ray

    from dsh_actors.adapters.inspect_ai import DshSandboxConfig, DshSandboxEnvironment
    from dsh_actors.envs import EnvironmentGoneError
    from dsh_actors.runtime.envhost import HostedEnvironment, _ask_host, env_id_of
    from dsh_actors.runtime.local import this_node
    from dsh_actors.runtime.wire import DEFAULT_NAMESPACE

    nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) > 0)
    assert len(nodes) == 2

    async def samples():
        made = [(await DshSandboxEnvironment.sample_init("spread", DshSandboxConfig(root=str(tmp_path)), {}))["default"]
                for _ in range(4)]
        try:
            said = [await env.exec(["sh", "-c", f"echo {i} > mine; cat mine"]) for i, env in enumerate(made)]
            running = {node: await _ask_host(node, DEFAULT_NAMESPACE, "running") for node in nodes}
            where = [(env.place.node, env_id_of(env.place.session), env.workspace) for env in made]
            hosted = [isinstance(env.place.env, HostedEnvironment) for env in made]
        finally:
            for env in made:
                await DshSandboxEnvironment.sample_cleanup("spread", None, {"default": env}, interrupted=False)
        after = {node: await _ask_host(node, DEFAULT_NAMESPACE, "running") for node in nodes}
        remote = next(env.place.env for env in made if isinstance(env.place.env, HostedEnvironment))
        with pytest.raises(EnvironmentGoneError):  # ended: the host's coded error, not Ray's
            await remote.run("true", timeout_s=5)
        return said, running, where, after, hosted

    said, running, where, after, hosted = asyncio.run(samples())
    assert hosted == [node != this_node() for node, _, _ in where]  # another node's: through its host
    assert [r.stdout for r in said] == ["0\n", "1\n", "2\n", "3\n"]
    assert sorted(node for node, _, _ in where) == sorted(nodes * 2)  # two on each node
    for node, env_id, _ in where:
        assert env_id in running[node] and all(env_id not in running[n] for n in nodes if n != node)
    assert not any(e.startswith("inspect_spread") for ids in after.values() for e in ids)
    assert list(tmp_path.iterdir()) == []  # every workspace removed, on whichever node it was


def test_a_langgraph_graph_on_ray_answers_asks_through_interrupt_and_a_rejection_frees_the_held_call(on_ray):
    """The node runs again on resume: the call asked of the graph is still the one held (it
    runs once, approved), and a rejection answers its ask at once."""
    from langchain_core.messages import AIMessage
    from langgraph.types import Command

    from tests.adapters.test_langgraph import _graph_of

    registry, queue, folder = on_ray

    async def run(name, verdict, thread):
        calls = AIMessage(content="", tool_calls=[{"name": "write", "args": {"name": name}, "id": "w", "type": "tool_call"}])
        graph = await _graph_of(registry, "graphed", [calls, AIMessage(content="done")])
        first = await graph.ainvoke({"messages": [("user", "go")]}, thread)
        [asked] = first["__interrupt__"]
        held = [p["call_id"] for p in await queue.pending()]
        final = await graph.ainvoke(Command(resume=verdict), thread)
        return asked.value["dsh_ask"]["call_id"], held, final, await queue.pending()

    asked, held, final, left = asyncio.run(run("lg-1", True, {"configurable": {"thread_id": "ray-1"}}))
    assert (asked, held, left) == ("w", ["w"], [])
    assert final["messages"][-1].content == "done" and (folder / "lg-1").read_text() == "graphed"
    asked, held, final, left = asyncio.run(run("lg-2", {"type": "reject"}, {"configurable": {"thread_id": "ray-2"}}))
    assert (asked, held, left) == ("w", ["w"], [])  # rejected through the graph: its ask answered at once
    assert not (folder / "lg-2").exists()
