"""Episodes with a model in the loop against a scripted Chat Completions server.

Run: ``python benchmarks/agent_loop.py [--episodes 1000] [--concurrency 200]``. Each
episode's model answers after 50 ms: first with one ``read_file`` call, then with the final
answer (scored). Side by side in one run: the same requests made by the model client
alone (no harness: no scope, log, tool call or prompt assembly) — the most this node can
do — and the batch job's episodes. Reports episodes/s and the model's share of wall
time. Goal: ≥ 90 % of wall time is model time at 200 concurrent episodes.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import (CpuByProcess, _kind, machine_cpu_s, process_cpu_s, processes_cpu_s, table,  # noqa: E402
                      write_section)

from dsh_actors.agent import ChatModel, ModelConfig  # noqa: E402
from dsh_actors.agent.scripted import ScriptedServer, reply  # noqa: E402
from dsh_actors.eval.job import DEFAULT_SYSTEM, run_eval  # noqa: E402
from dsh_actors.runtime import ensure_ray  # noqa: E402
from dsh_actors.tools import reference_tools  # noqa: E402

LATENCY_S = 0.05


def respond(request):
    turn = sum(1 for m in request["messages"] if m["role"] == "assistant")
    if turn == 0:
        return reply("", ("read_file", {"path": "notes.txt"}), delay_s=LATENCY_S)
    return reply("done", delay_s=LATENCY_S)


def serve(port_out, stop, served) -> None:
    """The scripted model in a process of its own (not competing with the driver's GIL);
    ``served`` counts the requests it answered."""
    def counted(request):
        with served.get_lock():
            served.value += 1
        return respond(request)

    with ScriptedServer(counted) as server:
        port_out.put(server.port)
        stop.wait()


class ServerProcess:
    def __enter__(self):
        self.ports, self.stop = multiprocessing.Queue(), multiprocessing.Event()
        self.served = multiprocessing.Value("l", 0)
        self.process = multiprocessing.Process(target=serve, args=(self.ports, self.stop, self.served), daemon=True)
        self.process.start()
        self.base_url = f"http://127.0.0.1:{self.ports.get(timeout=60)}/v1"
        return self

    def __exit__(self, *_):
        self.stop.set()
        self.process.join(30)


async def client_alone(config: ModelConfig, count: int, concurrency: int) -> float:
    """The episodes' requests made by the model client alone: the same system prompt,
    tools and two turns (the second carrying the tool call and a result), nothing else.
    Returns the wall seconds."""
    model = ChatModel(config)
    tools = [d.schema() for d in reference_tools(tempfile.gettempdir())]
    gate = asyncio.Semaphore(concurrency)

    async def episode(i: int) -> None:
        async with gate:
            history: list[dict] = [{"role": "user", "content": f"Read notes.txt and say done ({i})."}]
            turn = await model.complete(DEFAULT_SYSTEM, history, tools)
            call = turn.tool_calls[0]
            history += [{"role": "assistant", "content": "", "tool_calls": [
                            {"call_id": call.id, "name": call.name, "arguments": call.arguments}]},
                        {"role": "tool", "call_id": call.id, "content": [{"type": "text", "text": "notes"}]}]
            await model.complete(DEFAULT_SYSTEM, history, tools)

    start = time.monotonic()
    await asyncio.gather(*(episode(i) for i in range(count)))
    wall = time.monotonic() - start
    await model.close()
    return wall


def main(count: int, concurrency: int, by_process: bool = False, rounds: int = 3) -> str:
    ensure_ray()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as folder, ServerProcess() as server:
        path = Path(folder) / "tasks.jsonl"
        path.write_text("".join(json.dumps({"id": f"t{i}", "task": f"Read notes.txt and say done ({i}).",
                                            "scorer": {"kind": "exact", "expected": "done"}}) + "\n"
                                for i in range(count)))
        config = ModelConfig(model="scripted", base_url=server.base_url, concurrency=concurrency)

        def cpu() -> float:  # every process but the model server's
            return machine_cpu_s() - process_cpu_s(server.process.pid)

        def steady(first: int, last: int) -> tuple[float, list[tuple[str, float]]]:
            """CPU ms per model request while the server answers its ``first``-th to its
            ``last``-th request: the job running, its start and end left out; with where it went."""
            readings = []
            for mark in (first, last):
                while server.served.value < mark:
                    time.sleep(0.01)
                readings.append((server.served.value, cpu(), processes_cpu_s()))
            (n0, c0, p0), (n1, c1, p1) = readings
            spent: dict[str, float] = {}
            for pid, (title, seconds) in p1.items():
                if pid in p0 and pid != server.process.pid:
                    spent[_kind(title)] = spent.get(_kind(title), 0.0) + seconds - p0[pid][1]
            per_turn = 1000 / (n1 - n0)
            return (c1 - c0) * per_turn, sorted(((k, v * per_turn) for k, v in spent.items() if v > 0), key=lambda kv: -kv[1])

        turns = count * 2

        def measured(run: Callable[[], Any]) -> tuple[Any, float, float, float, list[tuple[str, float]]]:
            """``run()``'s value, wall s, CPU ms per model turn over the run and while running."""
            start, before, served = time.monotonic(), cpu(), server.served.value
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                window = pool.submit(steady, served + turns // 4, served + turns * 3 // 4)
                value = run()
                wall, spent = time.monotonic() - start, cpu() - before
                steady_ms, by_kind = window.result()
            return value, wall, spent * 1000 / turns, steady_ms, by_kind

        alones, jobs = [], []
        for round_ in range(rounds):  # taken in turn, so a machine that slows moves both rows alike
            alones.append(measured(lambda: asyncio.run(client_alone(config, count, concurrency))))
            processes = CpuByProcess() if by_process else contextlib.nullcontext()  # its reads of /proc cost CPU
            with processes:
                jobs.append(measured(lambda: asyncio.run(run_eval(
                    [path], Path(folder) / f"out-{round_}", concurrency=concurrency, progress=None, model=config))))
            if by_process:  # where the job's CPU went: in all, per episode; while it ran, per model turn
                for kind, seconds in processes.spent():
                    print(f"{seconds * 1000 / count:8.2f} ms/episode in all  {kind}")
                for kind, ms in jobs[-1][4]:
                    print(f"{ms:8.2f} ms/turn while running  {kind}")
    for summary in (job[0] for job in jobs):
        assert summary["episodes_failed"] == 0 and summary["model"]["success_rate"] == 1.0, summary["per_episode"][:2]
    at_once = min(concurrency, count)  # episode-seconds per second of wall

    def share(seconds: float, of_wall: float) -> str:
        return f"{seconds / (of_wall * at_once) * 100:.1f}%"

    def median(values: list[float]) -> float:
        return statistics.median(values)

    own = count * 2 * LATENCY_S  # the model's own time: two 50 ms turns an episode
    alone = median([a[1] for a in alones])
    wall = median([j[1] for j in jobs])
    model_s = median([j[0]["model"]["model_s"] for j in jobs])
    whole = [j[2] / a[2] for a, j in zip(alones, jobs)]
    running = [j[3] / a[3] for a, j in zip(alones, jobs)]
    rows = [["the model client alone (no harness)", f"{alone:.1f}", f"{count / alone:.1f}", share(own, alone), "—",
             f"{median([a[2] for a in alones]):.2f}", "1.00×", f"{median([a[3] for a in alones]):.2f}", "1.00×"],
            ["dsh-actors episodes (on runners)", f"{wall:.1f}", f"{count / wall:.1f}", share(own, wall),
             share(model_s, wall), f"{median([j[2] for j in jobs]):.2f}",
             f"{median(whole):.2f}× ({min(whole):.2f}–{max(whole):.2f})", f"{median([j[3] for j in jobs]):.2f}",
             f"{median(running):.2f}× ({min(running):.2f}–{max(running):.2f})"]]
    return table([f"{count:,} episodes, {min(concurrency, count)} at once (median of {rounds} rounds)", "wall s", "episodes/s",
                  "model's own time, share of wall", "requests as the client timed them, share of wall",
                  "CPU ms per model turn, whole run (all but the model server)", "vs the client alone",
                  "CPU ms per model turn, while running", "vs the client alone"], rows) + (
        f"\n\nEach episode: two model turns of 50 ms (a `read_file` call, then the answer, scored), one tool call, "
        "its scope, workspace copy and session log; the scripted model runs in a process of its own. The first "
        "row makes the same requests (same prompt, tools and history) with the same client and nothing else. "
        "*Model's own time*: 2 × 50 ms per episode, over wall × episodes at once; *as the client timed them*: "
        "each request from send to parsed answer, which includes waiting for the client's own event loop. "
        f"Ideal wall: {own / at_once:.1f} s. Goal: ≥ 90 % at 200 at once. *CPU per model turn*: the busy CPU of "
        "every process on the machine (`/proc/stat`) minus the model server's (`/proc/PID/stat`), over the run, "
        "per model request — the episode's whole harness (runners, executors, scope hosts, session writer, "
        "driver) against the bare client making the same requests: over the whole run (the job's start, its "
        "actors made, and its end included), and *while running* (from the server's 25th to its 75th percentile "
        "of requests: what each further episode costs). The rows are taken in turn, round by round; each ratio is "
        "the median of the rounds' own ratios (lowest–highest). Goal: ≤ 3× the client alone.")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--by-process", action="store_true", help="print where the job's CPU went, by process")
    options = parser.parse_args()
    text = main(options.episodes, options.concurrency, options.by_process, options.rounds)
    write_section("agent_loop", "A model in the loop: scripted episodes against the bare client", text)
    print(text)
