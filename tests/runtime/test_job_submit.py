"""`ray job submit` against a real `ray start --head` cluster on loopback: the entrypoint
works unchanged, writes its artifacts, and the cluster is stopped by PID (never `ray stop`)."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pids_under(marker):
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in entry.joinpath("cmdline").read_bytes().decode(errors="ignore"):
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


@pytest.fixture
def head_node():
    temp = tempfile.mkdtemp(prefix="dshjob-", dir="/tmp")  # short: Ray's socket paths are length-limited
    port, dashboard = _free_port(), _free_port()
    # Every port explicit: another Ray on this machine (the test session's own cluster) holds the defaults.
    agent_ports = [f"--dashboard-agent-listen-port={_free_port()}", f"--dashboard-agent-grpc-port={_free_port()}",
                   f"--metrics-export-port={_free_port()}", f"--runtime-env-agent-port={_free_port()}",
                   f"--ray-client-server-port={_free_port()}"]
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "PATH": f"{BIN}:{os.environ['PATH']}"}
    env.pop("RAY_ADDRESS", None)
    if not (Path.home() / ".ray" / "auth_token").exists():
        subprocess.run([str(BIN / "ray"), "get-auth-token", "--generate"], env=env, capture_output=True, timeout=60)
    started = subprocess.run(
        [str(BIN / "ray"), "start", "--head", f"--temp-dir={temp}", f"--port={port}", "--node-ip-address=127.0.0.1",
         "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}", "--include-dashboard=true", "--num-cpus=2",
         "--disable-usage-stats", *agent_ports],
        env=env, capture_output=True, text=True, timeout=180)
    try:
        assert started.returncode == 0, started.stderr[-2000:]
        yield {"dashboard": f"http://127.0.0.1:{dashboard}", "env": {**env, "RAY_AUTH_MODE": "token"},
               "address": f"127.0.0.1:{port}"}
    finally:
        for pid in _pids_under(temp):  # exactly the processes this cluster started
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.timeout(720)
def test_the_batch_job_and_the_agent_loop_run_under_ray_job_submit(head_node, tmp_path):
    """One job (a job's driver and actors start in seconds each on two cores): the shipped
    scripted episodes and an agent-loop task whose model is a scripted server on loopback."""
    from dsh_actors.agent.scripted import ScriptedServer, reply

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "lookup", "task": "Read notes.txt, then say done.",
                                 "scorer": {"kind": "exact", "expected": "done"}}) + "\n")
    script = [reply("", ("read_file", {"path": "notes.txt"})), reply("done")]
    out = tmp_path / "job-out"
    deadline = time.monotonic() + 90
    with ScriptedServer(script) as server:
        while True:  # the dashboard's job agent comes up a little after `ray start` returns
            submitted = subprocess.run(
                [str(BIN / "ray"), "job", "submit", "--address", head_node["dashboard"], "--working-dir", str(ROOT),
                 "--", "python", "-m", "dsh_actors", "eval", "dsh_actors/examples/episodes.jsonl", str(tasks),
                 "--out", str(out), "--quiet", "--model", "scripted", "--base-url", server.base_url],
                env=head_node["env"], capture_output=True, text=True, timeout=400, cwd=ROOT)
            if "No available agent" not in submitted.stderr or time.monotonic() > deadline:
                break
            time.sleep(2)
    assert submitted.returncode == 0, (submitted.stdout[-3000:], submitted.stderr[-3000:])
    assert "9 episodes (9 ok, 0 failed)" in submitted.stdout  # the summary is in the job's log ...
    assert f"outputs: {out.resolve()}" in submitted.stdout  # ... with where the files are
    assert "succeeded" in (submitted.stdout + submitted.stderr).lower()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["calls"] == 17 + 1 and summary["episodes_failed"] == 0
    assert len(list((out / "logs").glob("*.log"))) == 9
    # The agent loop ran in the job: two model turns, the tool's result sent back with the second.
    assert summary["model"]["success_rate"] == 1.0
    assert [e["turns"] for e in summary["per_episode"] if e["id"] == "lookup"] == [2]
    assert len(server.requests) == 2 and server.requests[1]["messages"][-1]["role"] == "tool"
    # An ask on the same `ray start` cluster, answered from a new shell that only has RAY_ADDRESS.
    from .test_driving import ASKING_DRIVER, clean_env, printed_command

    driver = subprocess.Popen([sys.executable, "-c", ASKING_DRIVER, head_node["address"], "asking"],
                              env=head_node["env"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        command = printed_command(driver)
        assert command[command.index("--address") + 1] == head_node["address"]
        command = command[:command.index("--address")] + command[command.index("--address") + 2:]
        answer = subprocess.run([sys.executable, "-m", "dsh_actors", *command],
                                env={**clean_env(), "RAY_ADDRESS": head_node["address"]},
                                capture_output=True, text=True, timeout=120)
        assert answer.returncode == 0, answer.stderr[-2000:]
        assert "RESULT ran False" in driver.stdout.read()
    finally:
        driver.kill()
        driver.communicate()
