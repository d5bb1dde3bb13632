"""A run's output folder (``dsh-actors eval --out``): what a new, resumed or overwritten
run does with it, and the files the driver writes there.

The folder holds ``run.json`` (the run's episodes), ``logs/<episode>.log``,
``reports/<episode>.json`` (one per finished episode) and, once the run ends,
``summary.json``, ``summary.md`` and ``summary.html``. The driver replaces each file it
writes there all at once (:mod:`.atomic`): a reader, a resumed run included, sees the old
file or the new one. ``run.json``, the reports and the logs sent back are synced to disk
before they are renamed (an episode's log before its report): they are what a resumed run
trusts after a power cut. The summaries are not: ``--resume`` makes them again from the
reports without running anything.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Sequence

from ..core.errors import HarnessError
from .atomic import is_leftover, remove_leftovers, replace_file, sync_folder
from .reports import EpisodeReport

__all__ = ["RUN_FILE", "RunFolderError", "prepare", "write_reports", "write_summaries"]

RUN_FILE = "run.json"
_SUMMARIES = ("summary.json", "summary.md", "summary.html")


class RunFolderError(HarnessError):
    """The output folder already holds a run (or something else) and neither resuming
    nor overwriting it was asked for."""

    code = "RUN_FOLDER"


def prepare(out: Path, episodes: Sequence[str], *, resume: bool, overwrite: bool) -> dict[str, EpisodeReport]:
    """Make ``out`` the folder of a run of ``episodes`` (their ids): new or empty, else
    ``resume`` keeps the finished episodes' reports (returned, by episode id) and
    ``overwrite`` deletes it first; else :class:`RunFolderError`, with nothing changed."""
    if resume and overwrite:
        raise RunFolderError("--resume and --overwrite contradict each other; pass one")
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"--out {out} is a file, not a folder")
    used = out.is_dir() and any(not is_leftover(entry.name) for entry in out.iterdir())
    kept: dict[str, EpisodeReport] = {}
    if used:
        if not (out / RUN_FILE).is_file():
            raise RunFolderError(f"--out {out} is not empty and holds no dsh-actors run; choose a new or empty folder")
        if not (resume or overwrite):
            state = "a finished run" if (out / "summary.json").exists() else "an unfinished run"
            raise RunFolderError(f"--out {out} already holds {state}; pass --resume to keep its finished episodes "
                                 "and run the rest, --overwrite to start over, or choose a new folder")
        if overwrite:
            shutil.rmtree(out)
        else:
            wanted = set(episodes)
            for path in (out / "reports").glob("*.json"):
                report = EpisodeReport.from_json(json.loads(path.read_text()))
                if report.id in wanted and report.status == "ok":
                    kept[report.id] = report
            for name in _SUMMARIES:
                (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    # run.json first: a folder this run has begun to fill is always recognised as a run.
    replace_file(out / RUN_FILE, (json.dumps({"episodes": list(episodes)}) + "\n").encode(), sync=True)
    sync_folder(out)
    for folder in (out, out / "logs", out / "reports"):
        folder.mkdir(exist_ok=True)
        remove_leftovers(folder)  # what a killed driver's writes left
    sync_folder(out)
    return kept


def write_reports(folder: Path, reports: Sequence[EpisodeReport]) -> None:
    """Write each of ``reports`` as ``folder/<episode>.json``, synced (a resumed run skips
    the episodes they report)."""
    for report in reports:
        replace_file(folder / f"{report.id}.json", (json.dumps(report.to_json()) + "\n").encode(), sync=True)
    sync_folder(folder)


def write_summaries(out: Path, summary_json: str, markdown: str, html: str) -> None:
    """Write the run's summaries into ``out`` (not synced: ``--resume`` makes them again)."""
    for name, text in zip(_SUMMARIES, (summary_json, markdown, html)):
        replace_file(out / name, text.encode("utf-8"), sync=False)
