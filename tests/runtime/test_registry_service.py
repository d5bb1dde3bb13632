"""The registry actor's plain class and the scope hosts it starts, in one process through
the fake-actor harness: what a scoped change costs the registry, and a dead host's agents
coming back from the journals with the same views."""

import asyncio

import pytest

from dsh_actors.runtime.registry.registry_actor import RegistryService
from dsh_actors.runtime.registry.registry_config import RegistryConfig
from dsh_actors.runtime.registry.scope_actor import ScopeHostService

from ..fakes import FakeActor, FakeSpawner, MemoryVersions
from .fixtures import echo

READS = {"version", "base_plan", "global_names", "sequence"}


def registry(hosting="dedicated", versions=None):
    """A registry service whose scope hosts are real ScopeHostServices, all in this process."""
    handle = FakeActor()
    spawner = FakeSpawner(makers={"scope_host": lambda name, ns, journals: ScopeHostService(
        name, ns, journals, registry=handle)})
    handle.obj = RegistryService(RegistryConfig("r", "ns", scope_hosting=hosting), spawner=spawner,
                                 versions=versions or MemoryVersions())
    return handle, spawner


def names(tools):
    return [t.name for t in tools]


@pytest.mark.parametrize("hosting", ["dedicated", "shared"])
def test_each_scoped_change_is_one_write_to_the_registry_and_moves_the_version_once(run, hosting):
    async def scenario():
        reg, _ = registry(hosting)
        for name in ("read", "rm"):
            await reg.register.remote(echo(name), None)
        host = await reg.ensure_scope.remote("ag")
        before = await reg.version.remote()
        reg.calls.clear()
        changes = [await host.restrict.remote("ag", {"deny": ["rm"]}),
                   await host.register.remote("ag", echo("mine")),
                   await host.guard.remote("ag", lambda e: None),
                   await host.on.remote("ag", "tools/pre-execute", lambda e, n: n(), False)]
        await host.dispose.remote("ag", changes[2])
        writes = [c for c in reg.calls if c not in READS]
        assert writes == ["scope_changed"] * 4 + ["scope_disposed"]
        assert await reg.version.remote() == before + 5
        return await host.visible.remote("ag"), await reg.visible.remote()

    scoped, unscoped = run(scenario())
    assert names(scoped) == ["read", "mine"] and names(unscoped) == ["read", "rm"]


@pytest.mark.parametrize("hosting", ["dedicated", "shared"])
def test_a_host_started_again_from_the_journals_serves_the_same_views_and_disposes_the_same_ids(run, hosting):
    async def scenario():
        reg, spawner = registry(hosting)
        await reg.register.remote(echo("read"), None)
        await reg.register.remote(echo("rm"), None)
        host = await reg.ensure_scope.remote("ag")
        await host.restrict.remote("ag", {"deny": ["rm"]})
        shadow = await host.register.remote("ag", echo("read", execute=lambda a, c: []))
        before = await host.visible.remote("ag")
        host.dead = True  # as a killed host: the client reports it, the registry replaces it
        again = await reg.ensure_scope.remote("ag", host.id)
        assert again is not host and spawner.spawned[-1][1] is again
        after = await again.visible.remote("ag")
        await again.dispose.remote("ag", shadow)  # the id the client held still names the shadow
        return before, after, await again.visible.remote("ag")

    before, after, disposed = run(scenario())
    assert names(before) == names(after) == ["read"]  # rm stays hidden: never back with more tools
    assert before[0].execute is not disposed[0].execute and after[0].description == before[0].description
    assert names(disposed) == ["read"] and disposed[0].execute is not after[0].execute  # the global again


def test_closing_a_scope_releases_its_host_and_a_scope_that_changed_nothing_moves_no_version(run):
    async def scenario():
        reg, _ = registry("dedicated")
        quiet = await reg.ensure_scope.remote("quiet")
        await quiet.visible.remote("quiet")
        version = await reg.version.remote()
        await reg.drop_scope.remote("quiet")
        unchanged = await reg.version.remote() == version
        busy = await reg.ensure_scope.remote("busy")
        await busy.register.remote("busy", echo("mine"))
        version = await reg.version.remote()
        await reg.drop_scope.remote("busy")
        return quiet.dead, unchanged, busy.dead, await reg.version.remote() - version, await reg.scopes.remote()

    assert run(scenario()) == (True, True, True, 1, [])


