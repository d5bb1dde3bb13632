import asyncio

import pytest

from dsh_actors import DefinitionError, DuplicateToolError, RestrictionError, ToolDefinition
from dsh_actors.core.jsonvalue import FrozenValueError

from .helpers import call, echo, registry_with


def names(definitions):
    return [d.name for d in definitions]


def test_schemas_project_exactly_name_description_and_parameters():
    registry = registry_with(echo(timeout_ms=5000, present_call=lambda a: None))
    assert registry.schemas() == [{
        "name": "echo", "description": "echo arguments back",
        "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
    }]


def test_mutating_a_schemas_copy_does_not_reach_the_registry():
    registry = registry_with(echo())
    copy = registry.schemas()[0]
    copy["description"] = "changed"
    copy["parameters"]["properties"]["new"] = {"type": "number"}
    assert registry.schemas()[0]["description"] == "echo arguments back"
    assert "new" not in registry.schemas()[0]["parameters"]["properties"]


def test_registration_stores_a_frozen_snapshot_with_callbacks_captured_once():
    class Raw:
        name = "raw"
        description = "a raw tool"
        parameters = {"type": "object", "properties": {"x": {"type": "number"}}}

        def execute(self, args, ctx):
            return [{"type": "text", "text": "original"}]

    raw = Raw()
    registry = registry_with(raw)
    raw.execute = lambda args, ctx: [{"type": "text", "text": "replaced"}]
    raw.parameters["properties"]["x"]["type"] = "string"
    stored = registry.get("raw")
    assert isinstance(stored, ToolDefinition)
    assert stored.parameters["properties"]["x"]["type"] == "number"
    with pytest.raises(FrozenValueError):
        stored.parameters["properties"]["y"] = {}
    result = asyncio.run(registry.execute(call(name="raw", arguments={})))
    assert result.text == "original"


def test_a_raw_mapping_definition_is_accepted_and_not_validated_by_the_registry():
    registry = registry_with({"name": "mcp", "description": "d", "parameters": {"type": "object"},
                              "execute": lambda args, ctx: [{"type": "text", "text": repr(args)}]})
    assert asyncio.run(registry.execute(call(name="mcp", arguments={"any": [1]}))).text == "{'any': [1]}"


@pytest.mark.parametrize("bad, message", [
    ({"name": "", "description": "d", "parameters": {}, "execute": print}, "non-empty str name"),
    ({"name": "t", "description": "d", "parameters": {"a": (1,)}, "execute": print}, "lossless JSON"),
    ({"name": "t", "description": "d", "parameters": [], "execute": print}, "JSON Schema object"),
    ({"name": "t", "description": "d", "parameters": {}, "execute": None}, "callable execute"),
    ({"name": "t", "description": "d", "parameters": {}, "execute": print, "timeout_ms": 0},
     'tool "t" timeout_ms must be a positive finite number'),
])
def test_malformed_definitions_are_refused_at_registration(bad, message):
    with pytest.raises(DefinitionError, match=message):
        registry_with(bad)


def test_a_duplicate_name_in_one_layer_is_refused_with_a_pointer_to_scopes():
    registry = registry_with(echo())
    with pytest.raises(DuplicateToolError, match=r"already registered.*registry\.scope"):
        registry.register(echo())
    scope = registry.scope("a1")
    scope.register(echo())
    with pytest.raises(DuplicateToolError, match="already registered in this scope"):
        scope.register(echo())


def test_a_scoped_tool_shadows_the_global_in_place_for_that_agent_only():
    registry = registry_with(echo("first"), echo(), echo("last"))
    shadow = echo(description="scoped echo")
    registry.scope("a1").register(shadow)
    registry.scope("a1").register(echo("mine"))
    assert names(registry.visible("a1")) == ["first", "echo", "last", "mine"]
    assert registry.get("echo", "a1").description == "scoped echo"
    assert registry.get("echo", "a2").description == "echo arguments back"
    assert registry.get("echo").description == "echo arguments back"
    assert [s["name"] for s in registry.schemas("a1")].count("echo") == 1


def test_disposing_a_registration_removes_it_and_an_empty_scoped_layer_is_dropped():
    registry = registry_with(echo())
    dispose = registry.scope("a1").register(echo("mine"))
    dispose()
    dispose()  # idempotent
    assert names(registry.visible("a1")) == ["echo"] and "a1" not in registry.state.layers


def test_closing_a_scope_disposes_everything_it_registered():
    registry = registry_with(echo(), echo("other"))
    scope = registry.scope("a1")
    scope.register(echo("mine"))
    scope.restrict(deny=["other"])
    scope.guard(lambda e: "no")
    scope.close()
    assert names(registry.visible("a1")) == ["echo", "other"]
    assert asyncio.run(registry.execute(call(agent="a1"))).is_error is False


