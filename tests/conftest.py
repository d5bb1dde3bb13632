import os

# Keep every Ray address on loopback; Ray reads this when it is first imported.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

import asyncio

import pytest


def pytest_configure(config):
    """Compile the package's bytecode once (in the run's first process; xdist's workers
    find it made). Every Ray actor and subprocess of the suite imports the package; with an
    editable install and ``PYTHONDONTWRITEBYTECODE`` set (as on these machines) each would
    compile it from source again, about 0.3 CPU-s per process."""
    if hasattr(config, "workerinput"):
        return
    import compileall

    import dsh_actors

    compileall.compile_dir(os.path.dirname(dsh_actors.__file__), quiet=1)


def pytest_xdist_auto_num_workers(config):
    """How many workers ``-n auto`` starts: two on a machine of two cores, up to four on
    bigger ones. A Ray test spends much of its time waiting for
    processes to start and deadlines to pass, so a second worker fills the idle core; each
    worker has a Ray cluster of its own (about 21 CPU-s to start), so more stop paying."""
    return min(4, max(2, (os.cpu_count() or 2) // 2))


def pytest_collection_modifyitems(items):
    """Modules marked ``runs_long`` first, then those that use the session's Ray cluster,
    the rest after (stable order otherwise): xdist's workers take whole modules in this
    order, so the longest start first and the short ones left at the end keep them even."""
    def module(item):
        return item.nodeid.split("::")[0]

    long = {module(item) for item in items if item.get_closest_marker("runs_long")}
    uses_ray = {module(item) for item in items if "ray_cluster" in getattr(item, "fixturenames", ())}
    items.sort(key=lambda item: (module(item) not in long, module(item) not in uses_ray))
    for item in items:  # `pytest -m "not ray"`: the pure suite, in seconds
        if _on_ray(item):
            item.add_marker(pytest.mark.ray)


def _on_ray(item):
    """Whether a test runs on Ray: it uses the session's cluster, its module starts a Ray of
    its own (``runs_long``), or its module imports ``ray`` at all."""
    if "ray_cluster" in getattr(item, "fixturenames", ()) or item.get_closest_marker("runs_long"):
        return True
    namespace = getattr(getattr(item, "module", None), "__dict__", {})
    return any(getattr(value, "__name__", "") == "ray" for value in namespace.values())


@pytest.fixture(scope="session")
def ray_cluster():
    """One Ray cluster for the whole test session: a head node and a second node that alone
    has the custom resource ``dsh_special`` (so placement is observable). Subprocess tests
    join it through ``RAY_ADDRESS`` instead of starting a Ray of their own."""
    import ray
    from ray import cloudpickle
    from ray.cluster_utils import Cluster

    import tests

    # Test helpers travel to workers by value: workers need not import the tests package.
    cloudpickle.register_pickle_by_value(tests)

    # Ray's default metrics interval (10 s): every process reporting each second cost the
    # nodes' dashboard agents about a sixth of a core over the suite; the metrics test waits.
    # This session's actors run on asyncio's loop: the tests that time a loop's steps hook
    # asyncio's own (uvloop's are C). Ray would pick uvloop where it is installed (the serve
    # extra brings it): tests/runtime/test_uvloop.py joins as a driver of its own to cover it.
    # Set for the raylets, whose workers inherit it (a job-level runtime env would cost
    # every actor start the prestarted workers: the suite ran 4 minutes longer).
    # No workers prestarted for the first driver (one per CPU, 5 here): an actor or task
    # starts the worker it needs; measured on test_promises.py: 102 -> 92 CPU-s.
    # Each node's log monitor looks for new log files every 0.1 s while there are fewer than
    # 1,000 (two per worker process, dead ones included: a few hundred by the session's end);
    # every 0.5 s instead: measured idle, 0.038 -> 0.016 of a core per cluster.
    os.environ["RAY_USE_UVLOOP"] = "0"
    os.environ["RAY_prestart_worker_first_driver"] = "0"
    os.environ["RAY_LOG_MONITOR_MANY_FILES_THRESHOLD"] = "0"
    try:
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 4, "include_dashboard": False, "node_ip_address": "127.0.0.1"})
        special = cluster.add_node(num_cpus=1, resources={"dsh_special": 4}, node_ip_address="127.0.0.1")
    finally:
        del os.environ["RAY_USE_UVLOOP"]  # (subprocesses of the tests get Ray's default)
        del os.environ["RAY_prestart_worker_first_driver"]
        del os.environ["RAY_LOG_MONITOR_MANY_FILES_THRESHOLD"]
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    cluster.wait_for_nodes()
    yield {"cluster": cluster, "special_node": special}
    blocked = _logs_saying("Using blocking ray.get inside async actor")
    ray.shutdown()
    cluster.shutdown()
    # Read once every test of the session has run on the cluster (its jobs, kills, revivals):
    # Ray logs this once per process, the first time an async actor blocks its loop.
    assert blocked == [], f"an async actor blocked its event loop on ray.get: {blocked}"


def _logs_saying(text):
    """The names of the session's Ray logs that hold ``text``."""
    from pathlib import Path

    import ray

    logs = Path(ray._private.worker._global_node.get_session_dir_path()) / "logs"
    return sorted(p.name for p in logs.glob("*") if p.is_file() and text in p.read_text(errors="replace"))


@pytest.fixture
def cluster_env(ray_cluster):
    """The environment of a subprocess that joins the session's cluster (as under
    ``ray job submit``): ``RAY_ADDRESS`` set, and no ``PYTHONPATH`` that would let Ray's
    workers import what only the subprocess's own folder holds."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "RAY_ADDRESS": ray_cluster["cluster"].address}


@pytest.fixture
def otlp_receiver():
    """A real OTLP/HTTP trace receiver on loopback for one test (``tests/otlp.py``)."""
    from tests.otlp import receiving

    with receiving() as receiver:
        yield receiver


@pytest.fixture
def run():
    """Run a coroutine to completion on a fresh event loop."""
    return lambda coroutine: asyncio.run(coroutine)