def test_a_recreated_registry_never_reuses_a_version(run):
    versions = MemoryVersions(start=17)

    async def scenario():
        reg, _ = registry(versions=versions)
        await reg.register.remote(echo("a"), None)
        return await reg.version.remote()

    assert run(scenario()) == 19 and versions.value == 19  # one at start, one for the change
    assert asyncio.run(scenario()) == 21


def test_the_subscription_says_which_agents_have_a_scope_all_at_first_then_only_what_changed(run):
    """A client learns with the version which agents have a scope of their own: the others'
    plans are the base plan, so nobody asks a host for them."""
    async def scenario():
        reg, _ = registry("shared")
        await reg.register.remote(echo("read"), None)
        host = await reg.ensure_scope.remote("a")
        await host.restrict.remote("a", {"deny": ["read"]})
        version, full, agents = await reg.subscribe.remote("client", 0)
        first = (full, agents)
        host_b = await reg.ensure_scope.remote("b")
        await host_b.register.remote("b", echo("mine"))
        await reg.drop_scope.remote("a")
        await host_b.visible.remote("quiet-reader")  # a read makes no scope
        after, full, agents = await reg.subscribe.remote("client", version)
        second = (full, agents)
        third = await reg.subscribe.remote("client", after)  # nothing changed since: a heartbeat
        return first, second, third[1:], await reg.subscribe.remote("new-client", 0)

    first, second, third, new = run(scenario())
    assert first == (True, ["a"])
    assert second == (False, [("a", False), ("b", True)])
    assert third == (False, [])
    assert new[1:] == (True, ["b"])


def test_the_changes_a_client_missed_beyond_what_is_kept_come_as_the_whole_set(monkeypatch):
    from dsh_actors.runtime.registry import registry_core

    monkeypatch.setattr(registry_core, "_SCOPED_LOG", 4)
    core = registry_core.RegistryCore("r", "ns", lambda version: None)
    start = core.version
    for i in range(6):
        core.scope_changed(f"agent-{i}", i, "restrict", {})
    assert core.scoped_since(start) == (True, [f"agent-{i}" for i in range(6)])
    assert core.scoped_since(core.version - 1) == (False, [("agent-5", True)])
    core.drop_journal("agent-5")
    core.bump()
    assert core.scoped_since(core.version - 1) == (False, [("agent-5", False)])


def test_an_executor_or_queue_killed_for_good_is_replaced_though_no_client_met_its_death(run):
    """The registry watches its pools: an idle member that dies for good is replaced as
    soon as its watch hears of it, and no answer of the registry names it afterwards."""
    async def scenario():
        handle = FakeActor()
        spawner = FakeSpawner()
        handle.obj = RegistryService(RegistryConfig("r", "ns", mode="code", code_dispatch="queue-actor"),
                                     spawner=spawner, versions=MemoryVersions())
        await handle.subscribe.remote("client", -1)  # a client connects: the pools are watched
        before = [h for h, _ in await handle.executor_nodes.remote()]
        queue = (await handle.code_queues.remote())[0][0]
        async def replaced(member, listed):  # each watch replaces it on the loop (the alive nodes: a thread)
            for _ in range(500):
                if member not in [h for h, _ in await listed.remote()]:
                    return
                await asyncio.sleep(0.01)

        spawner.kill(before[0])
        spawner.kill(queue)
        await replaced(before[0], handle.executor_nodes)
        await replaced(queue, handle.code_queues)
        after = [h for h, _ in await handle.executor_nodes.remote()]
        queues = [h for h, _ in await handle.code_queues.remote()]
        spawner.kill(after[0])  # its successor is watched too
        await replaced(after[0], handle.executor_nodes)
        again = [h for h, _ in await handle.executor_nodes.remote()]
        return before, after, queue, queues, again, spawner

    before, after, queue, queues, again, spawner = run(scenario())
    assert after[0] is not before[0] and after[1] is before[1]
    assert queue not in queues and len(queues) == 2 and not any(q.dead for q in queues)
    assert again[0] is not after[0] and not again[0].dead
    assert [kind for kind, _ in spawner.spawned].count("executor") == 4  # two, then one per death
