"""``run_eval`` with no cluster, in one process: the job's run is replaced by one that
finishes every episode it is given at once (each ``ok``, its log sent back as runners send
theirs), so what a run does with its ``--out`` folder is tested as plain file handling."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Callable

from dsh_actors.eval import job
from dsh_actors.eval.reports import EpisodeReport


def without_a_cluster(setattr: Callable[[Any, str, Any], None]) -> list[str]:
    """Make ``job.run_eval`` start and use no Ray (``setattr``: pytest's
    ``monkeypatch.setattr``, or the builtin in a subprocess). Returns the ids of the
    episodes the run was given, in order, as they run."""
    ran: list[str] = []

    async def run(self: Any, works: list[Any], **options: Any) -> Any:
        ran.extend(w.episode.id for w in works)
        # Each log differs from any earlier one of its episode: a file replaced is told from one kept.
        finished = [(EpisodeReport(id=w.episode.id, agent=w.episode.agent_id),
                     f"the log of {w.episode.id}, {uuid.uuid4().hex}\n".encode(), None) for w in works]
        job._keep_logs(self.out / "logs", finished)
        yield [report for report, _, _ in finished]

    setattr(job, "ensure_ray", lambda: None)
    setattr(job._Job, "run", run)
    return ran


def episode_file(folder: Path, ids: list[str]) -> Path:
    """A JSON Lines file of one short scripted episode per id."""
    path = folder / "episodes.jsonl"
    path.write_text("".join(json.dumps({"id": i, "turns": [{"user": "hi"}]}) + "\n" for i in ids))
    return path
