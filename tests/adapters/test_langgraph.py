"""dsh tools in a LangGraph agent (dsh_actors/adapters/langgraph.py), driven by LangChain's own
fake chat model, in one process: each call through the registry's pipeline, a denial shown as
LangChain shows a failed tool, an ask put to the graph's human through LangGraph's interrupt and
resumed with a Command, a tool shadowed for one agent. Judged from outside: files the bodies
write, the graph's messages, what the registry's observers heard."""

import asyncio

import pytest

pytest.importorskip("langgraph")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, ToolMessage  # noqa: E402
from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402
from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402
from langgraph.prebuilt import ToolNode, tools_condition  # noqa: E402
from langgraph.types import Command  # noqa: E402

from dsh_actors.adapters.langgraph import dsh_tools  # noqa: E402
from tests.adapters.test_pydantic_ai import _registry  # noqa: E402

pytestmark = pytest.mark.timeout(60)


class _Model(GenericFakeChatModel):
    """LangChain's fake chat model, which answers from a list; binding tools changes nothing."""

    def bind_tools(self, tools, **kwargs):
        return self


def _calls():
    return AIMessage(content="", tool_calls=[
        {"name": "add", "args": {"a": 2, "b": 3}, "id": "c-add", "type": "tool_call"},
        {"name": "rm", "args": {"name": "keep.txt"}, "id": "c-rm", "type": "tool_call"},
        {"name": "whoami", "args": {}, "id": "c-who", "type": "tool_call"},
        {"name": "write", "args": {"name": "out.txt"}, "id": "c-write", "type": "tool_call"}])


def _graph(registry, agent):
    return asyncio.run(_graph_of(registry, agent, [_calls(), AIMessage(content="done")]))


async def _graph_of(registry, agent, answers):
    """A model node (answering ``answers`` in turn) and a ToolNode in a loop, as LangGraph's
    guides build an agent."""
    model = _Model(messages=iter(answers))
    tools = await dsh_tools(registry, agent)

    async def call_model(state):
        return {"messages": [await model.bind_tools(tools).ainvoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode(tools))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=InMemorySaver())


def _tool_messages(state):
    return {m.tool_call_id: m for m in state["messages"] if isinstance(m, ToolMessage)}


def test_a_graph_goes_through_dsh_policies_and_its_asks_through_interrupt_and_resume(tmp_path):
    registry, heard = _registry(tmp_path)
    (tmp_path / "keep.txt").write_text("precious")
    graph, thread = _graph(registry, "alice"), {"configurable": {"thread_id": "t1"}}

    async def run():
        first = await graph.ainvoke({"messages": [("user", "go")]}, thread)
        [asked] = first["__interrupt__"]
        assert not (tmp_path / "out.txt").exists()  # asked: nothing ran yet
        return asked, await graph.ainvoke(Command(resume=True), thread)

    asked, final = asyncio.run(run())
    assert asked.value == {"dsh_ask": {"tool": "write", "args": {"name": "out.txt"}, "call_id": "c-write",
                                       "reason": "writes need a human"}}
    assert final["messages"][-1].content == "done"
    assert (tmp_path / "out.txt").read_text() == "alice"  # approved through the interrupt: ran once, as alice
    assert (tmp_path / "keep.txt").read_text() == "precious"  # denied: never ran
    shown = _tool_messages(final)
    assert (shown["c-add"].status, shown["c-add"].content) == ("success", "5")
    assert shown["c-add"].artifact == {"dsh": {"call_id": "c-add", "is_error": False}}
    assert (shown["c-rm"].status, shown["c-rm"].content) == ("error", "Error: deleting is not allowed here")
    assert shown["c-who"].content == "alice's own"  # alice's shadow of the global tool
    assert (shown["c-write"].status, shown["c-write"].content) == ("success", "wrote out.txt")
    assert heard.count(("write", False)) == 1  # it ran once; its asked attempts ran nothing
    assert sorted(set(heard)) == [("add", False), ("rm", True), ("whoami", False), ("write", False), ("write", True)]


def test_a_rejected_interrupt_never_runs_the_call(tmp_path):
    registry, _ = _registry(tmp_path)
    graph, thread = _graph(registry, "bob"), {"configurable": {"thread_id": "t2"}}

    async def run():
        await graph.ainvoke({"messages": [("user", "go")]}, thread)
        return await graph.ainvoke(Command(resume={"type": "reject"}), thread)

    final = asyncio.run(run())
    shown = _tool_messages(final)
    assert shown["c-write"].status == "error" and "rejected" in shown["c-write"].content
    assert not (tmp_path / "out.txt").exists()
    assert shown["c-who"].content == "the global one"  # bob has no shadow
