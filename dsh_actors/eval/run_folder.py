"""A run's output folder (``dsh-actors eval --out``): what marks it as a run of ours, what
a new, resumed or overwritten run does with it, and the reports a resumed run keeps.

The folder holds ``run.json`` (the mark and the run's episodes), ``logs/<episode>.log``,
``reports/<episode>.json`` (one per finished episode) and, once the run ends,
``summary.json``, ``summary.md`` and ``summary.html``. The driver replaces each file it
writes there all at once (:mod:`.atomic`): a reader, a resumed run included, sees the old
file or the new one. ``run.json``, the reports and the logs sent back are synced to disk
before they are renamed (an episode's log before its report): they are what a resumed run
trusts after a power cut. The summaries are not: ``--resume`` makes them again from the
reports without running anything.

``run.json`` is ``{"tool": "dsh-actors", "format": 1, "episodes": [...]}``. Only a folder
whose ``run.json`` carries that mark is ever resumed or deleted; anything else (no
``run.json``, a damaged one, another tool's, one written before runs were marked) is a
:class:`RunFolderError` that says what was found and what to do, with the folder left as
it was.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Sequence

from ..core.errors import HarnessError
from .atomic import is_leftover, remove_leftovers, replace_file, sync_folder
from .reports import EpisodeReport

__all__ = ["FORMAT", "RUN_FILE", "TOOL", "DamagedReport", "Resumed", "RunFolderError", "prepare",
           "write_reports", "write_summaries"]

RUN_FILE = "run.json"
TOOL = "dsh-actors"
"""The mark's ``tool``: what wrote the folder."""
FORMAT = 1
"""The mark's ``format``: the folder's layout, as this version writes and reads it."""
_SUMMARIES = ("summary.json", "summary.md", "summary.html")
_REPORT_FIELDS = frozenset(f.name for f in fields(EpisodeReport))

_MARK_IT = (f'Choose another --out; or, if it is a dsh-actors run, delete it yourself to start over, or write '
            f'"tool": "{TOOL}", "format": {FORMAT} into its {RUN_FILE} (a JSON object) to resume or overwrite it')


class RunFolderError(HarnessError):
    """The output folder cannot be used as asked: it holds a run and neither resuming nor
    overwriting it was asked for, or it holds something that is not a run of ours (a
    damaged ``run.json`` included). The message names what was found and what to do."""

    code = "RUN_FOLDER"


@dataclass(frozen=True)
class DamagedReport:
    """A report a resumed run could not use: its episode runs again."""

    path: Path
    """The report's file."""
    problem: str
    """What is wrong with it."""

    def __str__(self) -> str:
        return f"damaged report {self.path}: {self.problem}; its episode runs again"


@dataclass(frozen=True)
class Resumed:
    """What a resumed run found in its folder's reports."""

    kept: dict[str, EpisodeReport] = field(default_factory=dict)
    """The finished episodes' reports, by episode id: they do not run again."""
    damaged: list[DamagedReport] = field(default_factory=list)
    """The reports that could not be read as their episode's."""


