"""What an adapter adds per tool call in one process, side by side with the framework calling
the same plain function tool itself.

Run: ``python benchmarks/adapters.py [--calls N] [--rounds N]``. Writes to RESULTS.md (section
``adapters``). For each framework, one agent run whose scripted model (the framework's own
test kind: pydantic-ai's ``FunctionModel``, a model of the Agents SDK's ``Model`` interface;
for LangGraph, a model node of the graph's own) makes ``--calls`` calls of ``add`` in one turn
(a ``ToolNode`` runs LangGraph's), then answers: (a) ``add`` as the framework's
own function tool, (b) the same function registered in an ``InMemoryRegistry`` and given to
the agent through the adapter (the pipeline with no listeners, as an agent's scope). Per call:
(run time) / calls, median of interleaved rounds; the difference is the adapter's cost,
pipeline included.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import table, write_section  # noqa: E402

from dsh_actors import InMemoryRegistry, define_tool  # noqa: E402


def add(a: float, b: float) -> str:
    """Add two numbers."""
    return str(a + b)


def registry() -> InMemoryRegistry:
    made = InMemoryRegistry()
    made.register(define_tool(name="add", description="Add two numbers.",
                              parameters={"a": {"type": "number"}, "b": {"type": "number"}},
                              execute=lambda args, ctx: [{"type": "text", "text": add(args["a"], args["b"])}]))
    return made


def pydantic_ai_runs(calls: int):
    from pydantic_ai import Agent, Tool
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    from dsh_actors.adapters.pydantic_ai import DshToolset

    def model(messages, info):
        if any(p.part_kind == "tool-return" for p in messages[-1].parts):
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("add", {"a": k, "b": 1}, tool_call_id=f"c{k}") for k in range(calls)])

    plain = Agent(FunctionModel(model), tools=[Tool(add)])
    adapted = Agent(FunctionModel(model), toolsets=[DshToolset(registry(), "bench")])
    return {"plain function tool": lambda: plain.run("go"), "dsh adapter": lambda: adapted.run("go")}


def openai_agents_runs(calls: int):
    from agents import Agent, Runner, function_tool, set_tracing_disabled
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

    from dsh_actors.adapters.openai_agents import dsh_tools

    set_tracing_disabled(True)

    class Script(Model):
        async def get_response(self, system_instructions, input, *args, **kwargs):
            if any(isinstance(i, dict) and i.get("type") == "function_call_output" for i in input):
                return ModelResponse(output=[ResponseOutputMessage(
                    id="m", type="message", role="assistant", status="completed",
                    content=[ResponseOutputText(type="output_text", text="done", annotations=[])])],
                    usage=Usage(), response_id=None)
            return ModelResponse(output=[ResponseFunctionToolCall(
                type="function_call", name="add", arguments=json.dumps({"a": k, "b": 1}), call_id=f"c{k}", id=f"f{k}")
                for k in range(calls)], usage=Usage(), response_id=None)

        def stream_response(self, *args, **kwargs):
            raise NotImplementedError

    plain = Agent(name="plain", model=Script(), tools=[function_tool(add)])
    adapted = Agent(name="adapted", model=Script(), tools=asyncio.run(dsh_tools(registry(), "bench")))
    queued = Agent(name="queued", model=Script(), tools=asyncio.run(dsh_tools(registry(), "bench", sdk_approvals=False)))
    governed = registry()
    governed.on("tools/pre-execute", lambda execution, call_next: call_next())  # a policy that could ask
    asking = Agent(name="asking", model=Script(), tools=asyncio.run(dsh_tools(governed, "bench")))
    return {"plain function tool": lambda: Runner.run(plain, "go"), "dsh adapter": lambda: Runner.run(adapted, "go"),
            "dsh adapter, sdk_approvals=False": lambda: Runner.run(queued, "go"),
            "dsh adapter, a policy that may ask (it allows)": lambda: Runner.run(asking, "go")}


def langgraph_runs(calls: int):
    from langchain_core.messages import AIMessage, HumanMessage
    from langchain_core.tools import tool
    from langgraph.graph import START, MessagesState, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    from dsh_actors.adapters.langgraph import dsh_tools

    def graph(tools):
        async def call_model(state):
            if any(m.type == "tool" for m in state["messages"]):
                return {"messages": [AIMessage(content="done")]}
            return {"messages": [AIMessage(content="", tool_calls=[
                {"name": "add", "args": {"a": k, "b": 1}, "id": f"c{k}", "type": "tool_call"} for k in range(calls)])]}

        made = StateGraph(MessagesState)
        made.add_node("model", call_model)
        made.add_node("tools", ToolNode(tools))
        made.add_edge(START, "model")
        made.add_conditional_edges("model", tools_condition)
        made.add_edge("tools", "model")
        compiled = made.compile()
        return lambda: compiled.ainvoke({"messages": [HumanMessage("go")]})

    return {"plain function tool": graph([tool(add)]), "dsh adapter": graph(asyncio.run(dsh_tools(registry(), "bench")))}


def measure(runs, calls: int, rounds: int) -> dict[str, tuple[float, float]]:
    """µs of CPU per call of each run kind, and its difference to the first kind's: medians of
    ``rounds`` interleaved rounds (a difference is taken within one round, so slow spells of a
    shared machine fall on both sides). CPU time of this process: the runs are single-threaded
    and wait for nothing, and other processes' load does not count."""
    async def one(run) -> float:
        started = time.process_time()
        await run()
        return (time.process_time() - started) / calls * 1e6

    async def all_rounds() -> dict[str, list[float]]:
        for run in runs.values():  # warm: imports, validators, caches
            await run()
        seen: dict[str, list[float]] = {label: [] for label in runs}
        for _ in range(rounds):
            for label, run in runs.items():
                seen[label].append(await one(run))
        return seen

    seen = asyncio.run(all_rounds())
    base = next(iter(seen.values()))
    return {label: (statistics.median(values), statistics.median(v - b for v, b in zip(values, base)))
            for label, values in seen.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20, help="tool calls in the model's one turn")
    parser.add_argument("--rounds", type=int, default=41)
    args = parser.parse_args()
    rows = []
    for framework, make in (("pydantic-ai", pydantic_ai_runs), ("OpenAI Agents SDK", openai_agents_runs),
                            ("LangGraph", langgraph_runs)):
        result = measure(make(args.calls), args.calls, args.rounds)
        base = result["plain function tool"][0]
        for label, (per_call, added) in result.items():
            rows.append([framework, label, f"{per_call:.1f}", "—" if per_call == base else f"{added:+.1f}",
                         f"{per_call / base:.2f}×"])
            print(framework, label, f"{per_call:.1f} µs per call, {added:+.1f}", flush=True)
    body = table(["framework", "tools", "µs CPU per call", "added µs (paired)", "ratio"], rows)
    body += (f"\n\nOne agent run per round: the scripted model makes {args.calls} calls of one tool in a turn, "
             f"then answers; µs per call is the run's CPU time / {args.calls}; medians of {args.rounds} interleaved "
             "rounds, the added µs the median of each round's difference to the plain tool's. The adapter's rows "
             "run each call through an InMemoryRegistry's pipeline as the agent (no listeners) and map its result "
             "to the framework's form; the goal is at most 50 µs added. With the Agents SDK, a tool whose "
             "approval is decided per call (how an ask reaches the SDK's approvals) takes a longer path "
             "through the SDK, so the adapter asks the SDK that question only while the agent's policies may "
             "ask (a `tools/pre-execute` listener): the last row has one, which allows every call (its own "
             "cost and the SDK's question); `sdk_approvals=False` leaves asks to the registry's own seam.")
    write_section("adapters", "Adapters: added cost per call in one process", body)


if __name__ == "__main__":
    main()
