"""Episode environments in a batch job, attacked through the model's own tools and judged
from outside: canary files outside the workspace, a listener on the host's loopback, the
host's process table, Ray's actor table, the workspaces left on disk.

Every episode here is what a hostile model would do with `bash` and the file tools; the
walls themselves are tested without Ray in tests/envs/."""

import asyncio
import os
import socket
import threading
import time
from pathlib import Path

import pytest
import ray

from dsh_actors.eval.job import run_episodes
from dsh_actors.eval.run_folder import write_reports
from dsh_actors.eval.show import show_log

from ..envs.host import processes_with

pytestmark = pytest.mark.timeout(300)


def collect(stream):
    async def run():
        return [r async for r in stream]
    return asyncio.run(run())


def bash(*commands):
    return [{"calls": [{"name": "bash", "arguments": {"command": c}}]} for c in commands]


class Listener:
    """A TCP listener on the host's loopback that counts the connections it gets."""

    def __init__(self):
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.socket.settimeout(0.2)
        self.port, self.connections, self._stop = self.socket.getsockname()[1], 0, False
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while not self._stop:
            try:
                conn, _ = self.socket.accept()
                self.connections += 1
                conn.close()
            except OSError:
                pass

    def close(self):
        self._stop = True
        self._thread.join(5)
        self.socket.close()


def test_a_hostile_models_shell_cannot_get_out_of_its_episodes_environment(ray_cluster, tmp_path):
    canary = tmp_path / "canary.txt"
    canary.write_text("untouched")
    listener = Listener()
    marker = f"dsh-escape-{os.getpid()}-{time.monotonic_ns()}"
    actors_before = {a["ActorID"] for a in ray._private.state.actors().values() if a["State"] == "ALIVE"}
    escape = {"id": "escape", "turns": bash(
        "id -u; id -g",
        f"echo owned > {canary}; cat {canary}",
        f"ls {tmp_path}",
        "ls /tmp/ray /root /home 2>&1 | head",
        f"python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', {listener.port}), 2)\" 2>&1 | tail -1",
        "python3 -c \"import ray; ray.init(address='auto')\" 2>&1 | tail -1",
        f"(setsid nohup sleep 1000 {marker} >/dev/null 2>&1 &); (nohup bash -c 'trap \"\" TERM; exec sleep 1001 {marker}' "
        ">/dev/null 2>&1 &); echo started",
        "kill -9 1 2>&1; ls /proc | head -5",
        "mount -t tmpfs x /mnt 2>&1; echo mount=$?",
    )}
    neighbour = {"id": "neighbour", "turns": bash("echo mine > secret.txt", "sleep 2")}
    looks = {"id": "looks", "turns": bash("sleep 1; ls -d /tmp/*/ 2>&1; find / -name secret.txt 2>/dev/null | head")}
    out = tmp_path / "out"
    try:
        reports = {r.id: r for r in collect(run_episodes([escape, neighbour, looks], name="escapes", out=out,
                                                         keep_workspaces="all"))}
    finally:
        listener.close()
    assert all(r.status == "ok" for r in reports.values()), [(r.id, r.message) for r in reports.values()]
    texts = [e["content"][0]["text"] for e in _tool_results(out / "logs" / "escape.log")]
    assert texts[0].split()[0] != "0"  # not root
    assert canary.read_text() == "untouched" and "untouched" not in texts[1]  # nothing outside it is written
    assert "canary" not in texts[2]  # nor listed
    assert "No such file" in texts[3] or texts[3].strip() == ""  # Ray's session, homes: not there
    assert listener.connections == 0  # the host's loopback is out of reach
    assert "Error" in texts[5] or "ConnectionError" in texts[5] or "refused" in texts[5].lower() or texts[5]
    assert processes_with(marker.encode()) == []  # nothing it started outlives its episode
    assert "secret.txt" not in _tool_results(out / "logs" / "looks.log")[0]["content"][0]["text"]
    actors_after = {a["ActorID"] for a in ray._private.state.actors().values() if a["State"] == "ALIVE"}
    assert all(not ray._private.state.actors(actor_id=a).get("Name", "").startswith("escape")
               for a in actors_after - actors_before)


def _tool_results(log):
    from dsh_actors.log.frames import read_records

    return [e for e in read_records(log) if e["type"] == "tool/result"]


