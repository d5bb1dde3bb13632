"""What a batch job leaves on its node: bytes, folders and environments, per --keep-workspaces.

Run: ``python benchmarks/leftovers.py [--episodes 1000] [--kill-after 300]``.

For each choice (never, failed, all), on a local Ray of its own and a scratch folder of its own
(the job's ``$TMPDIR``), a driver process runs 1,000 episodes (each writes 64 KiB into its
workspace through ``bash`` in its environment; one in ten then fails on infrastructure):

- **clean**: the job ends; what is left is measured.
- **killed**: another driver is SIGKILLed once ``--kill-after`` episodes have reported; what is
  left is measured right then and 15 s later (its runners have died, the node's environment
  host has ended their environments), then one more job of the same size runs on the same
  node and scratch folder, and what is left is measured again.
- **TTL**: the reaper run with its clock a week on (``KEEP_S``) takes the kept workspaces.

What is measured, from outside: the files, folders and bytes under
``$TMPDIR/dsh-actors-jobs`` (``du``'s apparent size), the episode workspaces among them,
the environments still on the node (their sockets in the backends' folders, their cgroups,
the processes in those cgroups).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import table, write_section  # noqa: E402

FAIL_EVERY = 10
PAYLOAD = 65536


# --- the driver (a child process) -----------------------------------------------------------

def child(keep: str, count: int, out: Path, episodes_file: Path) -> None:
    from dsh_actors import HarnessError, define_tool
    from dsh_actors.eval.job import run_eval

    def lost(args, ctx):
        raise HarnessError("its server went away", "WORKER_CRASHED")

    tool = define_tool(name="lost", description="a tool whose server is gone", parameters={}, execute=lost)
    with episodes_file.open("w") as lines:
        for i in range(count):
            turns = [{"calls": [{"name": "bash", "arguments": {
                "command": f"head -c {PAYLOAD} /dev/urandom > data.bin && echo ok"}}]}]
            if i % FAIL_EVERY == 0:
                turns.append({"calls": [{"name": "lost", "arguments": {}}]})
            lines.write(json.dumps({"id": f"ep-{i}", "turns": turns}) + "\n")
    summary = asyncio.run(run_eval([episodes_file], out, concurrency=64, progress=None, tools=[tool],
                                   keep_workspaces=keep))
    print(json.dumps({"ok": summary["episodes_ok"], "failed": summary["episodes_failed"]}), flush=True)


# --- what is on the node ---------------------------------------------------------------------

def job_files(scratch: Path) -> dict[str, int]:
    """Files, folders, bytes and episode workspaces under the jobs' scratch folder."""
    files = folders = size = workspaces = 0
    root = scratch / "dsh-actors-jobs"
    for path, dirs, names in os.walk(root):
        folders += len(dirs)
        for name in names:
            files += 1
            try:
                size += os.lstat(os.path.join(path, name)).st_size
            except OSError:
                pass
        parts = Path(path).relative_to(root).parts
        if len(parts) == 3 and parts[1] == "workspaces":  # <job>/workspaces/<node>/<agent>
            workspaces += len(dirs)
    return {"files": files, "folders": folders, "bytes": size, "workspaces": workspaces}


def environments() -> dict[str, int]:
    """The environments left on this node: sockets, cgroups and the processes in them."""
    sockets = cgroups = 0
    processes: set[str] = set()  # (a process is in one cgroup of each hierarchy)
    base = Path(f"/tmp/dsh-envs-{os.geteuid()}")
    for backend in base.glob("*-*-*"):
        sockets += len(list(backend.glob("e*.sock")))
        try:
            parents = (backend / "cgroups").read_text().split()
        except OSError:
            continue
        for parent in parents:
            try:
                envs = [e.path for e in os.scandir(parent) if e.name.startswith("e") and e.is_dir()]
            except OSError:
                continue
            cgroups += len(envs)
            for env in envs:  # (os.walk passes over a cgroup removed meanwhile)
                for path, _, names in os.walk(env):
                    try:
                        processes.update(Path(path, "cgroup.procs").read_text().split())
                    except OSError:
                        pass
    return {"sockets": sockets, "cgroups": cgroups, "processes": len(processes)}


def measure(scratch: Path) -> dict[str, int]:
    return {**job_files(scratch), **environments()}


# --- the scenarios -----------------------------------------------------------------------------

