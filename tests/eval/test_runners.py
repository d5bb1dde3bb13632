"""Episode runners on the test cluster: episodes spread over the nodes, each one's work on
its own node, runners and nodes lost mid-run, the library entry point, shared output,
your own tools and asks answered in a job.

Where work ran is asserted from outside: the tools write marker files naming the node
they ran on, and reports and logs are counted on disk."""

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import ray

from dsh_actors import define_tool, text_block
from dsh_actors.eval.job import run_episodes
from dsh_actors.eval.runners import RUNNER_PREFIX
from dsh_actors.log.frames import read_records
from dsh_actors.runtime.wire import approvals_actor_name

from ..runtime.fixtures import WhenMarked

pytestmark = pytest.mark.timeout(300)


def marking_tool(folder, name="mark", sleep_s=0.0):
    """A tool that sleeps, then writes ``folder/<agent>.<n>`` holding its node's id."""
    folder = str(folder)

    def body(args, ctx):
        time.sleep(sleep_s)
        node = ray.get_runtime_context().get_node_id()
        with open(os.path.join(folder, f"{ctx.agent}.{args.get('n', 0)}.{os.getpid()}.{time.monotonic_ns()}"), "w") as f:
            f.write(node)
        return [text_block(node)]
    return define_tool(name=name, description="write a marker naming this node", parameters={"n": {"type": "number"}},
                       execute=body)


def episode(i, calls=3, file_work=True, prefix="ep"):
    turns = [{"calls": [{"name": "mark", "arguments": {"n": n}}]} for n in range(calls)]
    if file_work:
        turns.append({"calls": [{"name": "write_file", "arguments": {"path": "mine.txt", "content": f"ep-{i}"}}]})
        turns.append({"calls": [{"name": "read_file", "arguments": {"path": "mine.txt"}}]})
    return {"id": f"{prefix}-{i:03d}", "turns": turns}


def markers(folder):
    """agent -> set of node ids its calls ran on (from the marker files)."""
    seen = {}
    for path in Path(folder).iterdir():
        seen.setdefault(path.name.split(".")[0], set()).add(path.read_text())
    return seen


def collect(stream):
    async def run():
        return [report async for report in stream]
    return asyncio.run(run())


