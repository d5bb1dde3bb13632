"""An episode runner: the async actor that runs a job's episodes on its node.

A runner (:class:`EpisodeRunner`, reserving no CPU by default, pinned to its node) runs
many episodes at once as coroutines, each with its files, log and calls on the runner's
node (:mod:`.episode_run`), and its own model client (each endpoint's concurrency limit is
shared out evenly between the runners, so it holds across the fleet). It claims its job's
folder on the node, reaps those of dead jobs, and sends back each report (and each live
card) as it is ready. :mod:`.runners` is the driver's side.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Iterable

import ray

from ..agent import ChatModel, ModelConfig
from ..core import trace_export
from ..core.errors import error_message
from ..runtime import metrics
from ..runtime.client import ToolRegistry
from ..runtime.traces import FlushesSpans
from ..tools.workspace import node_folder
from .breakers import BreakerRecorder
from .episode_run import JobFiles, conclude, run_episode, started_report, unpack_folder
from .episodes import Episode
from .reports import EpisodeReport
from .scratch import claim, reap, tidy

__all__ = ["EpisodeRunner", "EpisodeRunnerCore", "GATHER_S", "RUNNER_OPTIONS", "Work", "default_runners_per_node"]

RUNNER_OPTIONS: dict[str, Any] = {"num_cpus": 0, "max_concurrency": 10_000, "max_restarts": 0,
                                  "max_task_retries": 0}
"""A runner reserves no CPU (it waits on models and tools), is never restarted by Ray (the
fleet replaces it and reruns what it lost: Ray would rerun nothing) and no task of it is
retried behind the fleet's back (an episode's tools have side effects)."""

GATHER_S = 0.02
"""How long a runner lets reports and cards gather before it sends them back together (the
driver pays per message, not per episode; an episode lasts far longer)."""


@dataclass(frozen=True)
class Work:
    """One episode to run: the episode, its model (``None`` when scripted), its attempt,
    how many more attempts an end on infrastructure may still get, and the earlier
    attempts the infrastructure ended."""

    episode: Episode
    model: ModelConfig | None = None
    attempt: int = 1
    reran: str | None = None
    retries_left: int = 0
    earlier: tuple[dict[str, Any], ...] = ()

    def retried_after(self, report: EpisodeReport) -> bool:
        """Whether this attempt, ending as ``report`` says, runs again: only an end on
        infrastructure, only while retries are left."""
        return bool(self.retries_left > 0 and report.termination and report.termination["infra"])


def default_runners_per_node(cpus: float) -> int:
    """Runners on a node of ``cpus`` CPUs: one per four, at least one, at most eight (a
    runner is one process: its coroutines share one core; more would only cost memory)."""
    return max(1, min(8, int(cpus) // 4))


class EpisodeRunnerCore(FlushesSpans):
    """What runs inside a runner: the job's registries (by mode), where its files go, the
    workspace template (unpacked once on this node), one model client per endpoint."""

    def __init__(self, registries: dict[str, ToolRegistry], files: JobFiles, fleet_size: int,
                 live: bool, ship_logs: bool, job: str = "job") -> None:
        trace_export.configure()  # this process's tracer, from its environment (DSH_TRACE_FILE, OTEL_*)
        self._registries = registries
        self._files = files
        self._fleet_size = max(1, fleet_size)  # each endpoint's concurrency limit is shared out evenly
        self._live = live
        self._ship_logs = ship_logs
        self._job = job
        self._models: dict[ModelConfig, ChatModel] = {}  # one client per endpoint config of the job
        self._template: Path | None = None
        self._unpacking: asyncio.Future[Path] | None = None
        self._claim: int | None = None  # the lock that says this job still works in its node folder

    def ready(self) -> str:
        """The id of the node this runner is on."""
        return ray.get_runtime_context().get_node_id()

    def pid(self) -> int:
        return os.getpid()

    async def _template_here(self) -> Path:
        if self._unpacking is None:
            async def unpack() -> Path:
                data = self._files.template
                if isinstance(data, ray.ObjectRef):
                    data = await data
                root = Path(self._files.root)
                into = root / "templates" / node_folder() / uuid.uuid4().hex[:8]
                if not self._files.shared:  # this node's job folder is ours; a killed job's is reaped
                    self._claim = await asyncio.to_thread(claim, root, _this_job(), self._files.keep)
                    await asyncio.to_thread(reap, root.parent, root, _alive_jobs)
                await asyncio.to_thread(unpack_folder, data, into)
                return into
            self._unpacking = asyncio.ensure_future(unpack())
        return await self._unpacking

    async def run(self, batch: list[Work]) -> AsyncIterator[list[dict[str, Any]]]:
        """Run ``batch``'s episodes at once; yield what is ready as it is: lists of
        ``{"card": text}`` (live cards) and ``{"report": …, "log": bytes | None}``."""
        outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        tasks = [asyncio.ensure_future(self._one(work, outbox)) for work in batch]
        left = len(tasks)
        while left:
            ready = [await outbox.get()]
            if left > 1:
                await asyncio.sleep(GATHER_S)  # what finishes meanwhile goes with it: one message, not many
            while not outbox.empty():
                ready.append(outbox.get_nowait())
            left -= sum(1 for item in ready if "report" in item)
            yield ready

    async def _one(self, work: Work, outbox: asyncio.Queue[dict[str, Any]]) -> None:
        episode = work.episode
        try:
            template = await self._template_here()
            chat = None
            if work.model is not None:
                chat = self._models.get(work.model)
                if chat is None:  # its concurrency limit shared out evenly between the runners
                    share = max(1, work.model.concurrency // self._fleet_size)
                    chat = self._models[work.model] = ChatModel(work.model.model_copy(update={"concurrency": share}))
                    chat.breaker.on_change = BreakerRecorder(self._job, "endpoint")
            card = (lambda text: outbox.put_nowait({"card": text})) if self._live else None
            report, log_path = await run_episode(episode, self._registries[episode.mode], self._files, template,
                                                 model=chat, attempt=work.attempt, card=card)
        except Exception as exc:  # noqa: BLE001 - the runner itself failed this episode: still one report
            report, log_path = started_report(episode, node_folder(), work.attempt,
                                              work.model.model if work.model else None), None
            report.status, report.message = "failed", error_message(exc)
            conclude(report, getattr(exc, "code", None))
        report.attempts, report.reran, report.retried = work.attempt, work.reran, list(work.earlier)
        report.runner = ray.get_runtime_context().get_actor_name()
        metrics.count("dsh_episodes", report.status, report.stop or "")
        if log_path is not None and work.retried_after(report):  # kept beside the next attempt's, numbered
            log_path = await asyncio.to_thread(_set_aside, log_path, work.attempt)
        log = None
        if self._ship_logs and log_path is not None and not self._files.kept_in_place(log_path):
            try:
                log = await asyncio.to_thread(log_path.read_bytes)
            except OSError as exc:
                report.status, report.message = "failed", f"its log could not be read back: {exc}"
        outbox.put_nowait({"report": report.to_json(), "log": log,
                           **({"log_name": log_path.name} if log_path is not None else {})})

    async def close(self) -> None:
        """The job is over: its model clients closed, and what it left on this node removed
        but the workspaces it keeps (:func:`~.scratch.tidy`)."""
        for chat in self._models.values():
            await chat.close()
        if not self._files.shared:
            await asyncio.to_thread(tidy, Path(self._files.root), node_folder(), self._ship_logs)
        if self._claim is not None:
            os.close(self._claim)
            self._claim = None


def _set_aside(log: Path, attempt: int) -> Path:
    """An attempt's log renamed ``<id>.attempt-<n>.log`` (the next attempt's is ``<id>.log``)."""
    kept = log.with_name(f"{log.stem}.attempt-{attempt}{log.suffix}")
    try:
        os.replace(log, kept)
    except OSError:
        return log
    return kept


def _this_job() -> str:
    """This job, as a node's job folder names its owner: the Ray session and the job's id
    (ids start again at 1 in every new cluster)."""
    session = ray._private.worker._global_node.session_name
    return f"{session}/{ray.get_runtime_context().get_job_id()}"


def _alive_jobs(owners: Iterable[str]) -> set[str]:
    """Which of these owners (:func:`_this_job`) are jobs still running in this cluster (a
    GCS read); one of another cluster (or Ray session) is not."""
    from ray._private import state

    session = ray._private.worker._global_node.session_name
    running = {f"{session}/{job['JobID']}" for job in state.jobs() if not job.get("IsDead")}
    return set(owners) & running


EpisodeRunner = ray.remote(EpisodeRunnerCore)
"""The runner actor (:class:`EpisodeRunnerCore` on Ray; options: :data:`RUNNER_OPTIONS`)."""
