"""A multi-node Ray cluster on this machine for the benchmarks where nodes matter."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback only
import ray  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402


@contextlib.contextmanager
def local_cluster(nodes: int = 3, cpus_per_node: int = 1) -> Iterator[Cluster]:
    """``nodes`` nodes (``ray.cluster_utils``, 127.0.0.1) with this process connected."""
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": cpus_per_node, "include_dashboard": False,
                                                            "node_ip_address": "127.0.0.1"})
    for _ in range(nodes - 1):
        cluster.add_node(num_cpus=cpus_per_node, node_ip_address="127.0.0.1")
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    cluster.wait_for_nodes()
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
