"""The README's block for each framework, run as written: only the model is swapped for the
framework's own test model (these machines reach no model), and what it prints is checked."""

import asyncio
import json

import pytest

from tests.readme import python_block, replace

pytestmark = [pytest.mark.timeout(120), pytest.mark.filterwarnings("ignore::DeprecationWarning"),
              pytest.mark.filterwarnings("ignore::ResourceWarning"),
              pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")]


def _run(source, **names):
    namespace = {"__name__": "readme_block", **names}
    exec(compile(source, "README.md", "exec"), namespace)
    return namespace


def test_the_pydantic_ai_block(capsys):
    pytest.importorskip("pydantic_ai")
    _run(python_block("pydantic-ai"))
    assert json.loads(capsys.readouterr().out) == {"add": "0.0"}  # TestModel called add (a=0.0, b=0.0) through dsh


def test_the_openai_agents_block(capsys):
    pytest.importorskip("agents")
    from agents import set_tracing_disabled

    from tests.adapters.agents_sdk import ScriptedModel

    set_tracing_disabled(True)
    model = ScriptedModel([("add", {"a": 2, "b": 3}, "c0")])
    _run(replace(python_block("OpenAI Agents SDK"), 'model="gpt-5-mini"', "model=MODEL"), MODEL=model)
    assert capsys.readouterr().out == "done\n" and model.shown == {"c0": "5"}


def test_the_langgraph_block(capsys):
    pytest.importorskip("langgraph")
    from langchain_core.messages import AIMessage

    from tests.adapters.test_langgraph import _Model

    model = _Model(messages=iter([AIMessage(content="", tool_calls=[
        {"name": "add", "args": {"a": 2, "b": 3}, "id": "c0", "type": "tool_call"}]), AIMessage(content="5 it is")]))
    namespace = _run(python_block("LangGraph"))
    asyncio.run(namespace["main"](model))
    assert capsys.readouterr().out == "5 it is\n"


def test_the_inspect_block(capsys, monkeypatch, tmp_path):
    pytest.importorskip("inspect_ai")
    monkeypatch.setattr("inspect_ai.model._model.count_text_tokens", lambda text: len(text) // 4 + 1)
    monkeypatch.chdir(tmp_path)  # its logs/ folder
    from inspect_ai.model import ModelOutput, get_model

    model = get_model("mockllm/model", custom_outputs=[
        ModelOutput.for_tool_call("mockllm/model", "bash", {"command": "uname -s"}),
        ModelOutput.from_content("mockllm/model", "Linux")])
    _run(replace(python_block("inspect_ai sandboxes"), 'model="openai/gpt-5-mini"', 'model=MODEL, display="none"'),
         MODEL=model)
    assert capsys.readouterr().out.strip().endswith("success")
