"""The registry actor's plain class and the scope hosts it starts, in one process through
the fake-actor harness: what a scoped change costs the registry, and a dead host's agents
coming back from the journals with the same views."""

import asyncio

import pytest

from dsh_actors.runtime.registry_actor import RegistryService
from dsh_actors.runtime.registry_config import RegistryConfig
from dsh_actors.runtime.scope_actor import ScopeHostService

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
