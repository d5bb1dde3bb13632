"""Episode environments (the native backend): how soon one is ready, what a command costs.

Run: ``python benchmarks/environments.py`` (as root, or any user the backend accepts);
``--quick`` for fewer rounds. Writes the ``environments`` section of RESULTS.md:

- **start**: :meth:`NativeBackend.start` back to back (each environment kept alive), and
  1,000 started at once (``max_starting`` queues them): how long until all are ready, per
  environment, and each start's own wait. Goal: ≤ 10 ms p50 back to back.
- **command**: ``bash -c true`` through ``connect(address).run(...)`` from another process
  than the backend's, next to a bare ``asyncio.create_subprocess_exec("bash", "-c", ...)``
  (output piped and read) from that same process, rounds interleaved, with 1 and 32 in
  flight. Goal: ≤ 1.3× bare at p50 and p99.
- **bwrap**, for reference, only where it is already installed (it is not a dependency).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent))
from _results import table, write_section  # noqa: E402

from dsh_actors.envs import EnvSpec  # noqa: E402
from dsh_actors.envs.native import NativeBackend, connect  # noqa: E402


def quantiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


# --- the other process: commands, bare and through the environment ---------------------------

async def bare(command: str) -> None:
    process = await asyncio.create_subprocess_exec("bash", "-c", command, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.STDOUT)
    await process.stdout.read()  # type: ignore[union-attr]
    await process.wait()


async def measure(call, in_flight: int, total: int) -> list[float]:
    samples: list[float] = []

    async def lane(count: int) -> None:
        for _ in range(count):
            start = time.perf_counter()
            await call()
            samples.append((time.perf_counter() - start) * 1e3)

    await asyncio.gather(*(lane(total // in_flight) for _ in range(in_flight)))
    return samples


async def client(address: str, rounds: int, bwrap: str | None) -> dict[str, dict[str, list[float]]]:
    env = connect(address)
    ways = {"bare": lambda: bare("true"), "environment": lambda: env.run("true", timeout_s=30)}
    if bwrap:
        args = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--unshare-all",
                "--die-with-parent", "bash", "-c", "true"]
        ways["bwrap"] = lambda: _bwrap(bwrap, args)
    out: dict[str, dict[str, list[float]]] = {}
    for in_flight, total in ((1, rounds), (32, rounds * 4)):
        for name, call in ways.items():
            await measure(call, in_flight, min(total, 64))  # warm-up
        for _ in range(4):  # interleaved, so a noisy neighbour hurts each alike
            for name, call in ways.items():
                out.setdefault(f"{name}@{in_flight}", {}).setdefault("ms", []).extend(
                    await measure(call, in_flight, total // 4))
    await env.close()
    return out


async def _bwrap(path: str, args: list[str]) -> None:
    process = await asyncio.create_subprocess_exec(path, *args, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.STDOUT)
    await process.stdout.read()  # type: ignore[union-attr]
    await process.wait()


# --- the backend's process ------------------------------------------------------------------

async def starts(backend: NativeBackend, base: str, count: int, prefix: str, pause_s: float = 0.0) -> list[float]:
    samples = []
    for i in range(count):
        workspace = os.path.join(base, f"{prefix}{i}")
        os.makedirs(workspace, exist_ok=True)
        await asyncio.sleep(pause_s)  # not timed: an idle spell (the spares are ready again by then)
        start = time.perf_counter()
        await backend.start(f"{prefix}{i}", EnvSpec(workspace=workspace))
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


async def at_once(backend: NativeBackend, base: str, count: int) -> tuple[float, list[float]]:
    for i in range(count):
        os.makedirs(os.path.join(base, f"many{i}"), exist_ok=True)
    waits: list[float] = []

    async def one(i: int) -> None:
        start = time.perf_counter()
        await backend.start(f"many{i}", EnvSpec(workspace=os.path.join(base, f"many{i}")))
        waits.append((time.perf_counter() - start) * 1e3)

    began = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(count)))
    return (time.perf_counter() - began), waits


async def main(quick: bool) -> None:
    rounds = 200 if quick else 1000
    base = tempfile.mkdtemp(prefix="dsh-envs-bench-")
    backend = NativeBackend()
    bwrap = shutil.which("bwrap")
    try:
        await starts(backend, base, 3, "warm")  # the warm parent starts on first use
        for env in list(backend.environments.values()):
            await env.end()
        back_to_back = await starts(backend, base, 50 if quick else 200, "seq")
        for env in list(backend.environments.values()):
            await env.end()
        idle = await starts(backend, base, 20 if quick else 50, "idle", pause_s=0.2)
        for env in list(backend.environments.values()):
            await env.end()
        many = 200 if quick else 1000
        wall_s, waits = await at_once(backend, base, many)
        alive = len(backend.environments)
        end_began = time.perf_counter()
        await asyncio.gather(*(env.end() for env in list(backend.environments.values())))
        end_s = time.perf_counter() - end_began
        target = await backend.start("bench", EnvSpec(workspace=base))
        done = subprocess.run([sys.executable, __file__, "--client", target.address, "--rounds", str(rounds),
                               *(["--bwrap", bwrap] if bwrap else [])], capture_output=True, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(done.stderr.decode())
        commands = json.loads(done.stdout)
    finally:
        await backend.close()
        shutil.rmtree(base, ignore_errors=True)
    b2b, after_idle = quantiles(back_to_back), quantiles(idle)
    waited = quantiles(waits)
    start_rows = [
        ["back to back (each kept alive)", str(len(back_to_back)), f"{b2b[0]:.1f}", f"{b2b[1]:.1f}", "—"],
        ["after 200 ms idle each", str(len(idle)), f"{after_idle[0]:.1f}", f"{after_idle[1]:.1f}", "—"],
        [f"{many} at once (max_starting={backend.max_starting})", f"{alive} ready",
         f"{waited[0]:.0f} (queued)", f"{waited[1]:.0f} (queued)", f"{wall_s * 1e3 / many:.1f}"],
    ]
    command_rows = []
    for in_flight in (1, 32):
        bare_p50, bare_p99 = quantiles(commands[f"bare@{in_flight}"]["ms"])
        for name in ("bare", "environment", "bwrap"):
            key = f"{name}@{in_flight}"
            if key not in commands:
                continue
            p50, p99 = quantiles(commands[key]["ms"])
            command_rows.append([name, str(in_flight), f"{p50:.2f}", f"{p99:.2f}", f"{p50 / bare_p50:.2f}×",
                                 f"{p99 / bare_p99:.2f}×"])
    body = "\n\n".join([
        "Starting environments (`NativeBackend.start`, until ready for commands):",
        table(["how", "environments", "p50 ms", "p99 ms", "ms per environment (all ready / count)"], start_rows),
        f"Ending the {alive} at once took {end_s:.2f} s.",
        "`bash -c true` from another process than the backend's: through `connect(address).run(...)`, and bare "
        "(`asyncio.create_subprocess_exec`, output piped) in that same process, rounds interleaved:",
        table(["way", "in flight", "p50 ms", "p99 ms", "p50 vs bare", "p99 vs bare"], command_rows),
        "The first command right after a start pays the environment's first cgroup moves (its spawner joining "
        "its cgroups: after an idle spell the first move waits for an RCU grace period, ~8 ms here); after that, "
        "commands one after another reuse the spawner's slot and move nothing.",
        ("bwrap is not installed here: no row for it." if not bwrap else
         "bwrap: `--ro-bind / / --dev /dev --proc /proc --tmpfs /tmp --unshare-all --die-with-parent`."),
        f"Walls: {backend.isolation}. Load average when it ended: {os.getloadavg()[0]:.1f} on "
        f"{os.cpu_count()} cores (a shared machine: other work ran meanwhile).",
    ])
    print(body)
    write_section("environments", "Episode environments: start, and a command through one", body)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--client")
    parser.add_argument("--rounds", type=int, default=1000)
    parser.add_argument("--bwrap")
    options = parser.parse_args()
    if options.client:
        print(json.dumps(asyncio.run(client(options.client, options.rounds, options.bwrap))))
    else:
        asyncio.run(main(options.quick))
