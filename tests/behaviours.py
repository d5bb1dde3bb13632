"""One behaviour table for both registries: each scenario is written once against the
registry's public surface and run on :class:`~dsh_actors.InMemoryRegistry` (tests/core)
and on the Ray :class:`~dsh_actors.runtime.ToolRegistry` (tests/runtime), so the two can
never drift apart.

The surfaces differ only in how a result arrives (in one process a registration returns
its disposer; on Ray a response to await), which :func:`done` hides. Listeners here never
write to the test's memory: on Ray they run in other processes.
"""

from __future__ import annotations

import inspect
from typing import Any, Awaitable, Callable

import pytest

from dsh_actors import DefinitionError, DuplicateToolError, RestrictionError, allow, ask, define_tool, text_block

Scenario = Callable[[Any], Awaitable[None]]
SCENARIOS: dict[str, Scenario] = {}
BOTH_HOSTINGS: set[str] = set()  # on Ray: scenarios whose path depends on how scopes are hosted


def scenario(*, hostings: bool = False) -> Callable[[Scenario], Scenario]:
    def add(fn: Scenario) -> Scenario:
        SCENARIOS[fn.__name__] = fn
        if hostings:
            BOTH_HOSTINGS.add(fn.__name__)
        return fn
    return add


def echo(name: str = "echo", **extra: Any) -> Any:
    options = dict(name=name, description="echo arguments back", parameters={"text": {"type": "string"}},
                   execute=lambda args, ctx: [text_block(args.get("text", ""))])
    return define_tool(**{**options, **extra})


async def done(value: Any) -> Any:
    """A registry call's result, awaited when it is a response."""
    return await value if inspect.isawaitable(value) else value


async def ex(target: Any, call_id: str = "c", name: str = "echo", **arguments: Any) -> Any:
    return await target.execute(call_id=call_id, name=name, arguments=arguments)


async def names(view: Any) -> list[str]:
    return [d.name for d in await done(view)]


@scenario(hostings=True)
async def a_registration_returns_a_disposer_and_every_view_sees_it_at_once(registry: Any) -> None:
    dispose = await done(registry.register(echo()))
    assert await names(registry.visible()) == ["echo"]
    assert (await ex(registry, text="hi")).text == "hi"
    assert (await ex(registry.scope("a1"), text="scoped")).text == "scoped"
    await done(dispose())
    await done(dispose())  # idempotent
    assert await names(registry.visible()) == []
    assert (await ex(registry.scope("a1"))).error["code"] == "UNKNOWN_TOOL"
    assert (await ex(registry)).error["code"] == "UNKNOWN_TOOL"


@scenario(hostings=True)
async def several_agents_each_see_their_own_view(registry: Any) -> None:
    for tool in ("read", "write", "shell"):
        await done(registry.register(echo(tool)))
    reader, writer, custom = registry.scope("reader"), registry.scope("writer"), registry.scope("custom")
    await done(reader.restrict(allow=["read"]))
    await done(writer.restrict(deny=["shell"]))
    await done(custom.register(echo("write", execute=lambda a, c: [{"type": "text", "text": "custom write"}])))
    await done(custom.register(echo("mine")))
    assert await names(reader.visible()) == ["read"]
    assert await names(writer.visible()) == ["read", "write"]
    assert await names(custom.visible()) == ["read", "write", "shell", "mine"]
    assert await names(registry.visible()) == ["read", "write", "shell"]
    assert (await ex(custom, name="write")).text == "custom write"
    assert (await ex(writer, name="write", text="global")).text == "global"
    assert (await ex(reader, name="write")).text == 'Error: unknown tool "write"'
    assert [s["name"] for s in await done(custom.schemas())] == ["read", "write", "shell", "mine"]
    assert await done(custom.known_names()) == ["read", "write", "shell", "mine"]
    by_name = await done(custom.tools())
    assert list(by_name) == ["read", "write", "shell", "mine"] and by_name["mine"].name == "mine"
    assert list(await done(registry.tools("reader"))) == ["read"]
    assert (await done(registry.get("write", "custom"))).description == "echo arguments back"


@scenario()
async def misuse_raises_the_same_classes(registry: Any) -> None:
    await done(registry.register(echo()))
    with pytest.raises(DuplicateToolError, match=r"already registered.*registry\.scope"):
        await done(registry.register(echo()))
    with pytest.raises(DefinitionError, match="timeout_ms must be a positive finite number"):
        await done(registry.register({"name": "t", "description": "d", "parameters": {}, "execute": print,
                                      "timeout_ms": -1}))
    with pytest.raises(RestrictionError, match="requires a scoped context"):
        await done(registry.restrict(allow=["echo"]))


@scenario()
async def restrictions_validate_against_global_names_and_intersect(registry: Any) -> None:
    await done(registry.register(echo("a")))
    await done(registry.register(echo("b")))
    scope = registry.scope("agent")
    await done(scope.register(echo("local")))
    with pytest.raises(RestrictionError, match='unknown global tool "local"; known global tools: a, b'):
        await done(scope.restrict(allow=["local"]))
    with pytest.raises(RestrictionError, match='unknown global tools "x", "y"'):
        await done(scope.restrict(allow=["x"], deny=["y"]))
    with pytest.raises(RestrictionError, match="no-op"):
        await done(scope.restrict({}))
    lift = await done(scope.restrict(allow=["a", "b"]))
    await done(scope.restrict(deny=["b"]))
    assert await names(scope.visible()) == ["a", "local"]
    await done(lift())
    await done(registry.register(echo("later")))
    assert await names(scope.visible()) == ["a", "later", "local"]


@scenario()
async def a_scoped_guard_holds_only_for_its_agent_and_a_prepended_allow_cannot_override_it(registry: Any) -> None:
    await done(registry.register(echo()))
    await done(registry.scope("grounded").guard(lambda e: "grounded agents cannot call tools"))
    await done(registry.on("tools/pre-execute", lambda e, n: allow(), prepend=True))
    assert (await ex(registry.scope("grounded"))).text == "Error: grounded agents cannot call tools"
    assert (await ex(registry.scope("free"), text="ok")).text == "ok"
    await done(registry.guard(lambda e: "global stop" if e.arguments.get("text") == "stop" else None))
    assert (await ex(registry.scope("free"), text="stop")).text == "Error: global stop"


@scenario()
async def ask_without_an_approval_seam_degrades_to_deny(registry: Any) -> None:
    await done(registry.register(echo()))
    await done(registry.on("tools/pre-execute", lambda e, n: ask("a human must look")))
    result = await ex(registry.scope("a1"))
    assert result.text == "Error: a human must look" and result.is_error
