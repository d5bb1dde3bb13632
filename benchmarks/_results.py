"""Write a benchmark's table into benchmarks/RESULTS.md, replacing its previous section."""

from __future__ import annotations

import os
import platform
import re
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def write_section(name: str, title: str, body: str) -> None:
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    section = (f"{start}\n## {title}\n\n_{stamp}; {platform.python_implementation()} "
               f"{platform.python_version()}; {platform.machine()}_\n\n{body.strip()}\n{end}")
    text = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n\nWritten by the scripts in this folder; each section is replaced when its script runs.\n"
    pattern = re.compile(re.escape(start) + ".*?" + re.escape(end) + "\n*", re.S)
    found = pattern.search(text)
    if found is None:
        text = text.rstrip() + "\n\n" + section + "\n"
    else:  # the first copy is replaced; any later copy (a merge's leftover) is dropped
        rest = pattern.sub("", text[found.end():])
        text = text[:found.start()] + section + "\n\n" + rest
    RESULTS.write_text(text.rstrip() + "\n")


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def process_cpu_s(pid: int | str = "self") -> float:
    """A process's user + system CPU seconds (its threads included), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu_s() -> float:
    """Busy CPU seconds of every process on the machine, from /proc/stat."""
    values = [int(v) for v in Path("/proc/stat").read_text().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = values
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")



def processes_cpu_s() -> dict[int, tuple[str, float]]:
    """Every live process's title (its command line; a Ray worker's names its actor) and
    CPU seconds, from /proc."""
    seen: dict[int, tuple[str, float]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
            seen[int(entry.name)] = (title, process_cpu_s(entry.name))
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return seen


def _kind(title: str) -> str:
    """A process's kind: a Ray actor's class, else its program and first arguments."""
    if title.startswith("ray::"):
        return title.split(".")[0].split(" ")[0]
    words = title.split(" ")
    return " ".join([words[0].rsplit("/", 1)[-1], *words[1:3]])[:60]


class CpuByProcess:
    """Where a run's CPU went, by kind of process: ``with CpuByProcess() as cpu: …`` then
    ``cpu.spent()``. /proc is read every ``every_s`` seconds meanwhile, so processes that
    end during the run (a job's actors) are counted up to their last reading."""

    def __init__(self, every_s: float = 0.25) -> None:
        import threading

        self._every_s = every_s
        self._first: dict[int, float] = {}
        self._last: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> "CpuByProcess":
        self._first = {pid: cpu for pid, (_, cpu) in processes_cpu_s().items()}
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._read()

    def _read(self) -> None:
        for pid, (title, cpu) in processes_cpu_s().items():
            known = self._last.get(pid)
            if known is None or not title.startswith("ray::IDLE"):
                self._last[pid] = (title if known is None or title.startswith("ray::") else known[0], cpu)
            else:
                self._last[pid] = (known[0], cpu)

    def _watch(self) -> None:
        while not self._stop.wait(self._every_s):
            self._read()

    def spent(self) -> list[tuple[str, float]]:
        """CPU seconds by kind of process, largest first."""
        spent: dict[str, float] = {}
        for pid, (title, cpu) in self._last.items():
            kind = _kind(title)
            spent[kind] = spent.get(kind, 0.0) + cpu - self._first.get(pid, 0.0)
        return sorted(((k, v) for k, v in spent.items() if v > 0.005), key=lambda kv: -kv[1])
