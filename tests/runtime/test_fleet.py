"""The registry's plain parts without a Ray instance: its config (validated once, in the
caller), its store's journals, and its fleet (what starts where, what a replacement starts
from), through a fake spawner that records every actor it is asked for."""

import pytest

from dsh_actors import DefinitionError
from dsh_actors.runtime.registry.fleet import Fleet
from dsh_actors.runtime.registry.registry_config import RegistryConfig
from dsh_actors.runtime.registry.registry_core import RegistryCore

from ..fakes import FakeSpawner
from .fixtures import echo


def fleet(journals=dict, **config):
    spawner = FakeSpawner(**{k: config.pop(k) for k in ("nodes",) if k in config})
    made = Fleet(RegistryConfig("r", "ns", **config), journals, spawner)
    made.start()
    return made, spawner


@pytest.mark.parametrize("bad, message", [
    ({"mode": "turbo"}, "tools mode must be one of native, code, both; got 'turbo'"),
    ({"scope_hosting": "pooled"}, "scope_hosting must be one of dedicated, shared; got 'pooled'"),
    ({"code_dispatch": "remote"}, "code_dispatch must be one of in-task, queue-actor; got 'remote'"),
    ({"executors": 0}, "executors must be a positive int or None; got 0"),
    ({"scope_hosts": True}, "scope_hosts must be a positive int or None; got True"),
    ({"queues": None}, "queues must be a positive int; got None"),
])
def test_a_registry_config_refuses_each_bad_field_by_name_and_is_frozen(bad, message):
    with pytest.raises(DefinitionError, match="^" + message.replace("(", r"\(") + "$"):
        RegistryConfig("r", "ns", **bad)
    config = RegistryConfig("r", "ns")
    with pytest.raises(AttributeError):
        config.mode = "code"  # type: ignore[misc]


def test_a_connect_that_disagrees_with_the_running_registry_says_what_to_pass():
    running = RegistryConfig("r", "ns", scope_hosting="shared").described()
    assert running == {"mode": "native", "code_runtime": False, "scope_hosting": "shared", "dialect": None,
                       "sessions": None}
    assert RegistryConfig("r", "ns", scope_hosting="shared").conflicts_with(running) is None
    assert 'connect with scope_hosting="shared"' in RegistryConfig("r", "ns").conflicts_with(running)
    assert 'already runs in mode "native", not "code"' in RegistryConfig("r", "ns", mode="code").conflicts_with(running)


def test_pools_are_one_per_node_at_least_two_and_pinned_round_robin():
    made, spawner = fleet(nodes=["a", "b", "c"], scope_hosting="shared")
    assert [(h.kind, h.options["node"]) for _, h in spawner.spawned] == [
        ("executor", "a"), ("executor", "b"), ("executor", "c")]
    assert made.scope_host_nodes() == []  # shared hosts are made when a scope first needs one
    hosts = made.shared_hosts(["a", "b", "c"])
    assert made.shared_hosts(["a", "b", "c"]) is hosts and [(h.kind, h.options["node"]) for _, h in spawner.spawned[3:]] == [
        ("scope_host", "a"), ("scope_host", "b"), ("scope_host", "c")]
    assert [node for _, node in made.executor_nodes()] == ["a", "b", "c"]
    assert made.scope_host_nodes() == ["a", "b", "c"]
    one, spawner = fleet(nodes=["only"], executors=None)
    assert [h.options["node"] for _, h in spawner.spawned] == ["only", "only"]  # at least two executors
    assert one.scope_hosts == []  # dedicated hosting: a host per agent, made on first use
    queued, spawner = fleet(nodes=["a"], mode="code", code_dispatch="queue-actor", queues=3, executors=1)
    assert [kind for kind, _ in spawner.spawned] == ["executor", "queue", "queue", "queue"]
    assert [node for _, node in queued.queues] == ["a", "a", "a"]