def test_a_plugin_handle_disposes_its_registrations_together():
    registry = registry_with()
    plugin = registry.plugin("fs")
    plugin.register(echo("read"))
    plugin.register(echo("write"))
    assert names(registry.visible()) == ["read", "write"]
    plugin.dispose()
    assert registry.visible() == []


def test_restrict_requires_a_scope_and_rejects_the_empty_filter():
    registry = registry_with(echo())
    with pytest.raises(RestrictionError, match="requires a scoped context"):
        registry.restrict({"allow": ["echo"]})
    with pytest.raises(RestrictionError, match="no-op"):
        registry.scope("a1").restrict({})


def test_restrict_names_unknown_tools_loudly_with_the_known_list():
    registry = registry_with(echo("real"))
    scope = registry.scope("a1")
    scope.register(echo("local"))
    with pytest.raises(RestrictionError, match='unknown global tool "local"'):
        scope.restrict(allow=["local"])
    with pytest.raises(RestrictionError, match='unknown global tool "reall"; known global tools: real'):
        scope.restrict(deny=["reall"])
    with pytest.raises(RestrictionError, match='unknown global tools "ghost", "wraith"'):
        scope.restrict(allow=["ghost"], deny=["wraith"])
    with pytest.raises(RestrictionError, match=r"known global tools: \(none\)"):
        registry_with().scope("a1").restrict(allow=["x"])


def test_restrictions_intersect_and_each_can_be_lifted_alone():
    registry = registry_with(echo("a"), echo("b"), echo("c"))
    scope = registry.scope("agent")
    lift_allow = scope.restrict(allow=["a", "b"])
    lift_deny = scope.restrict(deny=["b"])
    assert names(scope.visible()) == ["a"]
    lift_allow()
    assert names(scope.visible()) == ["a", "c"]
    lift_deny()
    assert names(scope.visible()) == ["a", "b", "c"]
    assert "agent" not in registry.state.layers


def test_restrictions_are_snapshots_evaluated_against_the_live_global_layer():
    registry = registry_with(echo("a"), echo("b"))
    denied, allowed = ["a"], ["a"]
    registry.scope("deny-only").restrict(deny=denied)
    registry.scope("allow-only").restrict(allow=allowed)
    denied.append("b")
    allowed.append("b")
    registry.register(echo("later"))
    assert names(registry.visible("deny-only")) == ["b", "later"]
    assert names(registry.visible("allow-only")) == ["a"]
    assert names(registry.visible()) == ["a", "b", "later"]


def test_allow_empty_hides_every_global_but_not_scoped_tools():
    registry = registry_with(echo("a"))
    scope = registry.scope("x")
    scope.register(echo("mine"))
    scope.restrict(allow=[])
    assert names(scope.visible()) == ["mine"]
    assert scope.known_names() == ["a", "mine"]


def test_a_restricted_away_tool_executes_as_an_unknown_tool():
    registry = registry_with(echo())
    registry.scope("a1").restrict(deny=["echo"])
    result = asyncio.run(registry.execute(call(agent="a1")))
    assert result.text == 'Error: unknown tool "echo"' and result.error["code"] == "UNKNOWN_TOOL"
    assert registry.get("echo", "a1") is None


def test_a_change_listener_that_raises_rolls_the_registration_back():
    registry = registry_with()
    seen = []

    def refuse():
        seen.append(names(registry.visible()))
        if len(seen) == 1:
            raise RuntimeError("refused")

    registry.on_change(refuse)
    with pytest.raises(RuntimeError, match="refused"):
        registry.register(echo())
    assert seen == [["echo"], []] and registry.visible() == []
    registry.register(echo())
    assert names(registry.visible()) == ["echo"]


def test_change_listeners_hear_registrations_disposals_and_restrictions():
    registry = registry_with(echo())
    heard = []
    registry.on_change(lambda: heard.append(1))
    dispose = registry.register(echo("b"))
    lift = registry.scope("a").restrict(deny=["b"])
    lift()
    dispose()
    assert len(heard) == 4


def test_async_guards_and_async_result_observers_are_refused_at_registration():
    registry = registry_with()

    async def async_guard(execution):
        return None

    with pytest.raises(DefinitionError, match="synchronous"):
        registry.guard(async_guard)
    with pytest.raises(DefinitionError, match="synchronous"):
        registry.on("tools/result", async_guard)
    with pytest.raises(DefinitionError, match="unknown event"):
        registry.on("tools/pre-exec", lambda e, n: None)