def test_episodes_spread_over_the_nodes_and_each_ones_work_stays_on_its_runners_node(ray_cluster, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    out = tmp_path / "out"
    scratch = tmp_path / "scratch"
    reports = collect(run_episodes([episode(i) for i in range(40)], tools=[marking_tool(marks)], out=out,
                                   in_flight=16, scratch=scratch, keep_workspaces="all"))
    assert sorted(r.id for r in reports) == [f"ep-{i:03d}" for i in range(40)]  # one report each
    assert all(r.status == "ok" and r.calls == 5 and r.ok == 5 for r in reports), [r.message for r in reports]
    nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    driver = ray.get_runtime_context().get_node_id()[:16]
    by_node = {}
    for report in reports:
        by_node.setdefault(report.node, []).append(report.id)
    assert len(by_node) == 2 and all(len(ids) >= 5 for ids in by_node.values()), by_node  # both nodes work
    ran = markers(marks)
    for report in reports:  # every call of an episode ran on its runner's node
        (node,) = ran[report.agent]
        assert node in nodes and node.startswith(report.node)
        workspace = Path(report.workspace)
        assert report.node in workspace.parts and (workspace / "mine.txt").read_text() == f"ep-{int(report.id[3:])}"
        assert (out / "logs" / f"{report.id}.log").stat().st_size > 0  # every log is in the driver's folder:
        # Written on its own node (the driver's: straight into --out) and streamed back; the
        # node's copy is gone with the job (its runners tidy their node's folder at its end).
        assert list(scratch.glob(f"**/logs/{report.node}/{report.id}.log")) == []
    assert {report.node for report in reports} - {driver}  # some logs did come from the other node
    assert not ray.util.list_named_actors(all_namespaces=True) or not any(
        a["name"].startswith(RUNNER_PREFIX) for a in ray.util.list_named_actors(all_namespaces=True))  # ended


def test_a_job_smaller_than_the_fleets_slots_is_spread_over_every_runner(ray_cluster, tmp_path):
    """3 episodes, 2 runners per node on 2 nodes, 64 in flight: one runner per episode is
    made (3, not 4: a runner costs a process), over both nodes; and each runner takes its
    fair share of what is unreported (before, the first runner to ask took them all)."""
    job = f"small-{time.monotonic_ns()}"
    reports = collect(run_episodes([episode(i, calls=1, file_work=False) for i in range(3)], in_flight=64, name=job,
                                   runners_per_node=2, tools=[marking_tool(tmp_path)], out=tmp_path / "out"))
    assert all(r.status == "ok" for r in reports), [r.message for r in reports]
    per_runner = {}
    for report in reports:
        per_runner[report.runner] = per_runner.get(report.runner, 0) + 1
    assert len(per_runner) == 3 and set(per_runner.values()) == {1}, per_runner
    assert all(name.startswith(f"{RUNNER_PREFIX}{job}:") for name in per_runner)
    assert len({r.node for r in reports}) == 2  # spread over the nodes first
    actors = ray._private.state.actors().values()
    made = [a for a in actors if a["Name"].startswith(f"{RUNNER_PREFIX}{job}:")]
    assert len(made) == 3, made  # counted by Ray, dead or alive
    assert not [a for a in actors if a["Name"] == approvals_actor_name(f"{job}-native")]  # nobody asked: no queue


def _runners(job):
    """The live runners of the job named ``job`` (each named dsh-runner:<job>:<id>)."""
    found = []
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["name"].startswith(f"{RUNNER_PREFIX}{job}:"):
            try:
                found.append(ray.get_actor(entry["name"], namespace=entry["namespace"]))
            except ValueError:
                pass  # gone meanwhile
    return found


@pytest.mark.parametrize("kill", ["ray.kill", "SIGKILL"])
def test_a_runner_killed_mid_episode_costs_no_episode_and_none_is_reported_twice(ray_cluster, tmp_path, kill):
    marks = tmp_path / "marks"
    marks.mkdir()

    def stop_one():
        runner = _runners(f"kill-{kill[:3]}")[0]
        if kill == "ray.kill":
            ray.kill(runner, no_restart=True)
        else:
            os.kill(ray.get(runner.pid.remote()), signal.SIGKILL)

    killer = WhenMarked(marks, 4, stop_one)
    out = tmp_path / "out"
    reports = collect(run_episodes([episode(i, calls=4, file_work=False) for i in range(12)], name=f"kill-{kill[:3]}",
                                   tools=[marking_tool(marks, sleep_s=0.3)], in_flight=12, reference_tools=False,
                                   out=out))
    assert killer.join()
    for report in reports:  # every trajectory whole: its last attempt's every event, on disk where it says
        events = [e["type"] for e in read_records(out / "logs" / f"{report.id}.log")]
        assert events.count("tool/result") == 4 and events[0] == "turn/start" and events[-1] == "turn/end", \
            (report.id, report.attempts, events)
    ids = [r.id for r in reports]
    assert sorted(ids) == [f"ep-{i:03d}" for i in range(12)] and len(set(ids)) == 12  # none lost, none twice
    rerun = [r for r in reports if r.attempts == 2]
    assert rerun and all(r.reran.startswith("its runner on node ") and "died" in r.reran for r in rerun)  # says so
    assert len({r.reran for r in rerun}) == 1  # one runner died, and each of its episodes says which
    assert all(r.status == "ok" and r.ok == 4 for r in reports), [(r.id, r.message) for r in reports]
    assert all(r.attempts == 1 and r.reran is None for r in reports if r not in rerun)
    if kill != "SIGKILL":
        return  # a runner that dies either way leaves the same logs open: one later job checks them
    # The dead runner never closed its episodes' session logs: a later job with the same
    # agent ids (its logs in a folder of its own) opens them anew, on every node.
    again = collect(run_episodes([episode(i, calls=1, file_work=False) for i in range(12)], name=f"again-{kill[:3]}",
                                 tools=[marking_tool(marks)], in_flight=12, reference_tools=False))
    assert sorted(r.status for r in again) == ["ok"] * 12, [(r.id, r.message) for r in again if r.status != "ok"]


def test_a_dead_attempts_running_calls_are_cancelled_before_its_episode_runs_again(ray_cluster, tmp_path):
    """A runner killed while its episodes' calls run in the executors: those calls are
    cancelled (its bodies see it) before any of its episodes starts again, so a rerun
    never works beside its dead attempt. Asserted from the bodies' own marker files,
    timed on the machine's monotonic clock (every process shares it)."""
    marks = tmp_path / "marks"
    marks.mkdir()
    folder = str(marks)

    async def body(args, ctx):
        tag = f"{ctx.agent}.{os.getpid()}.{time.monotonic_ns()}"
        Path(folder, f"{tag}.start").touch()
        try:
            await asyncio.sleep(float(args["s"]))
        except asyncio.CancelledError:
            Path(folder, f"{tag}.cancelled.{time.monotonic_ns()}").touch()
            raise
        Path(folder, f"{tag}.end").touch()
        return [text_block("slept")]

    slow = define_tool(name="mark", description="sleeps", parameters={"s": {"type": "number"}}, execute=body)
    killer = WhenMarked(marks, 4, lambda: [ray.kill(r, no_restart=True) for r in _runners("abort")[:1]])
    episodes = [{"id": f"ab-{i}", "turns": [{"calls": [{"name": "mark", "arguments": {"s": 8}}]},
                                             {"calls": [{"name": "mark", "arguments": {"s": 0}}]}]} for i in range(4)]
    reports = collect(run_episodes(episodes, name="abort", tools=[slow], in_flight=4, runners_per_node=1,
                                   reference_tools=False, tool_timeout_s=60))
    assert killer.join()
    rerun = [r for r in reports if r.attempts == 2]
    assert rerun and all(r.status == "ok" for r in reports), [(r.id, r.status, r.message) for r in reports]
    for report in rerun:
        names = sorted(p.name for p in marks.iterdir() if p.name.startswith(report.agent + "."))
        starts = sorted(int(n.split(".")[2]) for n in names if n.endswith(".start"))
        cancelled = [n for n in names if ".cancelled." in n]
        assert len(cancelled) == 1, names  # the dead attempt's call: cancelled, not left running
        cancelled_at = int(cancelled[0].rsplit(".", 1)[1])
        dead_start = int(cancelled[0].split(".")[2])
        assert not any(n.endswith(".end") and int(n.split(".")[2]) == dead_start for n in names)
        assert all(at > cancelled_at for at in starts if at != dead_start), names  # the rerun began after


def test_two_jobs_with_the_same_episode_ids_run_side_by_side_on_one_cluster(ray_cluster, tmp_path):
    """A sweep over models runs the same episodes once per model: each job's sessions are
    its own (they used to share the cluster-wide id of each agent: the second job's every
    episode failed with SESSION_HELD), and each job's logs hold its own calls."""
    marks = tmp_path / "marks"
    marks.mkdir()
    episodes = [episode(i, calls=2, file_work=False, prefix="sweep") for i in range(3)]

    async def both():
        async def one(name):
            stream = run_episodes(episodes, name=name, tools=[marking_tool(marks, sleep_s=0.5)],
                                  reference_tools=False, out=tmp_path / name)
            return [report async for report in stream]
        return await asyncio.gather(one("model-a"), one("model-b"))

    first, second = asyncio.run(both())
    for name, reports in (("model-a", first), ("model-b", second)):
        assert sorted((r.id, r.status, r.ok) for r in reports) == [(f"sweep-{i:03d}", "ok", 2) for i in range(3)], \
            [(r.id, r.message) for r in reports if r.status != "ok"]
        for report in reports:
            events = [e["type"] for e in read_records(tmp_path / name / "logs" / f"{report.id}.log")]
            assert events.count("tool/result") == 2, (name, report.id, events)


def test_only_episodes_the_infrastructure_ended_run_again_and_each_attempts_log_is_kept(ray_cluster, tmp_path):
    """A tool whose server is lost on an episode's first attempt (a WORKER_CRASHED of its
    own) ends that episode on infrastructure: with --retry-infra it runs again from
    scratch and ends ok, the lost attempt's log kept numbered; an episode the model ended
    (a bad argument) is never run again."""
    from dsh_actors import HarnessError

    marks = tmp_path / "marks"
    marks.mkdir()
    folder = str(marks)

    def flaky(args, ctx):
        attempt = len([p for p in os.listdir(folder) if p.startswith(ctx.agent + ".")]) + 1
        Path(folder, f"{ctx.agent}.{attempt}").touch()
        if args["lost"] and attempt == 1:
            raise HarnessError("the tool's server went away", "WORKER_CRASHED")
        return [text_block(f"attempt {attempt}")]

    tool = define_tool(name="flaky", description="a tool whose server may be lost",
                       parameters={"lost": {"type": "boolean", "required": True}}, execute=flaky)
    episodes = [{"id": "lost", "turns": [{"calls": [{"name": "flaky", "arguments": {"lost": True}}]}]},
                {"id": "clean", "turns": [{"calls": [{"name": "flaky", "arguments": {"lost": False}}]}]},
                {"id": "mistake", "turns": [{"calls": [{"name": "flaky", "arguments": {"lost": "yes"}}]}]}]
    out = tmp_path / "out"
    reports = {r.id: r for r in collect(run_episodes(episodes, name="retries", tools=[tool], reference_tools=False,
                                                     environments="host", retry_infra=2, out=out))}
    lost, clean, mistake = reports["lost"], reports["clean"], reports["mistake"]
    assert (lost.status, lost.attempts, lost.termination) == ("ok", 2, {"reason": "scripted", "infra": False})
    assert [e["termination"]["reason"] for e in lost.retried] == ["tool_lost"]
    assert lost.retried[0]["log"] == "lost.attempt-1.log"
    first = [e for e in read_records(out / "logs" / "lost.attempt-1.log") if e["type"] == "tool/result"]
    last = [e for e in read_records(out / "logs" / "lost.log") if e["type"] == "tool/result"]
    assert first[0]["error"]["code"] == "WORKER_CRASHED" and last[0]["content"][0]["text"] == "attempt 2"
    assert (clean.status, clean.attempts) == ("ok", 1)
    assert (mistake.status, mistake.attempts, dict(mistake.errors)) == ("ok", 1, {"INVALID_ARGS": 1})
    assert sorted(os.listdir(folder)) == ["clean.1", "lost.1", "lost.2"]  # the model's mistake never ran again


def test_a_node_removed_mid_run_costs_no_episode(ray_cluster, tmp_path):
    cluster = ray_cluster["cluster"]
    extra = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes()
    marks = tmp_path / "marks"
    marks.mkdir()
    removed = []

    def remover():
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if any(p.read_text() == extra.node_id for p in marks.iterdir()):
                cluster.remove_node(extra)
                removed.append(True)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=remover)
    thread.start()
    try:
        reports = collect(run_episodes([episode(i, calls=4, file_work=False) for i in range(18)],
                                       tools=[marking_tool(marks, sleep_s=0.3)], in_flight=18, reference_tools=False))
    finally:
        thread.join()
        if not removed:
            cluster.remove_node(extra)
    assert removed
    assert sorted(r.id for r in reports) == [f"ep-{i:03d}" for i in range(18)]
    assert all(r.status == "ok" for r in reports), [(r.id, r.message) for r in reports]
    assert any(r.attempts == 2 for r in reports)
    assert all(not r.node or not extra.node_id.startswith(r.node) for r in reports if r.attempts == 2)


