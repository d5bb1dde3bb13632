"""One Ray cluster for the whole test session: a head node and a second node that alone
has the custom resource ``dsh_special`` (so placement is observable)."""

import os

import pytest
from ray import cloudpickle

import tests

# Test helpers travel to workers by value: workers need not import the tests package.
cloudpickle.register_pickle_by_value(tests)

@pytest.fixture(scope="session")
def ray_cluster():
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 4, "include_dashboard": False, "node_ip_address": "127.0.0.1",
    })
    special = cluster.add_node(num_cpus=1, resources={"dsh_special": 4}, node_ip_address="127.0.0.1")
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    cluster.wait_for_nodes()
    yield {"cluster": cluster, "special_node": special}
    ray.shutdown()
    cluster.shutdown()


_counter = iter(range(10**6))


@pytest.fixture
def registry(ray_cluster):
    """A fresh registry (its own actor and version) for each test."""
    from dsh_actors.runtime import ToolRegistry

    reg = ToolRegistry.connect(f"test-{os.getpid()}-{next(_counter)}")
    yield reg
    reg.shutdown()
