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
import json
import multiprocessing
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import machine_cpu_s, process_cpu_s, table, write_section  # noqa: E402

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


def serve(port_out, stop) -> None:
    """The scripted model in a process of its own (not competing with the driver's GIL)."""
    with ScriptedServer(respond) as server:
        port_out.put(server.port)
        stop.wait()


class ServerProcess:
    def __enter__(self):
        self.ports, self.stop = multiprocessing.Queue(), multiprocessing.Event()
        self.process = multiprocessing.Process(target=serve, args=(self.ports, self.stop), daemon=True)
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


def main(count: int, concurrency: int) -> str:
    ensure_ray()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as folder, ServerProcess() as server:
        path = Path(folder) / "tasks.jsonl"
        path.write_text("".join(json.dumps({"id": f"t{i}", "task": f"Read notes.txt and say done ({i}).",
                                            "scorer": {"kind": "exact", "expected": "done"}}) + "\n"
                                for i in range(count)))
        config = ModelConfig(model="scripted", base_url=server.base_url, concurrency=concurrency)

        def cpu() -> float:  # every process but the model server's
            return machine_cpu_s() - process_cpu_s(server.process.pid)

        before = cpu()
        alone = asyncio.run(client_alone(config, count, concurrency))
        alone_cpu = cpu() - before
        start, before = time.monotonic(), cpu()
        summary = asyncio.run(run_eval([path], Path(folder) / "out", concurrency=concurrency, progress=None,
                                       model=config))
        wall, job_cpu = time.monotonic() - start, cpu() - before
    model = summary["model"]
    assert summary["episodes_failed"] == 0 and model["success_rate"] == 1.0, summary["per_episode"][:2]
    at_once = min(concurrency, count)  # episode-seconds per second of wall

    def share(seconds: float, of_wall: float) -> str:
        return f"{seconds / (of_wall * at_once) * 100:.1f}%"

    own = count * 2 * LATENCY_S  # the model's own time: two 50 ms turns an episode
    turns = count * 2
    alone_ms, job_ms = alone_cpu * 1000 / turns, job_cpu * 1000 / turns
    rows = [["the model client alone (no harness)", f"{alone:.1f}", f"{count / alone:.1f}", share(own, alone), "—",
             f"{alone_ms:.2f}", "1.00×"],
            ["dsh-actors episodes (on runners)", f"{wall:.1f}", f"{count / wall:.1f}", share(own, wall),
             share(model["model_s"], wall), f"{job_ms:.2f}", f"{job_ms / alone_ms:.2f}×"]]
    return table([f"{count:,} episodes, {min(concurrency, count)} at once", "wall s", "episodes/s",
                  "model's own time, share of wall", "requests as the client timed them, share of wall",
                  "CPU ms per model turn (all but the model server)", "vs the client alone"], rows) + (
        f"\n\nEach episode: two model turns of 50 ms (a `read_file` call, then the answer, scored), one tool call, "
        "its scope, workspace copy and session log; the scripted model runs in a process of its own. The first "
        "row makes the same requests (same prompt, tools and history) with the same client and nothing else. "
        "*Model's own time*: 2 × 50 ms per episode, over wall × episodes at once; *as the client timed them*: "
        "each request from send to parsed answer, which includes waiting for the client's own event loop. "
        f"Ideal wall: {own / at_once:.1f} s. Goal: ≥ 90 % at 200 at once. *CPU per model turn*: the busy CPU of "
        "every process on the machine (`/proc/stat`) minus the model server's (`/proc/PID/stat`), over the run, "
        "per model request — the episode's whole harness (runners, executors, scope hosts, session writer, "
        "driver) against the bare client making the same requests. Goal: ≤ 3× the client alone.")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=200)
    options = parser.parse_args()
    text = main(options.episodes, options.concurrency)
    write_section("agent_loop", "A model in the loop: 1,000 scripted episodes", text)
    print(text)
