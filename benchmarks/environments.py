"""Episode environments (the native backend): how soon one is ready, what a command costs.

Run: ``python benchmarks/environments.py`` (as root, or any user the backend accepts);
``--quick`` for fewer rounds. Writes the ``environments`` section of RESULTS.md:

- **start**: :meth:`NativeBackend.start` back to back (each environment kept alive), and
  1,000 started at once (``max_starting`` queues them): how long until all are ready, per
  environment, and each start's own wait. Goal: ≤ 10 ms p50 back to back.
- **command**: ``bash -c true`` through ``connect(address).run(...)`` from another process
  than the backend's, next to a bare ``asyncio.create_subprocess_exec("bash", "-c", ...)``
  (output piped and read) from that same process, rounds interleaved, with 1 and 32 in
  flight. Goal: ≤ 1.3× bare at p50 and p99. At 32 in flight also 32 lanes each in an
  environment of its own, beside 32 lanes each spawning bare from a process of its own.
- **bwrap** and **runc**, for reference, only where they are installed (neither is a
  dependency; ``apt-get install bubblewrap runc``): bwrap has no way into a sandbox that
  runs, so its row is a new sandbox per command (which is also what one costs to start);
  runc starts a container (``runc run -d``, a bundle over the host's ``/usr`` and ``/etc``
  read-only) and runs each command in it (``runc exec``). crun and podman (over crun) refuse
  a host with hybrid cgroups, as these machines have.
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

    async def lane(number: int, count: int) -> None:
        for _ in range(count):
            start = time.perf_counter()
            await call(number)
            samples.append((time.perf_counter() - start) * 1e3)

    await asyncio.gather(*(lane(i, total // in_flight) for i in range(in_flight)))
    return samples


PER_LANE = ("bare, a process per lane", "an environment per lane")

BWRAP_ARGS = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp", "--unshare-all",
              "--die-with-parent", "bash", "-c", "true"]


async def bare_worker() -> None:
    """A lane's own process for *bare, a process per lane*: runs ``bare("true")`` for each
    line on its stdin and answers a line when it has ended."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.readline():
        await bare("true")
        sys.stdout.write("\n")
        sys.stdout.flush()


class BareLane:
    """One lane's bare worker process (:func:`bare_worker`), asked over its pipes."""

    async def start(self) -> "BareLane":
        self.process = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--bare-worker", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        return self

    async def run(self) -> None:
        self.process.stdin.write(b"\n")  # type: ignore[union-attr]
        await self.process.stdout.readline()  # type: ignore[union-attr]

    async def close(self) -> None:
        self.process.stdin.close()  # type: ignore[union-attr]
        await self.process.wait()


