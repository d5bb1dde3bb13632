"""System-prompt assembly: sections, providers, listeners, tool order, the registry's contribution."""

import asyncio

import pytest

from dsh_actors import DefinitionError, InMemoryRegistry, define_tool, text_block
from dsh_actors.codemode.runtime import SubprocessRuntime
from dsh_actors.prompt import UNLISTED, PromptAssemblyError, SystemPrompt


def tool(name):
    return define_tool(name=name, description=name, parameters={}, execute=lambda a, c: [text_block(name)])


def assemble(prompt, **context):
    return asyncio.run(prompt.assemble(context))


@pytest.fixture(scope="module")
def runtime():
    rt = SubprocessRuntime()
    yield rt
    rt.close()


def registry(mode="native", runtime=None, names=("echo", "alpha")):
    reg = InMemoryRegistry(mode=mode, code_runtime=runtime)
    for name in names:
        reg.register(tool(name))
    return reg


def test_sections_sort_by_order_ties_keep_registration_order_and_scoped_ones_shadow():
    prompt = SystemPrompt()
    prompt.section("persona", 0, "You are helpful.")
    prompt.section("b", 10, "B")
    prompt.section("a", 10, lambda ctx: f"A for {ctx.get('scope')}")
    prompt.section("persona", 0, "You are agent 7.", scope="agent-7")
    assert [(s.name, s.text) for s in assemble(prompt).sections] == [
        ("persona", "You are helpful."), ("b", "B"), ("a", "A for None")]
    assert assemble(prompt, scope="agent-7").sections[0].text == "You are agent 7."
    with pytest.raises(DefinitionError, match="already registered"):
        prompt.section("b", 1, "again")
    with pytest.raises(TypeError, match="finite"):
        prompt.section("c", float("nan"), "x")


def test_native_mode_contributes_visible_tools_sorted_and_assemblies_are_fresh():
    prompt = SystemPrompt()
    reg = registry()
    reg.scope("a1").restrict(deny=["alpha"])
    prompt.add_registry(reg)
    first = assemble(prompt)
    assert first.tool_names() == ["alpha", "echo"]
    first.tools[0]["parameters"]["mutated"] = True
    assert "mutated" not in assemble(prompt).tools[0]["parameters"]
    assert assemble(prompt, scope="a1").tool_names() == ["echo"]
    assert "tools:sdk" not in [s.name for s in first.sections]


def test_tool_order_places_listed_tools_and_fills_the_marker_with_the_rest():
    with pytest.raises(PromptAssemblyError, match="exactly once"):
        SystemPrompt(tool_order=["echo"])
    with pytest.raises(PromptAssemblyError, match='lists "echo" more than once'):
        SystemPrompt(tool_order=["echo", "echo", UNLISTED])
    prompt = SystemPrompt(tool_order=["echo", UNLISTED])
    reg = registry(names=("echo", "zeta", "alpha"))
    prompt.add_registry(reg)
    assert assemble(prompt).tool_names() == ["echo", "alpha", "zeta"]
    reg.scope("a1").restrict(deny=["echo"])
    assert assemble(prompt, scope="a1").tool_names() == ["alpha", "zeta"]  # known but hidden: absent
    ghost = SystemPrompt(tool_order=["ghost", "wraith", UNLISTED])
    ghost.add_registry(reg)
    with pytest.raises(PromptAssemblyError, match='unregistered tools "ghost", "wraith"; known tools: alpha, echo, zeta'):
        assemble(ghost)


def test_a_provider_returning_the_marker_name_is_refused():
    prompt = SystemPrompt()
    prompt.tools(lambda ctx: {"schemas": [{"name": UNLISTED, "description": "", "parameters": {}}]})
    with pytest.raises(PromptAssemblyError, match="reserved tool name"):
        assemble(prompt)


def test_code_mode_contributes_run_code_and_the_sdk_section(runtime):
    prompt = SystemPrompt(tool_order=["run_code", UNLISTED])
    prompt.add_registry(registry("code", runtime))
    assembly = assemble(prompt)
    assert assembly.tool_names() == ["run_code"]
    sdk = next(s for s in assembly.sections if s.name == "tools:sdk")
    assert sdk.order == 150 and "def alpha" in sdk.text and sdk.text == next(
        s for s in assemble(prompt).sections if s.name == "tools:sdk").text
    both = SystemPrompt(tool_order=["run_code", UNLISTED])
    both.add_registry(registry("both", runtime))
    assert assemble(both).tool_names() == ["run_code", "alpha", "echo"]
    native_order = SystemPrompt(tool_order=["echo", UNLISTED])
    native_order.add_registry(registry("code", runtime))
    with pytest.raises(PromptAssemblyError, match='tool_order lists unregistered tool "echo"'):
        assemble(native_order)


def test_listeners_may_add_but_not_remove_the_protected_pieces(runtime):
    prompt = SystemPrompt()
    prompt.add_registry(registry("code", runtime))

    def strip(assembly, context, call_next):
        assembly.tools = [t for t in assembly.tools if t["name"] != "run_code"] + [
            {"name": "extra", "description": "", "parameters": {}}]
        assembly.sections = [s for s in assembly.sections if s.name != "tools:sdk"]
        return assembly

    prompt.on_assemble(strip)
    assembly = assemble(prompt)
    assert sorted(assembly.tool_names()) == ["extra", "run_code"]
    assert "tools:sdk" in [s.name for s in assembly.sections]
    with pytest.raises(DefinitionError, match="protected"):
        prompt.section("tools:sdk", 1, "mine", scope="a1")


def test_a_scoped_section_added_before_the_registry_cannot_shadow_the_sdk_either(runtime):
    prompt = SystemPrompt()
    prompt.section("tools:sdk", 1, "mine", scope="a1")  # before Code Mode arrives
    with pytest.raises(DefinitionError, match="protected.*a1"):
        prompt.add_registry(registry("code", runtime))
    assert assemble(prompt, scope="a1").tool_names() == []  # the refused registry left nothing behind


def test_the_rest_marker_twice_is_refused_as_a_duplicate():
    with pytest.raises(PromptAssemblyError, match=f'tool_order lists "{UNLISTED}" more than once'):
        SystemPrompt(tool_order=["a", UNLISTED, "b", UNLISTED])
    with pytest.raises(PromptAssemblyError, match=f'must contain the "{UNLISTED}" rest entry'):
        SystemPrompt(tool_order=["a"])


def test_scoped_listeners_hear_only_their_scope():
    prompt = SystemPrompt()
    prompt.section("base", 0, "base")

    def add(assembly, context, call_next):
        assembly.sections.append(type(assembly.sections[0])("scoped", 1, "only for a1"))
        return assembly

    prompt.on_assemble(add, scope="a1")
    assert len(assemble(prompt, scope="a1").sections) == 2 and len(assemble(prompt, scope="a2").sections) == 1


def test_a_missing_or_foreign_runtime_rejects_every_assembly():
    prompt = SystemPrompt()
    prompt.add_registry(registry("code"))
    with pytest.raises(Exception, match="requires a code runtime"):
        assemble(prompt)

    class Other:
        language = "typescript"

    foreign = SystemPrompt()
    foreign.add_registry(registry("both", Other()))
    with pytest.raises(Exception, match='language is "typescript"'):
        assemble(foreign)
