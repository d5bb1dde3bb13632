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
