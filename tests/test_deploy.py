"""The cluster configs name the real entrypoint and install step, in the shapes their tools accept."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
ENTRYPOINT = "python -m dsh_actors eval"


def load(path):
    return yaml.safe_load((ROOT / path).read_text())


def test_the_on_prem_launcher_config_uses_the_local_provider_shape_and_installs_the_package():
    config = load("ray_cluster.yaml")
    assert config["provider"]["type"] == "local" and "head_ip" in config["provider"]
    assert "available_node_types" not in config and "head_node_type" not in config
    assert any("pip install" in c and "dsh-actors" in c for c in config["setup_commands"])
    assert any(target.endswith("dsh-actors") for target in config["file_mounts"])


def test_the_cloud_launcher_config_declares_node_types_including_a_gpu_one():
    config = load("deploy/ray_cluster.aws.yaml")
    assert config["head_node_type"] in config["available_node_types"]
    assert "gpu" in config["available_node_types"]
    assert any("pip install" in c for c in config["setup_commands"])


def test_the_kuberay_manifests_run_the_real_entrypoint_on_the_image_that_installs_the_package():
    job = load("deploy/rayjob.yaml")
    cluster = load("deploy/raycluster.yaml")
    assert (job["kind"], cluster["kind"]) == ("RayJob", "RayCluster")
    assert job["spec"]["entrypoint"].startswith(ENTRYPOINT)
    images = {c["image"] for spec in (job["spec"]["rayClusterSpec"], cluster["spec"])
              for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
              for c in group["template"]["spec"]["containers"]}
    assert images == {"dsh-actors:0.1.0"}
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert "pip install" in dockerfile and "rayproject/ray:2.60.0" in dockerfile
    module = ENTRYPOINT.split()[2]
    assert (ROOT / module / "__main__.py").exists()