async def client(address: str, spread: list[str], rounds: int, bwrap: str | None,
                 runc: tuple[str, str] | None) -> dict[str, dict[str, list[float]]]:
    env, envs = connect(address), [connect(a) for a in spread]
    lanes = [await BareLane().start() for _ in spread]
    # Each way is a call of lane ``i``: one environment for every lane, or (a fleet's case)
    # an environment of its own per lane, as 32 episodes on a node each running a command;
    # its like-for-like baseline is bare commands spawned by a process of each lane's own.
    ways = {"bare": lambda i: bare("true"), "environment": lambda i: env.run("true", timeout_s=30),
            "bare, a process per lane": lambda i: lanes[i].run(),
            "an environment per lane": lambda i: envs[i].run("true", timeout_s=30)}
    if bwrap:
        ways["bwrap"] = lambda i: _exec(bwrap, BWRAP_ARGS)
    if runc:
        ways["runc exec"] = lambda i: _exec(runc[0], ["exec", runc[1], "bash", "-c", "true"])
    out: dict[str, dict[str, list[float]]] = {}
    for in_flight, total in ((1, rounds), (32, rounds * 4)):
        for name, call in ways.items():
            if name in PER_LANE and in_flight == 1:
                continue  # (one lane: the rows above)
            await measure(call, in_flight, min(total, 64))  # warm-up
        for _ in range(4):  # interleaved, so a noisy neighbour hurts each alike
            for name, call in ways.items():
                if name in PER_LANE and in_flight == 1:
                    continue
                out.setdefault(f"{name}@{in_flight}", {}).setdefault("ms", []).extend(
                    await measure(call, in_flight, total // 4))
    for each in (env, *envs, *lanes):
        await each.close()
    return out


async def _exec(path: str, args: list[str]) -> None:
    process = await asyncio.create_subprocess_exec(path, *args, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.STDOUT)
    await process.stdout.read()  # type: ignore[union-attr]
    await process.wait()


# --- runc, for reference ----------------------------------------------------------------------

def runc_bundle(runc: str, base: str) -> str:
    """An OCI bundle whose container sees the host's ``/usr`` and ``/etc`` read-only, a
    tmpfs ``/tmp``, and runs ``sleep infinity`` (commands go in with ``runc exec``)."""
    bundle = os.path.join(base, "runc-bundle")
    rootfs = os.path.join(bundle, "rootfs")
    for folder in ("usr", "etc", "tmp", "proc", "dev", "sys"):
        os.makedirs(os.path.join(rootfs, folder), exist_ok=True)
    for link in ("bin", "lib", "lib64", "sbin"):
        if os.path.islink(f"/{link}"):
            os.symlink(os.readlink(f"/{link}"), os.path.join(rootfs, link))
    subprocess.run([runc, "spec"], cwd=bundle, check=True)
    config = json.loads(Path(bundle, "config.json").read_text())
    config["root"] = {"path": "rootfs", "readonly": True}
    config["process"].update(terminal=False, args=["sleep", "infinity"])
    config["mounts"] = [m for m in config["mounts"] if m["destination"] != "/sys/fs/cgroup"] + [
        {"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]},
        {"destination": "/etc", "type": "bind", "source": "/etc", "options": ["rbind", "ro"]},
        {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev"]}]
    Path(bundle, "config.json").write_text(json.dumps(config))
    return bundle


def runc_starts(runc: str, bundle: str, names: list[str]) -> list[float]:
    """``runc run -d`` back to back, each container kept running (its ms)."""
    samples = []
    for name in names:
        start = time.perf_counter()
        subprocess.run([runc, "run", "-d", "--bundle", bundle, name], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, check=True)
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def runc_delete(runc: str, names: list[str]) -> None:
    for name in names:
        subprocess.run([runc, "delete", "-f", name], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


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
    bwrap, runc = shutil.which("bwrap"), shutil.which("runc")
    containers = [f"dsh-bench-{os.getpid()}-{i}" for i in range(20 if quick else 50)] if runc else []
    runc_samples: list[float] = []
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
        await asyncio.sleep(10)  # the kernel's teardown of 1,000 environments' cgroups finishes before more is timed
        if runc:
            runc_samples = runc_starts(runc, runc_bundle(runc, base), containers)
        target = await backend.start("bench", EnvSpec(workspace=base))
        spread = [await backend.start(f"lane{i}", EnvSpec(workspace=os.path.join(base, f"seq{i}"))) for i in range(32)]
        done = subprocess.run([sys.executable, __file__, "--client", target.address, "--rounds", str(rounds),
                               "--spread", ",".join(e.address for e in spread),
                               *(["--bwrap", bwrap] if bwrap else []),
                               *(["--runc", runc, containers[0]] if runc else [])], capture_output=True, timeout=1800)
        if done.returncode != 0:
            raise RuntimeError(done.stderr.decode())
        commands = json.loads(done.stdout)
    finally:
        if runc:
            runc_delete(runc, containers)
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
    if runc_samples:
        p50, p99 = quantiles(runc_samples)
        start_rows.append(["runc `run -d`, back to back (each kept running)", str(len(runc_samples)), f"{p50:.1f}",
                           f"{p99:.1f}", "—"])
    if bwrap:
        p50, p99 = quantiles(commands["bwrap@1"]["ms"])
        start_rows.append(["bwrap: a sandbox that runs `bash -c true` (its command row below)",
                           str(len(commands["bwrap@1"]["ms"])), f"{p50:.1f}", f"{p99:.1f}", "—"])
    command_rows = []
    for in_flight in (1, 32):
        for name in ("bare", "environment", *PER_LANE, "bwrap", "runc exec"):
            key = f"{name}@{in_flight}"
            if key not in commands:
                continue
            baseline = "bare, a process per lane" if name in PER_LANE else "bare"
            bare_p50, bare_p99 = quantiles(commands[f"{baseline}@{in_flight}"]["ms"])
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
        "At 32 in flight, *environment* runs all 32 lanes' commands in one environment (it keeps a spawner per "
        "command in flight, each parked in its command's tracking cgroup, so no spawner moves between cgroups: "
        "with one spawner moving between the slots of overlapping commands, this row's p99 read 1.4-1.7× in "
        "earlier runs), *an environment per lane* runs each "
        "lane in an environment of its own, as a node's 32 episodes each running a command; its ratios are to "
        "*bare, a process per lane* (each lane's commands spawned bare by a process of its own, asked over a pipe "
        "as an environment is over its socket): 32 spawners, not one, so 32 `bash` start at once and share the "
        "two cores, and the slowest of them finish late together; that tail is the kernel's, with or without "
        "walls.",
        "The first command right after a start pays the environment's first cgroup moves (its spawner joining "
        "its cgroups: after an idle spell the first move waits for an RCU grace period, ~8 ms here); after that, "
        "commands one after another, and as many at once as it has spawners, move nothing.",
        ("bwrap is not installed here: no row for it." if not bwrap else
         f"bwrap: `{' '.join(BWRAP_ARGS)}`, a new sandbox per command (bwrap has no way into one that runs)."),
        ("runc is not installed here: no row for it." if not runc else
         "runc: a container over the host's `/usr` and `/etc` read-only and a tmpfs `/tmp` (namespaces as "
         "`runc spec` makes them, no user namespace, no cgroup bounds), each command by `runc exec`. crun (and "
         "podman over it) refuse these hosts' hybrid cgroups (`cgroups in hybrid mode not supported`): no row."),
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
    parser.add_argument("--runc", nargs=2, metavar=("PATH", "CONTAINER"))
    parser.add_argument("--spread", default="")
    parser.add_argument("--bare-worker", action="store_true")
    options = parser.parse_args()
    if options.bare_worker:
        asyncio.run(bare_worker())
    elif options.client:
        print(json.dumps(asyncio.run(client(options.client, [a for a in options.spread.split(",") if a],
                                            options.rounds, options.bwrap,
                                            tuple(options.runc) if options.runc else None))))
    else:
        asyncio.run(main(options.quick))