def start_driver(keep: str, count: int, scratch: Path, out: Path, address: str) -> subprocess.Popen:
    env = {**os.environ, "TMPDIR": str(scratch), "RAY_ADDRESS": address}
    return subprocess.Popen([sys.executable, __file__, "--child", keep, str(count), str(out),
                             str(out.parent / f"{out.name}.jsonl")], env=env, stdout=subprocess.PIPE, text=True)


def finish(driver: subprocess.Popen) -> dict[str, int]:
    stdout, _ = driver.communicate(timeout=1800)
    if driver.returncode != 0:
        raise RuntimeError(f"the driver exited {driver.returncode}")
    return json.loads(stdout.strip().splitlines()[-1])


def reported(out: Path) -> int:
    try:
        return sum(1 for _ in (out / "reports").glob("*.json"))
    except OSError:
        return 0


def ttl(scratch: Path) -> dict[str, int]:
    """What the reaper leaves once a week has passed (no job of these alive)."""
    from dsh_actors.eval.scratch import KEEP_S, reap

    reap(scratch / "dsh-actors-jobs", scratch / "none", lambda ids: set(), now=time.time() + KEEP_S + 60)
    return measure(scratch)


def row(keep: str, when: str, found: dict[str, int], outcome: str = "") -> list[str]:
    return [keep, when, outcome, f"{found['workspaces']:,}", f"{found['folders']:,}", f"{found['files']:,}",
            f"{found['bytes'] / 2**20:,.1f}", str(found["sockets"]), str(found["cgroups"]), str(found["processes"])]


def main(count: int, kill_after: int) -> None:
    from dsh_actors.runtime import ensure_ray
    import ray

    ensure_ray()
    address = ray.get_runtime_context().gcs_address
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as folder:
        for keep in ("never", "failed", "all"):
            scratch = Path(folder) / f"clean-{keep}"
            scratch.mkdir()
            started = time.monotonic()
            done = finish(start_driver(keep, count, scratch, scratch / "out", address))
            rows.append(row(keep, f"clean job ({time.monotonic() - started:.0f} s)", measure(scratch),
                            f"{done['ok']} ok, {done['failed']} failed"))
            print(rows[-1], flush=True)
            rows.append(row(keep, "+ a week (TTL)", ttl(scratch)))
            print(rows[-1], flush=True)

            scratch = Path(folder) / f"killed-{keep}"
            scratch.mkdir()
            driver = start_driver(keep, count, scratch, scratch / "killed", address)
            while reported(scratch / "killed") < kill_after and driver.poll() is None:
                time.sleep(0.05)
            driver.send_signal(signal.SIGKILL)
            driver.wait()
            had = reported(scratch / "killed")
            rows.append(row(keep, "driver SIGKILLed", measure(scratch), f"{had} reported"))
            print(rows[-1], flush=True)
            time.sleep(15)
            rows.append(row(keep, "+ 15 s", measure(scratch)))
            print(rows[-1], flush=True)
            done = finish(start_driver(keep, count, scratch, scratch / "next", address))
            rows.append(row(keep, "+ one more job", measure(scratch), f"{done['ok']} ok, {done['failed']} failed"))
            print(rows[-1], flush=True)
            rows.append(row(keep, "+ a week (TTL)", ttl(scratch)))
            print(rows[-1], flush=True)
    body = table(["--keep-workspaces", "after", "episodes", "workspaces", "folders", "files", "MiB",
                  "env sockets", "env cgroups", "env processes"], rows)
    body += (f"\n\n{count:,} episodes per job, 64 at once, on one node; each writes {PAYLOAD // 1024} KiB into its "
             f"workspace through `bash` in its environment, and one in {FAIL_EVERY} then fails on infrastructure. "
             "Measured from outside: files, folders and apparent bytes under `$TMPDIR/dsh-actors-jobs` (the run "
             "folders `--out` are the job's output and not counted), the episode workspaces among them, and the "
             "node's environments (sockets in the backends' folders, their cgroups, the processes in those). "
             "A killed driver's job keeps the workspaces its episodes were in, with the ones it kept, for `KEEP_S` "
             "(at once if it kept none); everything else it left goes when the next job's runners start on the node, "
             "and its environments end once the node's host sees its runners gone (checked every 2 s). "
             "\"+ a week\" runs the reaper with its clock moved on by `KEEP_S`.")
    write_section("leftovers", "What a job leaves on its node, per --keep-workspaces", body)
    print(body)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5]))
    else:
        parser = argparse.ArgumentParser()
        parser.add_argument("--episodes", type=int, default=1000)
        parser.add_argument("--kill-after", type=int, default=300)
        options = parser.parse_args()
        main(options.episodes, options.kill_after)
