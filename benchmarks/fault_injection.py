"""Faults injected into a batch job, and what its reports say about them.

Run: ``python benchmarks/fault_injection.py [--episodes 1000]``. On a local Ray of its own:

- **Flags.** 1,000 scripted episodes (two calls each of a tool that talks to a "server") and
  100 task episodes (one model turn each, against a scripted endpoint on loopback). Injected,
  on each episode's first attempt only, by its number: the tool's server dies under the call
  (5 %, ``WORKER_CRASHED``), the call hangs past the episode's 2 s deadline (2 %), the endpoint
  answers 503 (10 % of the task episodes); and one runner is SIGKILLed once 300 calls have run.
  Each injection is written down where it happens (a marker file, the endpoint's own log):
  the table compares those with the reports' ``termination``, per reason, with
  ``--retry-infra 0`` (what is flagged, what is missed, what is flagged falsely) and
  ``--retry-infra 1`` (the flagged episodes saved by their retry).
- **Breakers.** 300 episodes of one call each to a tool whose server hangs (past the 2 s
  deadline) for its first 10 s: the same job with the tool's breaker (5 in a row, 2 s pause)
  and without it — calls that waited out their deadline, calls failed at once, the job's wall
  time and the tool-seconds spent waiting.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import table, write_section  # noqa: E402

import ray  # noqa: E402

from dsh_actors import HarnessError, define_tool, text_block  # noqa: E402
from dsh_actors.agent import ModelConfig  # noqa: E402
from dsh_actors.agent.scripted import ScriptedServer, reply  # noqa: E402
from dsh_actors.eval.job import run_episodes  # noqa: E402
from dsh_actors.eval.runners import RUNNER_PREFIX  # noqa: E402
from dsh_actors.runtime import ensure_ray  # noqa: E402

DEADLINE_S = 2.0
TASKS = 100


def injected(number: int) -> str | None:
    """What a scripted episode's first attempt meets (by its number)."""
    if number % 20 == 3:
        return "crash"
    if number % 50 == 7:
        return "hang"
    return None


def server_tool(marks: Path, outage_s: float = 0.0):
    """The tool: its first call of each attempt writes a marker ``<episode>.<attempt>.<n>``;
    the injection of the episode's first attempt, or (``outage_s``) a hang for every call in
    the first seconds after its first call."""
    where = str(marks)

    async def body(args, ctx):
        episode, n = ctx.agent, int(args["n"])
        attempt = len([p for p in os.listdir(where) if p.startswith(f"{episode}.") and p.endswith(".0")]) + (n == 0)
        Path(where, f"{episode}.{attempt}.{n}").touch()
        if outage_s:
            first = Path(where, "first-call")
            try:
                with open(first, "x") as since:
                    since.write(str(time.time()))
            except FileExistsError:
                pass
            if time.time() - float(first.read_text() or time.time()) < outage_s:
                await asyncio.sleep(30)  # past the deadline: the server hangs
            await asyncio.sleep(0.2)  # the server's usual answer time
            return [text_block("done")]
        fault = injected(int(episode.split("-")[1])) if attempt == 1 and n == 1 else None
        if fault == "crash":
            Path(where, f"{episode}.crash").touch()
            raise HarnessError("the tool's server died under the call", "WORKER_CRASHED")
        if fault == "hang":
            Path(where, f"{episode}.hang").touch()
            await asyncio.sleep(30)
        return [text_block("done")]

    return define_tool(name="svc", description="talks to a server", parameters={"n": {"type": "number"}},
                       execute=body)


def kill_one_runner(job: str, marks: Path, after: int) -> threading.Thread:
    def run() -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and len(os.listdir(marks)) < after:
            time.sleep(0.05)
        for entry in ray.util.list_named_actors(all_namespaces=True):
            if entry["name"].startswith(f"{RUNNER_PREFIX}{job}:"):
                runner = ray.get_actor(entry["name"], namespace=entry["namespace"])
                os.kill(ray.get(runner.pid.remote(), timeout=30), signal.SIGKILL)
                Path(marks.parent, "killed-at").write_text(str(len(os.listdir(marks))))
                return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


async def collect(stream) -> list:
    return [report async for report in stream]


