"""The plain classes under the actor shells, built and exercised without a Ray instance."""

import pytest

from dsh_actors import DuplicateToolError, RestrictionError
from dsh_actors.core.registry import compose_plan
from dsh_actors.runtime.registry.registry_core import RegistryCore
from dsh_actors.runtime.registry.scope_actor import ScopeCore

from .fixtures import echo


def core():
    published = []
    return RegistryCore("r", "ns", published.append), published


def test_the_registry_core_publishes_one_version_per_change_and_disposes_an_owner_last_first():
    registry, published = core()
    order = []
    a = registry.register(echo("a"), owner="plugin:p")
    registry.on_change(lambda: order.append(sorted(registry.global_names())), owner=None)
    b = registry.register(echo("b"), owner="plugin:p")
    assert published == [1, 2, 3] and a != b
    assert registry.dispose_owner("plugin:p") == 2
    assert order == [["a", "b"], ["a"], []]  # b went first, then a; each change heard once
    assert published == [1, 2, 3, 4, 5] and registry.global_names() == []
    with pytest.raises(DuplicateToolError):
        registry.register(echo("c"), None)
        registry.register(echo("c"), None)


def test_a_scope_core_rebuilt_from_its_journal_has_the_same_layer_under_the_same_ids():
    registry, _ = core()
    registry.register(echo("echo"), None)
    registry.register(echo("rm"), None)
    scope = ScopeCore("agent")
    journal = []
    reg_id, frozen = scope.register(echo("echo"))
    journal.append((reg_id, "tool", frozen))
    reg_id, compiled = scope.restrict({"deny": ["rm"]}, registry.global_names())
    journal.append((reg_id, "restriction", compiled))
    reg_id, payload = scope.on("tools/pre-execute", lambda e, n: n(), registry.state.next_sequence(), False)
    journal.append((reg_id, "listener", payload))
    with pytest.raises(RestrictionError, match="unknown global tool"):
        scope.restrict({"deny": ["nope"]}, registry.global_names())

    again = ScopeCore("agent", journal)
    _, base, chains = registry.base_plan()
    before = compose_plan(base, chains, scope.layer)
    after = compose_plan(base, chains, again.layer)
    assert list(before.tools) == list(after.tools) == ["echo"]  # rm restricted away, echo shadowed
    assert after.tools["echo"] is frozen and len(after.pre_execute) == 1
    assert again.dispose(journal[1][0])  # the restriction's id still names it
    assert list(compose_plan(base, chains, again.layer).tools) == ["echo", "rm"]
    assert not again.dispose(journal[1][0])  # once


def test_a_workers_first_code_runtime_is_made_off_its_loop_and_once_for_runs_that_start_together(monkeypatch):
    """Making a code runtime probes the host's walls in a subprocess: on the loop, that
    would stall every other call of the executor (or queue) for as long."""
    import asyncio
    import threading

    from dsh_actors.codemode.runtime import CodeRuntimeConfig
    from dsh_actors.runtime.executor import codemode

    made = []

    def make_runtime(config):
        made.append(threading.get_ident())
        threading.Event().wait(0.05)  # a probe's subprocess: the other first runs come meanwhile
        return type("Runtime", (), {"language": "python", "dialect": "d", "isolation": "i"})()

    monkeypatch.setattr(codemode, "make_runtime", make_runtime)
    monkeypatch.setattr(codemode, "resolved_backend", lambda config: "cpython")
    from dsh_actors.runtime import process

    monkeypatch.setattr(process.current(), "code_runtimes", {})
    config = CodeRuntimeConfig(compute_ms=1234)

    async def first_runs():
        runtimes = await asyncio.gather(*[codemode._worker_runtime(config) for _ in range(3)])
        return threading.get_ident(), runtimes

    loop_thread, runtimes = asyncio.run(first_runs())
    assert len(made) == 1 and made[0] != loop_thread
    assert runtimes[0] is runtimes[1] is runtimes[2]
    assert asyncio.run(codemode._worker_runtime(None)) is None
