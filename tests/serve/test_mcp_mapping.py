"""What an MCP client sees of a definition and of a result (dsh_actors/serve/mcp_mapping.py), without Ray."""

import pytest

from dsh_actors import ToolDefinition, ToolExecutionResult, define_tool
from dsh_actors.serve.mcp_mapping import mcp_result, mcp_tool

pytestmark = pytest.mark.timeout(30)


def _echo(args, ctx):
    return [{"type": "text", "text": args["text"]}]


def test_a_definition_keeps_its_schema_and_only_the_hints_it_declares():
    tool = mcp_tool(define_tool(name="echo", description="Echo.", parameters={"text": {"type": "string"}},
                                execute=_echo, extras={"read_only": True, "destructive": "yes", "num_cpus": 2}))
    assert (tool.name, tool.description) == ("echo", "Echo.")
    assert tool.input_schema["type"] == "object" and tool.input_schema["properties"]["text"] == {"type": "string"}
    assert tool.annotations.read_only_hint is True
    assert tool.annotations.destructive_hint is None  # not a boolean: the client's default stands
    bare = mcp_tool(define_tool(name="bare", description="", parameters={}, execute=_echo))
    assert bare.annotations is None


def test_a_raw_schema_without_an_object_root_gets_one():
    raw = ToolDefinition(name="raw", description="", parameters={"properties": {"x": {"type": "number"}}},
                         execute=_echo)
    assert mcp_tool(raw).input_schema == {"type": "object", "properties": {"x": {"type": "number"}}}


def test_a_failed_result_keeps_its_code_and_a_structured_one_its_value():
    failed = mcp_result(ToolExecutionResult({"call_id": "c1", "content": [{"type": "text", "text": "Error: bad"}],
                                             "is_error": True, "error": {"name": "ToolArgsError", "code": "INVALID_ARGS"}}))
    assert failed.is_error is True and [b.text for b in failed.content] == ["Error: bad"]
    assert failed.meta == {"dsh": {"call_id": "c1", "error": {"name": "ToolArgsError", "code": "INVALID_ARGS"}}}
    done = mcp_result(ToolExecutionResult({"call_id": "c2", "is_error": False, "meta": {"structured_content": {"n": 1}},
                                           "content": [{"type": "image", "data": "aGk=", "mimeType": "image/gif"},
                                                       {"type": "audio", "what": ["not", "mcp"]}]}))
    assert done.structured_content == {"n": 1} and done.meta["dsh"]["meta"] == {"structured_content": {"n": 1}}
    image, other = done.content
    assert (image.type, image.data, image.mime_type) == ("image", "aGk=", "image/gif")
    assert other.type == "text" and '"not"' in other.text  # anything else arrives as its JSON text


def test_each_mode_lists_what_a_model_in_it_sees():
    from dsh_actors.serve.mcp_mapping import listed

    tools = [define_tool(name="echo", description="Echo.", parameters={"text": {"type": "string"}}, execute=_echo),
             define_tool(name="run_code", description="Run a program.", parameters={"code": {"type": "string"}},
                         execute=_echo)]
    assert [t.name for t in listed(tools[:1], "native")] == ["echo"]
    [only] = listed(tools, "code", "async def echo(text: str) -> str")
    assert only.name == "run_code" and only.description == "Run a program.\n\nasync def echo(text: str) -> str"
    both = listed(tools, "both", "SDK")
    assert [t.name for t in both] == ["echo", "run_code"] and both[1].description.endswith("\n\nSDK")


def test_a_tool_the_list_does_not_hold_is_answered_as_unknown():
    from dsh_actors.serve.mcp_mapping import unlisted

    answer = unlisted("echo")
    assert answer.is_error is True and answer.content[0].text == 'unknown tool "echo"'
    assert answer.meta == {"dsh": {"error": {"name": "ToolNotFoundError", "code": "UNKNOWN_TOOL"}}}
