"""On a 3-node cluster, each episode's environment is on its runner's node: its commands run
where its workspace is. A cluster of its own, in a subprocess (the session's has two nodes)."""

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.runs_long, pytest.mark.timeout(420)]

SCRIPT = r"""
import asyncio, json, os, sys
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
import ray
from ray.cluster_utils import Cluster

out = sys.argv[1]
cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False,
                                                        "node_ip_address": "127.0.0.1"})
for _ in range(2):
    cluster.add_node(num_cpus=2, node_ip_address="127.0.0.1")
ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
cluster.wait_for_nodes()
try:
    from dsh_actors.eval.job import run_episodes
    from dsh_actors.log.frames import read_records

    episodes = [{"id": f"n{i}", "turns": [{"calls": [{"name": "bash", "arguments": {"command": "pwd; hostname"}}]}]}
                for i in range(9)]

    async def run():
        return [r async for r in run_episodes(episodes, name="three", runners_per_node=1, in_flight=9, out=out,
                                              keep_workspaces="all")]

    seen = []
    for report in asyncio.run(run()):
        (result,) = [e for e in read_records(f"{out}/logs/{report.id}.log") if e["type"] == "tool/result"]
        seen.append({"id": report.id, "status": report.status, "node": report.node, "workspace": report.workspace,
                     "said": result["content"][0]["text"]})
    hosts = [a["Name"] for a in ray._private.state.actors().values()
             if a["Name"].startswith("dsh-envs:") and a["State"] == "ALIVE"]
    print("SEEN " + json.dumps({"episodes": seen, "hosts": hosts,
                                "nodes": [n["NodeID"] for n in ray.nodes() if n["Alive"]]}), flush=True)
finally:
    ray.shutdown()
    cluster.shutdown()
"""


def test_each_episodes_environment_is_on_its_runners_node_on_three_nodes(tmp_path):
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.split("SEEN ", 1)[1].splitlines()[0])
    episodes = seen["episodes"]
    assert [e["status"] for e in episodes] == ["ok"] * 9, episodes
    for episode in episodes:
        pwd, hostname = episode["said"].split()[:2]
        assert pwd == episode["workspace"] and f"/workspaces/{episode['node']}/" in pwd, episode  # its node's copy
        assert hostname != "" and hostname != pwd
    assert len({e["node"] for e in episodes}) == 3  # every node ran some
    assert {h.split(":", 1)[1] for h in seen["hosts"]} <= set(seen["nodes"]) and len(seen["hosts"]) == 3
