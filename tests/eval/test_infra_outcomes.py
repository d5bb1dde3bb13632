"""A thousand scripted episodes with faults injected, judged from outside: every injected
failure is flagged as the infrastructure's with its reason, no clean episode is, retried
episodes end as their retry did, and a tool's breaker opens while its server is down and
closes once it is back.

The faults are those of the server the tool talks to: down for its first 1.5 s (whoever
makes them), dying under the calls of 5 % of the episodes (``WORKER_CRASHED``) and hanging
past the deadline of 2 % (``TOOL_TIMEOUT``), on their first two attempts; and one runner is
SIGKILLed mid-run. Each call writes a marker naming its episode and attempt: what ran is
counted on disk."""

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
import ray

from dsh_actors import HarnessError, define_tool, text_block
from dsh_actors.core.errors import INFRA_CODES
from dsh_actors.eval.breakers import breaker_history
from dsh_actors.eval.job import run_episodes

from ..runtime.fixtures import WhenMarked
from .test_runners import _runners

pytestmark = pytest.mark.timeout(600)

EPISODES = 1000
OUTAGE_S = 1.5  # the server is down this long after its first call, whoever makes the calls


def number(episode: str) -> int:
    return int(episode.split("-")[1])


def crashes(episode: str) -> bool:
    return number(episode) % 20 == 3


def hangs(episode: str) -> bool:
    return number(episode) % 50 == 7


def server_tool(folder: Path):
    where = str(folder)

    async def body(args, ctx):
        episode, n = ctx.agent, int(args["n"])
        first = os.path.join(where, "server-up-since")
        try:
            with open(first, "x") as since:
                since.write(str(time.time()))
        except FileExistsError:
            pass
        down = time.time() - float(Path(first).read_text() or time.time()) < OUTAGE_S
        attempt = len([p for p in os.listdir(where) if p.startswith(f"{episode}.") and p.endswith(".0")]) + (n == 0)
        Path(where, f"{episode}.{attempt}.{n}").touch()
        if down:
            raise HarnessError("the tool's server is down", "WORKER_CRASHED")
        if n == 1 and attempt <= 2 and crashes(episode):
            raise HarnessError("the tool's server died under the call", "WORKER_CRASHED")
        if n == 1 and attempt <= 2 and hangs(episode):
            await asyncio.sleep(30)  # past the episode's deadline
        return [text_block("done")]

    return define_tool(name="svc", description="talks to a server", parameters={"n": {"type": "number"}},
                       execute=body)