def test_shared_output_holds_every_workspace_and_log(ray_cluster, tmp_path):
    """With shared_out the runners write workspaces and logs into the output folder. (Without
    it, a workspace stays on its runner's node: the spread test reads them there.)"""
    out = tmp_path / "shared"
    reports = collect(run_episodes([{"id": "w", "turns": [{"calls": [
        {"name": "write_file", "arguments": {"path": "a.txt", "content": "one\n"}}]}, {"calls": [
        {"name": "edit_file", "arguments": {"path": "a.txt", "old_text": "one", "new_text": "two"}}]}]}],
        out=out, shared_out=True, keep_workspaces="all"))
    (report,) = reports
    assert report.status == "ok" and Path(report.workspace) == out / "workspaces" / "w"
    assert (out / "workspaces" / "w" / "a.txt").read_text() == "two\n" and (out / "logs" / "w.log").is_file()


def _write(path, episodes):
    path.write_text("\n".join(json.dumps(e) for e in episodes) + "\n")
    return path


def test_an_ask_in_a_job_waits_for_an_answer_from_outside_or_follows_the_jobs_policy(ray_cluster, tmp_path):
    from dsh_actors.runtime.registry.approval import ApprovalQueue

    writes = {"id": "asker", "policies": ["ask-writes"], "turns": [{"calls": [
        {"name": "write_file", "arguments": {"path": "w.txt", "content": "hi"}}]}]}
    # Beside it nobody answers: the ask ends at the call's deadline, the call fails coded (not
    # a denial); the episode's own deadline wins over the job's.
    mine = {**writes, "id": "unanswered", "limits": {"tool_timeout_s": 1.5}}
    answered = []

    def answer():  # the asker's ask only
        queue = ApprovalQueue("asking-job-native", "dsh-actors")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                pending = queue.pending().result(timeout_s=10)
            except Exception:  # noqa: BLE001 - the job's queue is not up yet
                pending = []
            for ask in pending:
                if "unanswered" not in ask["agent"]:
                    answered.append(queue.allow(ask["id"]).result(timeout_s=10))
                    return
            time.sleep(0.1)

    thread = threading.Thread(target=answer)
    thread.start()
    reports = collect(run_episodes([writes, mine], approvals="ask", name="asking-job", keep_workspaces="all",
                                   tool_timeout_s=600))
    thread.join()
    asked, expired = sorted(reports, key=lambda r: r.id)
    assert answered == [True] and asked.status == "ok" and asked.ok == 1 and asked.asks == 1
    assert (Path(asked.workspace) / "w.txt").read_text() == "hi"
    assert (expired.ok, expired.denied, expired.asks, dict(expired.errors)) == (0, 0, 1, {"APPROVAL_TIMEOUT": 1})
    assert not (Path(expired.workspace) / "w.txt").exists()
    # (A job under "always" is the CLI's own-tools test: its ask is allowed, its write made.)
    (rejected,) = collect(run_episodes([writes], approvals="never", name="never-job"))
    assert (rejected.ok, rejected.denied, rejected.asks) == (0, 1, 1)
    # The queue is made on the first ask (a job whose agents never ask makes none).
    assert [a["Name"] for a in ray._private.state.actors().values()
            if a["ActorClassName"] == "ApprovalQueueService" and "never-job" in a["Name"]] == ["dsh-approvals:never-job-native"]