def flags_run(folder: Path, count: int, retry: int) -> list[list[str]]:
    marks = folder / f"marks-{retry}"
    marks.mkdir()
    refused: set[str] = set()  # the task episodes whose first request got a 503
    lock = threading.Lock()

    def respond(request):
        task = next(m["content"] for m in request["messages"] if m["role"] == "user")
        number = int(task.rsplit("#", 1)[1])
        with lock:
            first = task not in refused and number % 10 == 4
            if first:
                refused.add(task)
        return reply(status=503) if first else reply("4")

    scripted = [{"id": f"ep-{i:04d}", "limits": {"tool_timeout_s": DEADLINE_S},
                 "turns": [{"calls": [{"name": "svc", "arguments": {"n": n}}]} for n in range(2)]} for i in range(count)]
    tasks = [{"id": f"task-{i:03d}", "task": f"What is 2+2? #{i}", "scorer": {"kind": "exact", "expected": "4"}}
             for i in range(TASKS)]
    job = f"faults-{retry}-{os.getpid()}"
    killer = kill_one_runner(job, marks, 300)
    with ScriptedServer(respond) as server:
        model = ModelConfig(model="scripted-7b", base_url=server.base_url, max_retries=0)
        started = time.monotonic()
        reports = asyncio.run(collect(run_episodes(
            scripted + tasks, name=job, tools=[server_tool(marks)], environments="host", in_flight=128,
            retry_infra=retry, model=model)))
        wall = time.monotonic() - started
    killer.join(timeout=1)
    crashed = {p.name.split(".")[0] for p in marks.glob("*.crash")}
    hung = {p.name.split(".")[0] for p in marks.glob("*.hang")}
    refused_ids = {f"task-{int(t.rsplit('#', 1)[1]):03d}" for t in refused}
    lost = {r.id for r in reports if r.termination["reason"] == "runner_lost"
            or any(e.get("runner_lost") for e in r.retried)}
    by_id = {r.id: r for r in reports}

    def first_end(report) -> dict:
        """How the episode's first attempt ended (its report, or its first retried entry)."""
        return report.retried[0].get("termination") or {"reason": "runner_lost", "infra": True} \
            if report.retried else report.termination

    rows = []
    # A fault met by an attempt the runner's death then ended is the runner's (its row alone).
    for name, ids, reason in (("tool's server died (WORKER_CRASHED)", crashed - lost, "tool_lost"),
                              ("call hung past its deadline (TOOL_TIMEOUT)", hung - lost, "tool_lost"),
                              ("endpoint answered 503", refused_ids - lost, "endpoint_unavailable"),
                              ("runner SIGKILLed", lost, "runner_lost")):
        flagged = sum(1 for i in ids if first_end(by_id[i])["reason"] == reason and first_end(by_id[i])["infra"])
        saved = sum(1 for i in ids if by_id[i].status == "ok")
        rows.append([f"--retry-infra {retry}", name, str(len(ids)), str(flagged), str(len(ids) - flagged),
                     str(saved) if retry else "—"])
    faulted = crashed | hung | refused_ids | lost
    false_flags = sum(1 for r in reports if r.id not in faulted and r.termination["infra"])
    clean = sum(1 for r in reports if r.id not in faulted)
    rows.append([f"--retry-infra {retry}", f"no fault injected ({clean} episodes)", "0", str(false_flags), "—",
                 "—"])
    print(f"retry {retry}: {len(reports)} reports in {wall:.1f} s; {Counter(r.termination['reason'] for r in reports)}",
          flush=True)
    return rows


BREAKER_EPISODES, OUTAGE_S = 600, 5.0


def breaker_run(folder: Path, breaker: tuple[int, float], label: str) -> list[str]:
    marks = folder / f"marks-breaker-{len(os.listdir(folder))}"
    marks.mkdir()
    episodes = [{"id": f"ep-{i:04d}", "limits": {"tool_timeout_s": DEADLINE_S},
                 "turns": [{"calls": [{"name": "svc", "arguments": {"n": 0}}]}]} for i in range(BREAKER_EPISODES)]
    started = time.monotonic()
    reports = asyncio.run(collect(run_episodes(episodes, name=f"breaker-{len(os.listdir(folder))}-{os.getpid()}",
                                               tools=[server_tool(marks, outage_s=OUTAGE_S)], environments="host",
                                               in_flight=64, breaker=breaker, retry_infra=3)))
    wall = time.monotonic() - started
    ends = [e.get("termination", {}) for r in reports for e in r.retried] + [r.termination for r in reports]
    ok = sum(r.status == "ok" for r in reports)
    waited = sum(1 for _ in marks.iterdir()) - 1 - ok  # every call the server saw, less the answered ones
    errors = Counter(code for r in reports for code, n in r.errors.items() for _ in range(n))
    print(label, errors, Counter(e.get("reason") for e in ends), flush=True)
    return [label, str(len(reports)), str(sum(len(r.retried) for r in reports)), str(waited),
            str(ok), f"{wall:.1f}", f"{waited * DEADLINE_S:.0f}"]


def main(count: int) -> None:
    ensure_ray()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as folder:
        rows = flags_run(Path(folder), count, 0) + flags_run(Path(folder), count, 1)
        breakers = [breaker_run(Path(folder), (5, 2.0), "with its breaker (5 in a row, 2 s pause)"),
                    breaker_run(Path(folder), (10**9, 2.0), "without (a threshold never reached)")]
    body = table(["job", "fault", "episodes injected", "flagged with its reason", "missed", "ok after retry"], rows)
    body += (f"\n\n{count:,} scripted episodes (two tool calls each) and {TASKS} task episodes in one job, 128 at once, "
             "on one node; each fault on the episode's first attempt only, written down where it happened (the "
             "tool's marker files, the endpoint's log of the requests it refused, the episodes the killed runner "
             "held). \"Flagged\" is the first attempt's `termination` (with retries, its entry in `retried`): the "
             "reason the fault should give and `infra: true`. \"No fault injected\" counts the episodes that met none "
             "and were flagged anyway (false flags).\n\n")
    body += table([f"{BREAKER_EPISODES} episodes, `--retry-infra 3`, the tool's server hanging for its first "
                   f"{OUTAGE_S:g} s", "episodes", "attempts the infrastructure ended", "calls that waited out the 2 s "
                   "deadline", "episodes ok", "job wall s", "tool-seconds spent waiting"], breakers)
    body += (f"\n\n{BREAKER_EPISODES} episodes of one call each (the server answers in 0.2 s once it is back), 64 at "
             "once. The breaker is per tool and node: once 5 calls in a row have failed on infrastructure, calls fail at "
             "once (`BREAKER_OPEN`, marked infra) until a probe after its pause succeeds; the episodes it failed run "
             "again after their retry pause. Without it every call of the outage waits out its deadline. Calls that "
             "waited are counted from outside: every call the server saw, less the answered ones.")
    write_section("fault_injection", "Faults injected: flagged, missed, saved by retries, cut short by breakers", body)
    print(body)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=1000)
    main(parser.parse_args().episodes)
