"""Session logs: durable appends from many agents, and recovery time against damage size.

Run: ``python benchmarks/session_logs.py``. Side by side in one run:

* fsync-covered appends (policy ``always``) from 1,000 agents' sessions on the node's
  shared writer (group commit) vs one actor per session that fsyncs each append — what
  every agent had before (only 20 of those: 1,000 actors do not fit in this node's memory);
* opening a log after a crash: a torn tail of 16 MB (one frame cut short), a 16 MB
  garbage tail, and damage in the middle of a 16 MB log, next to opening the intact log.
"""

from __future__ import annotations

import asyncio
import os
import struct
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import table, write_section  # noqa: E402

import msgpack  # noqa: E402
import ray  # noqa: E402

from dsh_actors.log import FrameFile, LogCorruptError, check_event  # noqa: E402
from dsh_actors.runtime import ensure_ray  # noqa: E402
from dsh_actors.runtime.session.client import SessionLog  # noqa: E402


@ray.remote(num_cpus=0)
class PerAgentLog:
    """One session's own log actor, each append fsynced before it returns (the old shape)."""

    def __init__(self, path):
        self.file = FrameFile(path, fsync="always")

    def append(self, event):
        return self.file.append(check_event(event))


async def drive(append, agents: int, events: int, in_flight: int) -> float:
    """events/s for ``events`` appends per agent, ``in_flight`` at once in all (that many
    workers, each appending one event after another)."""
    work = iter([(a, n) for n in range(events) for a in range(agents)])

    async def worker() -> None:
        for agent, n in work:
            await append(agent, {"type": "user/message", "content": f"agent {agent} event {n}"})

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(in_flight)))
    return agents * events / (time.perf_counter() - start)


async def appends(folder: Path) -> str:
    rows = []
    tag = time.monotonic_ns()
    for agents, events in ((1000, 10), (100, 50)):
        logs = [SessionLog.open(f"bench-{tag}-{agents}-{a}", str(folder / f"g{agents}-{a}.log")) for a in range(agents)]
        await drive(lambda a, e: logs[a].append(e), agents, 1, 200)  # warm
        rate = await drive(lambda a, e: logs[a].append(e), agents, events, 1000)
        rows.append([f"shared writer, group commit ({agents:,} agents)", f"{agents * events:,}", f"{rate:,.0f}"])
        for log in logs:
            await log.close()
    actors = [PerAgentLog.remote(str(folder / f"own-{a}.log")) for a in range(20)]
    await drive(lambda a, e: actors[a].append.remote(e), 20, 1, 20)
    rate = await drive(lambda a, e: actors[a].append.remote(e), 20, 250, 1000)
    rows.append(["one actor per agent, fsync each append (20 agents)", f"{20 * 250:,}", f"{rate:,.0f}"])
    for actor in actors:
        ray.kill(actor)
    return table(["appends (fsync always)", "events", "fsync-covered events/s"], rows) + (
        "\n\nEvery event is acknowledged only after an fsync (or syncfs) covering it. The driver keeps 1,000 "
        "appends in flight. Goal: ≥ 5,000 fsync-covered events/s across 1,000 agents.")


def frame(value) -> bytes:
    payload = msgpack.packb(value)
    return struct.pack(">II", len(payload), zlib.crc32(payload)) + payload


def timed_open(path: Path) -> tuple[float, str]:
    start = time.perf_counter()
    try:
        with FrameFile(path) as log:
            outcome = f"{len(log)} events, {log.truncated_bytes:,} bytes truncated"
    except LogCorruptError:
        outcome = "refused: damage before committed frames"
    return (time.perf_counter() - start) * 1e3, outcome


def recovery(folder: Path) -> str:
    body = b"".join(frame({"type": "user/message", "content": "x" * 200, "n": i}) for i in range(70_000))  # ~16 MB
    big = frame({"type": "user/message", "content": "y" * (16 * 2**20)})
    cases = {
        "intact log (16 MB of frames)": body,
        "16 MB torn tail (one frame cut short)": frame({"type": "turn/start"}) + big[: len(big) - 1000],
        "16 MB garbage tail": frame({"type": "turn/start"}) + struct.pack(">II", 16, 0) + os.urandom(16 * 2**20),
        "damage in the middle of a 16 MB log": body[: len(body) // 2] + b"\xff" * 64 + body[len(body) // 2 + 64:],
    }
    rows = []
    for label, data in cases.items():
        path = folder / "recover.log"
        path.write_bytes(b"DSHLOG1\n" + data)
        ms, outcome = timed_open(path)
        rows.append([label, f"{len(data) / 2**20:.1f}", f"{ms:,.0f}", outcome])
    return table(["log on open", "MB", "open ms", "outcome"], rows) + (
        "\n\nA frame cut short is recognised from its header alone; other damage is searched for a frame that "
        "completes the file, in C over the damaged bytes (linear in the damage). Reading the good frames is "
        "the rest.")


if __name__ == "__main__":
    ensure_ray()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        appended = asyncio.run(appends(Path(tmp)))
        recovered = recovery(Path(tmp))
    write_section("session_appends", "Session logs: durable appends from many agents", appended)
    write_section("session_recovery", "Session logs: opening a damaged log", recovered)
    print(appended, recovered, sep="\n\n")