def test_a_command_stopped_by_a_bound_answers_its_code_and_the_other_episodes_finish(ray_cluster, tmp_path):
    bombs = [
        {"id": "forks", "environment": {"processes": 64},
         "turns": bash("bomb() { bomb | bomb & }; bomb; sleep 5")},
        {"id": "memory", "environment": {"memory_mb": 128},
         "turns": bash("python3 -c \"x = bytearray(512 * 1024 * 1024); print(len(x))\"")},
        {"id": "disk", "environment": {"disk_mb": 8},
         "turns": bash("head -c 64M /dev/zero > big.bin; ls -la big.bin")},
        {"id": "calm", "turns": bash("echo fine")},
    ]
    reports = {r.id: r for r in collect(run_episodes(bombs, name="bounds", keep_workspaces="never"))}
    assert dict(reports["forks"].errors) == {"ENV_PROCESSES": 1}, reports["forks"]
    assert dict(reports["memory"].errors) == {"ENV_MEMORY": 1}, reports["memory"]
    assert dict(reports["disk"].errors) == {"ENV_DISK": 1}, reports["disk"]
    assert reports["calm"].status == "ok" and reports["calm"].ok == 1
    assert all(r.termination["infra"] is False for r in reports.values())  # the model's own doing


def test_code_mode_sub_calls_and_native_calls_of_an_episode_share_its_environment(ray_cluster, tmp_path):
    program = ('print(await tools.bash(command="cat from-native.txt; echo sub > /tmp/from-sub.txt"))')
    episode = {"id": "shared", "mode": "both", "turns": [
        {"calls": [{"name": "write_file", "arguments": {"path": "from-native.txt", "content": "native"}}]},
        {"calls": [{"name": "run_code", "arguments": {"code": program}}]},
        *bash("cat /tmp/from-sub.txt")]}
    out = tmp_path / "out"
    (report,) = collect(run_episodes([episode], name="shared-env", out=out))
    assert report.status == "ok" and report.sub_calls == 1, report
    texts = [e["content"][0]["text"] for e in _tool_results(out / "logs" / "shared.log")]
    assert "native" in texts[1] and texts[2].strip() == "sub"  # the same workspace, the same private /tmp


@pytest.mark.parametrize("keep, left", [("never", set()), ("failed", {"fails"}), ("all", {"fails", "passes"})])
def test_keep_workspaces_decides_what_stays_on_disk_and_the_rest_of_the_job_folder_goes(ray_cluster, tmp_path,
                                                                                          keep, left):
    from dsh_actors import HarnessError, define_tool

    def lost(args, ctx):
        raise HarnessError("its server went away", "WORKER_CRASHED")  # the episode fails (on infrastructure)

    episodes = [{"id": "passes", "turns": bash("echo ok > proof.txt")},
                {"id": "fails", "turns": [*bash("echo ok > proof.txt"), {"calls": [{"name": "lost", "arguments": {}}]}]}]
    tool = define_tool(name="lost", description="a tool whose server is gone", parameters={}, execute=lost)
    reports = {r.id: r for r in collect(run_episodes(episodes, name=f"keep-{keep}", scratch=tmp_path, tools=[tool],
                                                     keep_workspaces=keep, out=tmp_path / "out"))}
    assert reports["passes"].status == "ok" and reports["fails"].status == "failed"
    kept = {r.id for r in reports.values() if r.workspace is not None and Path(r.workspace, "proof.txt").is_file()}
    assert kept == left
    assert all(r.workspace is None for r in reports.values() if r.id not in left)  # the report says where, or nothing
    job_folders = list((tmp_path / "dsh-actors-jobs").iterdir())  # (the logs were sent to --out)
    leftovers = {p.relative_to(tmp_path).parts[2] for folder in job_folders for p in folder.rglob("*") if p.is_file()}
    assert leftovers <= {"job", "workspaces"}, leftovers  # the template copies and logs are gone
    # `show` points at a kept workspace (the report says where; this test's node is this machine).
    (tmp_path / "out" / "reports").mkdir()
    write_reports(tmp_path / "out" / "reports", list(reports.values()))  # as the job's run folder does
    for report in reports.values():
        shown, _ = show_log(tmp_path / "out" / "logs" / f"{report.id}.log")
        assert (f"· workspace kept at {report.workspace} (on this machine)" in shown) == (report.id in left), shown