def test_injected_infrastructure_failures_are_flagged_retried_and_broken_off_and_clean_ones_are_not(
        ray_cluster, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    # Early, while episodes run (the breaker keeps calls, and so markers, away while it is open).
    killer = WhenMarked(marks, 150, lambda: [os.kill(ray.get(r.pid.remote(), timeout=30), signal.SIGKILL)
                                                       for r in _runners("faults")[:1]], within_s=300)
    # A deadline far above a trivial call even on a loaded machine, far below a hang.
    episodes = [{"id": f"ep-{i:04d}", "limits": {"tool_timeout_s": 5.0},
                 "turns": [{"calls": [{"name": "svc", "arguments": {"n": n}}]} for n in range(2)]}
                for i in range(EPISODES)]

    async def run():
        stream = run_episodes(episodes, name="faults", tools=[server_tool(marks)], reference_tools=False,
                              environments="host", in_flight=128, retry_infra=1, breaker=(5, 0.5))
        return [r async for r in stream]

    reports = {r.id: r for r in asyncio.run(run())}
    assert killer.join() is not None
    history = breaker_history("faults")
    assert sorted(reports) == [e["id"] for e in episodes]  # one report each, none lost

    for report in reports.values():
        met = set(report.errors) & INFRA_CODES
        # Flagged exactly when its last attempt met the infrastructure (or no runner could finish it).
        assert report.termination["infra"] == bool(met or report.termination["reason"] == "runner_lost"), report
        assert (report.status == "ok") == (not report.termination["infra"]), report
        assert report.termination["reason"] in ("scripted", "tool_lost", "runner_lost"), report
        # Only the infrastructure's ends ran again; each attempt is accounted for.
        assert all(e.get("runner_lost") or e["termination"]["infra"] for e in report.retried), report
        assert report.attempts == 1 + len(report.retried)
        if crashes(report.id) or hangs(report.id):
            # Its server failed its first attempts: flagged, it ran again, and it ends as its last
            # attempt did (checked above: flagged exactly when that one met the infrastructure).
            assert any(e.get("termination", {}).get("reason") == "tool_lost" for e in report.retried), report
    assert any("TOOL_TIMEOUT" in r.errors for r in reports.values() if hangs(r.id))
    clean = [r for r in reports.values() if not (crashes(r.id) or hangs(r.id))]
    # A clean episode fails only when the outage (its server down, then its breaker open) or a
    # lost runner met both its attempts — and says so; most end ok.
    for report in (r for r in clean if r.status != "ok"):
        assert set(report.errors) <= {"WORKER_CRASHED", "BREAKER_OPEN"} and report.termination["infra"], report
    assert any(r.retried and any(e.get("runner_lost") for e in r.retried) for r in reports.values())  # the kill
    # The outage: a breaker opened, and closed once the server was back (later failures may
    # open one again near the end: the run ends whatever state it is in).
    tool_breakers = [b for b in history if b["kind"] == "tool" and b["name"] == "svc"]
    assert tool_breakers and tool_breakers[0]["closed_at"] is not None, history


STRETCH_S = 1.5  # the endpoint answers 503 this long after its first request


def test_an_endpoint_that_answers_503_for_a_stretch_is_flagged_retried_broken_off_and_masked(ray_cluster, tmp_path):
    import json
    import threading

    from dsh_actors.agent import ModelConfig
    from dsh_actors.agent.scripted import ScriptedServer, reply
    from dsh_actors.eval.export import export_run
    from dsh_actors.eval.job import run_eval

    served: list[tuple[float, int, str]] = []  # (when, status, task) of each request: what happened, from outside
    lock = threading.Lock()

    def respond(request):
        task = next(m["content"] for m in request["messages"] if m["role"] == "user")
        with lock:
            now = time.monotonic()
            first = served[0][0] if served else now
            status = 503 if now - first < STRETCH_S else 200
            served.append((now, status, task))
        return reply(status=503) if status == 503 else reply("4")

    count = 300
    episodes = tmp_path / "tasks.jsonl"
    episodes.write_text("\n".join(json.dumps({"id": f"t-{i:03d}", "task": f"What is 2+2? (t-{i:03d})",
                                              "scorer": {"kind": "exact", "expected": "4"}}) for i in range(count)))
    with ScriptedServer(respond) as server:
        config = ModelConfig(model="scripted-7b", base_url=server.base_url, max_retries=0, breaker_threshold=3,
                             breaker_pause_s=0.3)
        summary = asyncio.run(run_eval([episodes], tmp_path / "out", progress=None, model=config, retry_infra=2,
                                       environments="host", concurrency=64))
    per = {e["id"]: e for e in summary["per_episode"]}
    reports = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "out" / "reports").glob("*.json")}
    assert len(per) == count and sorted(reports) == sorted(per)
    refused = sum(status == 503 for _, status, _ in served)
    assert refused > 0 and sum(status == 200 for _, status, _ in served) == sum(e["status"] == "ok" for e in per.values())
    for episode in per.values():
        reason, infra = episode["termination"]["reason"], episode["termination"]["infra"]
        assert reason in ("final", "endpoint_unavailable"), episode
        assert infra == (reason == "endpoint_unavailable") and (episode["status"] == "ok") == (not infra), episode
        # Only the endpoint's failures ran again, each attempt counted.
        retried = reports[episode["id"]]["retried"]
        assert episode["attempts"] == 1 + len(retried), episode
        assert all(r["termination"]["reason"] == "endpoint_unavailable" for r in retried), episode
        # Each retry waited its pause (at least half of 1 s, 2 s… : jittered down by up to half)
        # — a retry at once would meet the same outage (or the open breaker) again.
        asked = sorted(when for when, _, task in served if task.endswith(f"({episode['id']})"))
        assert all(later - earlier >= 0.5 * 2 ** k - 0.05 for k, (earlier, later) in enumerate(zip(asked, asked[1:]))), \
            (episode["id"], asked)
    saved = [e for e in per.values() if e["attempts"] > 1 and e["status"] == "ok"]
    assert saved, "some episodes that met the stretch should have been saved by a retry"
    assert summary["episodes_infra"] == sum(e["termination"]["infra"] for e in per.values())
    # The endpoint's breaker opened during the stretch and closed after it (on each node that saw it).
    endpoint = [b for b in summary["breakers"] if b["kind"] == "endpoint"]
    assert endpoint and all(b["closed_at"] is not None for b in endpoint[:1]), summary["breakers"]
    # The export carries the weight a trainer applies: 0 exactly for the infrastructure's ends.
    rows = export_run(tmp_path / "out", tmp_path / "rows.jsonl")
    weights = {r["id"]: r["weight"] for r in map(json.loads, (tmp_path / "rows.jsonl").read_text().splitlines())}
    assert rows == count and weights == {i: (0.0 if e["termination"]["infra"] else 1.0) for i, e in per.items()}
