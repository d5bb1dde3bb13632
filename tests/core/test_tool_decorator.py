import asyncio

import pydantic
import pytest

from dsh_actors import DefinitionError, InMemoryRegistry, ToolArgsError, ToolRunContext, tool


class Options(pydantic.BaseModel):
    deep: bool


@tool(timeout_ms=500)
async def read_file(path: str, limit: int = 10, opts: Options | None = None, ctx: ToolRunContext = None) -> str:
    """Read a file from disk.

    Longer text that is not part of the description."""
    return f"{path}:{limit}:{opts.deep if opts else None}:{ctx.call_id}"


def test_the_schema_comes_from_type_hints_and_the_docstring_summary():
    assert read_file.name == "read_file" and read_file.description == "Read a file from disk."
    params = read_file.parameters
    assert params["required"] == ["path"]
    assert params["properties"]["path"] == {"type": "string"}
    assert params["properties"]["limit"] == {"type": "integer", "default": 10}
    assert "ctx" not in params["properties"] and "title" not in params
    assert read_file.timeout_ms == 500


def test_a_typed_tool_runs_through_the_pipeline_with_its_context():
    registry = InMemoryRegistry()
    registry.register(read_file)
    result = asyncio.run(registry.execute(call_id="c1", name="read_file",
                                          arguments={"path": "/a", "opts": {"deep": True}}))
    assert result.text == "/a:10:True:c1" and result.is_error is False


def test_type_mismatches_become_model_facing_violations_without_coercion():
    with pytest.raises(ToolArgsError) as info:
        asyncio.run(read_file.execute({"limit": "5", "opts": {"deep": "yes"}}, None))
    assert info.value.violations == [
        'missing required property "path"',
        '"limit" input should be a valid integer',
        '"opts.deep" input should be a valid boolean',
    ]


def test_arguments_that_are_not_an_object_are_a_violation_not_a_crash():
    registry = InMemoryRegistry()
    registry.register(read_file)
    result = asyncio.run(registry.execute(call_id="c", name="read_file", arguments=[1, 2]))
    assert result.is_error and result.error == {"name": "ToolArgsError", "code": "INVALID_ARGS"}


def test_an_untyped_parameter_is_refused_at_definition_time():
    with pytest.raises(DefinitionError, match="needs a type hint"):
        @tool
        def bad(x):  # noqa: ANN001
            return "x"


def test_a_property_named_title_survives_title_stripping():
    @tool(description="make a note")
    def note(title: str) -> str:
        return title

    assert note.parameters["properties"] == {"title": {"type": "string"}}