def test_a_replaced_executor_or_queue_takes_its_place_and_node_and_only_once():
    made, spawner = fleet(nodes=["a", "b"], mode="both", code_dispatch="queue-actor", queues=2)
    queues = made.queues  # the run_code transport holds this very list
    dead = made.executors[1]
    made.replace_executor(dead.id, ["a", "b"])
    assert made.executors[1] is not dead and made.executor_nodes()[1][1] == "b"
    made.replace_executor(dead.id, ["a", "b"])  # a second report of the same death starts nothing
    assert [kind for kind, _ in spawner.spawned].count("executor") == 3
    old = queues[0][0]
    successor = made.replace_queue(old.id, ["a", "b"])
    assert made.queues is queues and queues[0] == successor and successor[1] == "a"
    assert made.replace_queue(old.id, ["a", "b"]) == queues[0]  # already replaced: the first queue
    assert [kind for kind, _ in spawner.spawned].count("queue") == 3


def test_a_shared_host_that_died_restarts_with_the_journals_of_exactly_its_agents():
    core = RegistryCore("r", "ns", lambda v: None)
    made, spawner = fleet(lambda: core.journals, nodes=["a", "b"], scope_hosting="shared")
    agents = [f"agent-{i}" for i in range(8)]
    for i, agent in enumerate(agents):
        core.scope_changed(agent, 1, "tool", f"payload-{i}")
    made.shared_hosts(["a", "b"])
    host = made.scope_host("agent-0")
    assert made.scope_host("agent-0", "someone-else", ["a", "b"]) is host  # not the one on record
    again = made.scope_host("agent-0", host.id, ["a", "b"])
    assert host.dead and again is not host and again.options["node"] == host.options["node"]
    assert made.node_of(host) is None and made.scope_host_nodes()[made.scope_hosts.index(again)] == host.options["node"]
    journals = again.args[2]
    mates = {a for a in agents if made.host_of(a) is again}
    assert set(journals) == mates and "agent-0" in mates and len(mates) < len(agents)
    assert all(journals[a] == [(1, "tool", f"payload-{agents.index(a)}")] for a in mates)


def test_a_dedicated_host_is_named_for_its_agent_made_once_and_released_with_its_scope():
    made, spawner = fleet(nodes=["a"], detached=True)
    host = made.scope_host("ag")
    assert made.scope_host("ag") is host
    assert host.options == {"namespace": "ns", "name": host.options["name"], "lifetime": "detached"}
    assert "ag" in host.options["name"] and host.args[2] == {"ag": []}
    made.release_scope("ag")
    assert host.dead and made.host_of("ag") is None
    assert made.scope_host("ag") is not host


def test_the_hub_lives_on_the_registrys_node_and_is_replaced_only_when_the_dead_one_is_on_record():
    made, spawner = fleet(nodes=["a", "b"])
    hub = made.signal_hub()
    assert hub.kind == "hub" and hub.options == {"node": "n1"} and made.signal_hub() is hub
    assert made.signal_hub("not-this-one") is hub
    assert made.signal_hub(hub.id) is not hub


def test_the_core_journals_and_publishes_a_scope_change_in_one_step_and_freezes_nothing_twice():
    published = []
    core = RegistryCore("r", "ns", published.append, version=41)
    assert core.scope_changed("ag", 7, "restriction", "deny rm") == 42 and published == [42]
    core.scope_changed("ag", 8, "guard", "g")
    assert core.scope_disposed("ag", 7) == 44 and core.journals == {"ag": [(8, "guard", "g")]}
    assert core.drop_journal("ag") and not core.drop_journal("ag")
    with pytest.raises(DefinitionError, match="a frozen registration must be a ToolDefinition; got dict"):
        core.register({"name": "raw", "description": "d", "parameters": {}, "execute": print}, None)
    definition = echo("kept")
    core.register(definition, None)
    assert core.get("kept") is definition  # the client's snapshot, not a copy of it
