"""Episodes with a model in the loop against a scripted Chat Completions server.

Run: ``python benchmarks/agent_loop.py [--episodes 1000] [--concurrency 200]``. Each
episode's model answers after 50 ms: first with one ``read_file`` call, then with the final
answer (scored). Reports episodes/s and how the episodes' time splits: the model's own
time, tool time, and the rest (everything else the episode waits for: its scope, log,
steps, the driver's CPU). Goal: ≥ 90 % of wall time is model time at 200 concurrent
episodes.
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
from _results import table, write_section  # noqa: E402

from dsh_actors.agent import ModelConfig  # noqa: E402
from dsh_actors.agent.scripted import ScriptedServer, reply  # noqa: E402
from dsh_actors.eval.job import run_eval  # noqa: E402
from dsh_actors.runtime import ensure_ray  # noqa: E402

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


def main(count: int, concurrency: int) -> str:
    ensure_ray()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as folder, ServerProcess() as server:
        path = Path(folder) / "tasks.jsonl"
        path.write_text("".join(json.dumps({"id": f"t{i}", "task": f"Read notes.txt and say done ({i}).",
                                            "scorer": {"kind": "exact", "expected": "done"}}) + "\n"
                                for i in range(count)))
        config = ModelConfig(model="scripted", base_url=server.base_url, concurrency=concurrency)
        start = time.monotonic()
        summary = asyncio.run(run_eval([path], Path(folder) / "out", concurrency=concurrency, progress=None,
                                       model=config))
        wall = time.monotonic() - start
    model = summary["model"]
    assert summary["episodes_failed"] == 0 and model["success_rate"] == 1.0, summary["per_episode"][:2]
    at_once = min(concurrency, count)
    share = model["model_s"] / (wall * at_once) * 100  # of the episode-seconds the run had room for
    rows = [[f"{count:,}", str(concurrency), f"{wall:.1f}", f"{count / wall:.1f}", f"{model['model_s']:.0f}",
             f"{model['tool_s']:.0f}", f"{share:.1f}%", f"{100 - share:.1f}%",
             f"{count * 2 * LATENCY_S / at_once:.1f}"]]
    return table(["episodes", "at once", "wall s", "episodes/s", "model s (sum)", "tool s (sum)",
                  "model share of wall", "outside the model", "ideal wall s"], rows) + (
        "\n\nEach episode: two model turns of 50 ms (a `read_file` call, then the answer, scored), one tool call, "
        "its scope, workspace copy and session log; the scripted model runs in a process of its own. *Model "
        "share* is the model's time (as the client measured each request) summed over episodes, divided by "
        "wall × episodes at once. Goal: ≥ 90 % at 200 at once.")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=200)
    options = parser.parse_args()
    text = main(options.episodes, options.concurrency)
    write_section("agent_loop", "A model in the loop: 1,000 scripted episodes", text)
    print(text)