def prepare(out: Path, episodes: Sequence[str], *, resume: bool, overwrite: bool) -> Resumed:
    """Make ``out`` the folder of a run of ``episodes`` (their ids): new or empty, else
    ``resume`` keeps the finished episodes' reports (what it found is returned) and
    ``overwrite`` deletes it first — only when it is a run of ours; else
    :class:`RunFolderError`, with nothing changed."""
    if resume and overwrite:
        raise RunFolderError("--resume and --overwrite contradict each other; pass one")
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"--out {out} is a file, not a folder")
    used = out.is_dir() and any(not is_leftover(entry.name) for entry in out.iterdir())
    found = Resumed()
    if used:
        _check_ours(out)
        if not (resume or overwrite):
            state = "a finished run" if (out / "summary.json").exists() else "an unfinished run"
            raise RunFolderError(f"--out {out} already holds {state}; pass --resume to keep its finished episodes "
                                 "and run the rest, --overwrite to start over, or choose a new folder")
        if overwrite:
            shutil.rmtree(out)
        else:
            found = _finished(out / "reports", episodes)
            for name in _SUMMARIES:
                (out / name).unlink(missing_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    # The mark first: a folder this run has begun to fill is always recognised as ours.
    replace_file(out / RUN_FILE, (json.dumps({"tool": TOOL, "format": FORMAT, "episodes": list(episodes)})
                                  + "\n").encode(), sync=True)
    sync_folder(out)
    for folder in (out, out / "logs", out / "reports"):
        folder.mkdir(exist_ok=True)
        remove_leftovers(folder)  # what a killed driver's writes left
    sync_folder(out)
    return found


def _check_ours(out: Path) -> None:
    """Raise :class:`RunFolderError` unless ``out``'s ``run.json`` carries our mark."""
    path = out / RUN_FILE
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        raise RunFolderError(f"--out {out} is not empty and holds no dsh-actors run (no {RUN_FILE}); "
                             "choose a new or empty folder") from None
    if not stat.S_ISREG(found.st_mode):
        raise RunFolderError(f"{path} is not a regular file, so --out {out} is no dsh-actors run; nothing was "
                             "resumed or deleted: choose another --out")
    try:
        mark = _json_object(path.read_bytes())
    except OSError as exc:
        raise RunFolderError(f"{path} cannot be read ({exc.strerror or exc}); nothing was resumed or deleted: "
                             "make it readable or choose another --out") from None
    except ValueError as exc:
        raise RunFolderError(f"{path} is damaged: {exc}; nothing shows dsh-actors wrote --out {out}, so nothing "
                             f"was resumed or deleted. {_MARK_IT}") from None
    if mark.get("tool") != TOOL:
        raise RunFolderError(f"{path} has no dsh-actors mark (\"tool\": \"{TOOL}\"): another tool wrote it, or a "
                             "dsh-actors from before run folders were marked; nothing was resumed or deleted. "
                             + _MARK_IT)
    if mark.get("format") != FORMAT:
        raise RunFolderError(f"{path} is a dsh-actors run of format {mark.get('format')!r}, and this dsh-actors "
                             f"knows format {FORMAT} only; nothing was resumed or deleted: resume or overwrite it "
                             "with the dsh-actors that wrote it, or choose another --out")


def _finished(folder: Path, episodes: Sequence[str]) -> Resumed:
    """The reports in ``folder`` of the ``episodes`` that finished, and those found damaged."""
    found = Resumed()
    for episode in episodes:
        path = folder / f"{episode}.json"
        try:
            report = _read_report(path, episode)
        except FileNotFoundError:
            continue
        except OSError as exc:
            found.damaged.append(DamagedReport(path, f"it cannot be read ({exc.strerror or exc})"))
        except ValueError as exc:
            found.damaged.append(DamagedReport(path, str(exc)))
        else:
            if report.status == "ok":
                found.kept[episode] = report
    return found


def _read_report(path: Path, episode: str) -> EpisodeReport:
    """The report of ``episode`` in ``path``; ``ValueError`` saying what is wrong with it."""
    data = _json_object(path.read_bytes())
    unknown, missing = sorted(data.keys() - _REPORT_FIELDS), sorted({"id", "agent"} - data.keys())
    if unknown or missing:
        raise ValueError("it is not an episode report (" + "; ".join(
            ([f"unknown fields: {', '.join(unknown)}"] if unknown else [])
            + ([f"no {' or '.join(missing)}"] if missing else [])) + ")")
    if data["id"] != episode:
        raise ValueError(f"it holds the report of episode {data['id']!r}, not of {episode!r}")
    try:
        return EpisodeReport.from_json(data)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"it is not an episode report ({exc})") from None


def _json_object(data: bytes) -> dict[str, Any]:
    """``data`` as a JSON object; ``ValueError`` saying why it is not one."""
    if not data:
        raise ValueError("it is empty (its write was cut short)")
    try:
        value = json.loads(data)
    except ValueError as exc:
        raise ValueError(f"it is not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ValueError(f"it holds a JSON {type(value).__name__}, not an object")
    return value


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