def test_the_cli_runs_your_own_tools_by_import_path_in_your_own_workspace(cluster_env, tmp_path):
    (tmp_path / "mytools.py").write_text(
        "from dsh_actors.tools import AgentWorkspaces\n\n"
        "def tools(workspaces: AgentWorkspaces):\n"
        "    def count_lines(args, ctx):\n"
        "        text = workspaces.at(ctx).resolve(args['path']).read_text()\n"
        "        return [{'type': 'text', 'text': f'{len(text.splitlines())} lines'}]\n"
        "    return [{'name': 'count_lines', 'description': 'Count a file\\'s lines.',\n"
        "             'parameters': {'path': {'type': 'string'}}, 'execute': count_lines}]\n")
    workspace = tmp_path / "template"
    workspace.mkdir()
    (workspace / "data.txt").write_text("a\nb\nc\n")
    episodes = _write(tmp_path / "mine.jsonl", [
        {"id": "count", "policies": ["ask-writes"], "turns": [
            {"calls": [{"name": "count_lines", "arguments": {"path": "data.txt"}}]},
            {"calls": [{"name": "write_file", "arguments": {"path": "data.txt", "content": "z\n"}}]},
            {"calls": [{"name": "count_lines", "arguments": {"path": "data.txt"}}]}]}])
    # The job joins the session's cluster: its workers cannot import mytools, which travels
    # by value. (The CLI starting a local Ray of its own is the examples test's.)
    # (--no-reference-tools and the other flags reach the job as tests/test_cli.py checks.)
    env = cluster_env
    done = subprocess.run([sys.executable, "-m", "dsh_actors", "eval", str(episodes), "--tools", "mytools:tools",
                           "--workspace", str(workspace), "--approvals", "always",
                           "--out", str(tmp_path / "out"), "--quiet"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (row,) = json.loads((tmp_path / "out" / "summary.json").read_text())["per_episode"]
    assert (row["ok"], row["asks"]) == (3, 1)
    log = subprocess.run([sys.executable, "-m", "dsh_actors", "show", str(tmp_path / "out" / "logs" / "count.log")],
                         capture_output=True, text=True, timeout=60).stdout
    assert "3 lines" in log and "1 lines" in log  # the template's file, then the episode's own edit
    assert (workspace / "data.txt").read_text() == "a\nb\nc\n"  # the template itself is never touched
    bad = subprocess.run([sys.executable, "-m", "dsh_actors", "eval", str(episodes), "--tools", "nosuch:tools",
                          "--out", str(tmp_path / "out2")], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2 and "cannot import 'nosuch'" in bad.stderr and "Traceback" not in bad.stderr


def test_a_driver_killed_mid_job_then_resumed_leaves_every_episode_ok_with_its_whole_log(cluster_env, tmp_path):
    """SIGKILL of the driver while episodes run, then --resume: the resumed episodes open
    the same session ids over the same log paths, which the node's writer still held for
    the dead attempt (it wrote into the unlinked file: 6 of 12 logs were missing beside
    ok reports). Every report ok, every log there with all of its last attempt."""
    calls = 3
    episodes = _write(tmp_path / "slow.jsonl", [
        {"id": f"kill-{i:02d}", "turns": [{"calls": [{"name": "bash", "arguments": {"command": "sleep 0.7; echo done"}}]}
                                          for _ in range(calls)]} for i in range(12)])
    out = tmp_path / "out"
    command = [sys.executable, "-m", "dsh_actors", "eval", str(episodes), "--out", str(out), "--quiet",
               "--concurrency", "6", "--environments", "host"]
    driver = subprocess.Popen(command, cwd=tmp_path, env=cluster_env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    def finished():
        return len(list((out / "reports").glob("*.json"))) if (out / "reports").is_dir() else 0

    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and finished() < 3:
            time.sleep(0.1)
        assert 3 <= finished() < 12  # some finished, some in flight
    finally:
        driver.send_signal(signal.SIGKILL)
        driver.wait(60)
    resumed = subprocess.run([*command, "--resume"], cwd=tmp_path, env=cluster_env, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert sorted((e["id"], e["status"]) for e in summary["per_episode"]) == [(f"kill-{i:02d}", "ok") for i in range(12)]
    for i in range(12):
        events = [e["type"] for e in read_records(out / "logs" / f"kill-{i:02d}.log")]
        assert events[0] == "turn/start" and events[-1] == "turn/end" and events.count("tool/result") == calls, \
            (i, events)


def test_the_readmes_python_driver_example_runs_as_written(ray_cluster):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    code = re.search(r"\*\*From Python\*\*.*?```python\n(.*?)```", readme, re.S).group(1)
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})


def test_when_every_runner_keeps_dying_each_episode_still_ends_in_exactly_one_report(ray_cluster, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    stop = threading.Event()
    kills = []

    def killer():  # every runner of the job, as soon as it shows up, until the job ends
        while not stop.is_set():
            for runner in _runners("doomed"):
                try:
                    os.kill(ray.get(runner.pid.remote(), timeout=10), signal.SIGKILL)
                    kills.append(1)
                except Exception:  # noqa: BLE001 - already dead
                    pass
            time.sleep(0.2)

    thread = threading.Thread(target=killer)
    thread.start()
    try:
        reports = collect(run_episodes([episode(i, calls=3, file_work=False) for i in range(8)], name="doomed",
                                       # A call outlasts the killer's lag on a loaded machine: no runner lives to report.
                                       tools=[marking_tool(marks, sleep_s=30)], in_flight=8, reference_tools=False))
    finally:
        stop.set()
        thread.join()
    assert sorted(r.id for r in reports) == [f"ep-{i:03d}" for i in range(8)]  # none lost, none twice, no hang
    assert kills and all(r.status == "failed" for r in reports)
    assert all("died" in r.message or "no episode runner is left" in r.message for r in reports)


def test_leaving_the_report_stream_early_ends_the_jobs_runners(ray_cluster, tmp_path):
    async def first_only():
        # Agents of their own: the job before this one left its killed runners' agents' sessions open.
        async with contextlib.aclosing(run_episodes([episode(i, file_work=False, prefix="quit") for i in range(6)],
                                                    name="quitter",
                                                    tools=[marking_tool(tmp_path)], reference_tools=False)) as stream:
            async for report in stream:
                return report

    first = asyncio.run(first_only())
    assert first.status == "ok", first.message
    deadline = time.monotonic() + 30
    while _runners("quitter") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _runners("quitter")


def test_episodes_that_share_an_id_or_an_agent_are_refused_before_anything_runs(ray_cluster):
    with pytest.raises(ValueError, match="used twice"):
        collect(run_episodes([episode(1), episode(1)]))
    with pytest.raises(ValueError, match="agent"):
        collect(run_episodes([{**episode(1), "agent": "same"}, {**episode(2), "agent": "same"}]))


def test_a_tool_that_never_returns_ends_its_call_at_the_jobs_deadline(ray_cluster, tmp_path):
    async def forever(args, ctx):
        await asyncio.sleep(3600)

    def stuck(args, ctx):  # a plain body ignoring its signal: its thread is left to run out
        time.sleep(8)

    tools = [define_tool(name="forever", description="never returns", parameters={}, execute=forever),
             define_tool(name="stuck", description="blocks", parameters={}, execute=stuck)]
    one = {"calls": [{"name": "forever", "arguments": {}}]}
    started = time.monotonic()
    reports = {r.id: r for r in collect(run_episodes(
        [{"id": "own", "limits": {"tool_timeout_s": 1}, "turns": [one]},
         {"id": "job", "turns": [one, {"calls": [{"name": "stuck", "arguments": {}}]}]}],
        tools=tools, reference_tools=False, tool_timeout_s=2))}
    took = time.monotonic() - started
    assert reports["own"].errors == {"TOOL_TIMEOUT": 1}
    # A tool hung past the job's deadline: the infrastructure's failure, not the model's.
    assert reports["own"].status == "failed" and reports["own"].termination == {"reason": "tool_lost", "infra": True}
    assert reports["job"].errors == {"TOOL_TIMEOUT": 2}
    assert max(reports["own"].latencies_ms) < 4000 and all(2000 <= ms < 6000 for ms in reports["job"].latencies_ms)
    assert took < 60


def test_runners_that_die_before_they_answer_are_replaced_and_the_job_runs(ray_cluster, tmp_path, monkeypatch):
    """Every runner the job makes first dies in its first call (before it says it is up):
    each is replaced, like one lost later, and every episode runs once."""
    from dsh_actors.eval import runner, runners

    deaths, marks = tmp_path / "deaths", tmp_path / "marks"
    deaths.mkdir()
    marks.mkdir()

    class DiesFirst(runner.EpisodeRunnerCore):
        def ready(self):
            if len(list(deaths.iterdir())) < 2:  # the first two runners to answer die instead
                (deaths / str(os.getpid())).touch()
                os._exit(1)
            return super().ready()

    monkeypatch.setattr(runners, "EpisodeRunner", ray.remote(DiesFirst))
    reports = collect(run_episodes([episode(i, calls=1, file_work=False, prefix="early") for i in range(4)],
                                   runners_per_node=1, tools=[marking_tool(marks)],
                                   reference_tools=False, name=f"early-{time.monotonic_ns()}"))
    assert len(list(deaths.iterdir())) == 2
    assert sorted(r.id for r in reports) == [f"early-{i:03d}" for i in range(4)]
    assert all(r.status == "ok" and r.attempts == 1 for r in reports), [r.message for r in reports]
