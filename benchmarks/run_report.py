"""summary.html: written for a real run, then looked at in headless Chromium.

Runs the shipped example episodes (eight agents, every outcome) on a local Ray instance,
opens the run's ``summary.html`` in Chromium (``--headless --screenshot``, no network),
and checks the screenshot is a rendered page, not a blank one: the share of pixels that
are not the background, and the count of distinct colours (text, bars, tables). Then the
page of a synthetic 10,000-episode run: how long it takes to make and how big it is.
Needs ``chromium`` on the PATH (Debian: ``apt-get install chromium``).

    python benchmarks/run_report.py
"""

from __future__ import annotations

import asyncio
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import table, write_section  # noqa: E402


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB(A) rows of an 8-bit, non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    at, idat, width = 8, b"", 0
    while at < len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    raw, stride, rows, previous = zlib.decompress(idat), width * channels, [], bytearray(width * channels)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(bytes(line))
        previous = line
    return width, height, [bytes(r[i:i + 3]) for r in rows for i in range(0, stride, channels)]


def screenshot(page: Path, out: Path) -> Path:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("chromium is not installed (Debian: apt-get install chromium)")
    profile = tempfile.mkdtemp(prefix="dsh-chromium-")
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={profile}", "--window-size=1280,1800", f"--screenshot={out}",
                    page.resolve().as_uri()], check=True, capture_output=True, timeout=120)
    shutil.rmtree(profile, ignore_errors=True)
    return out


def main() -> None:
    from dsh_actors.eval.job import example_episodes, run_eval
    from dsh_actors.eval.report_html import render_html
    from dsh_actors.eval.reports import EpisodeReport, summary_of
    from dsh_actors.runtime import ensure_ray

    ensure_ray()
    out = Path(tempfile.mkdtemp(prefix="dsh-report-")) / "run"
    asyncio.run(run_eval([example_episodes()], out, concurrency=8, progress=None))
    shot = screenshot(out / "summary.html", Path(__file__).resolve().parent / "summary-html.png")
    width, height, pixels = png_pixels(shot.read_bytes())
    background = max(set(pixels[:2000]), key=pixels[:2000].count)
    inked = sum(1 for p in pixels if p != background) / len(pixels)
    colours = len(set(pixels))
    rendered = inked > 0.03 and colours > 20

    reports = []
    for i in range(10_000):  # a synthetic large run: ten calls per episode over four tools
        report = EpisodeReport(id=f"ep-{i:05d}", agent=f"agent-{i:05d}", status="failed" if i % 500 == 0 else "ok")
        for n in range(10):
            report.calls += 1
            report.ok += 1
            report.latencies_ms.append(1.0 + (i * 7 + n * 13) % 400)
            report.call_tools.append(("bash", "read_file", "write_file", "edit_file")[n % 4])
        reports.append(report)
    started = time.perf_counter()
    page = render_html(summary_of(reports, [], 100.0), reports, None)
    made_s = time.perf_counter() - started

    rows = [["the shipped examples (8 episodes)", f"{width}×{height}", f"{inked:.1%}", str(colours),
             "rendered" if rendered else "BLANK", f"{(out / 'summary.html').stat().st_size / 1024:.0f} KB"],
            ["10,000 synthetic episodes (page made in {:.2f} s)".format(made_s), "—", "—", "—", "—",
             f"{len(page.encode()) / 1024 / 1024:.1f} MB"]]
    write_section("run_report", "summary.html in headless Chromium", table(
        ["run", "screenshot", "pixels not background", "distinct colours", "verdict", "page size"], rows) + """

The page is written beside summary.md by every run; this script opens the examples' page
with Chromium `--headless --screenshot` (no network, a fresh profile) and checks the
picture is a page, not a blank: more than 3 % of its pixels differ from the background
and it has more than 20 colours. The screenshot is `benchmarks/summary-html.png`. Cards are
embedded for at most 200 episodes (failed, then slowest), so a large run's page stays a
few MB.""")
    print(f"screenshot {shot}: {inked:.1%} inked, {colours} colours -> {'rendered' if rendered else 'BLANK'}")
    if not rendered:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
