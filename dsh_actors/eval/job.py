"""The batch evaluation: the episodes of JSON Lines files run on episode runners over the
whole Ray cluster; the driver only streams them out and their reports back.

:func:`run_episodes` is the library entry point (an async iterator of reports, for sweeps
and trainers that hold their own actor handles); :func:`run_eval` (``dsh-actors eval``) is
built on it and owns an output folder. Each episode is one agent (:mod:`.episode_run`) on a
registry of the episode's mode (scopes hosted ``shared``: an agent costs kilobytes), with
the reference tools and your own (import paths, :mod:`.plugins`) working in a copy of the
workspace template made on the node that runs it. Asks are answered by the job's approval
policy: ``never`` (rejected and recorded, the default: a batch has no one to ask),
``always`` (allowed once and recorded), or ``ask`` (they wait for an answer from another
process: ``dsh-actors approvals``, or a policy actor with the queue's client).

A run owns its output folder (:mod:`.run_folder`): ``run.json`` (its mark and what it
runs), ``logs/<episode>.log``, ``reports/<episode>.json`` (each finished episode), then
``summary.json``, ``summary.md`` and ``summary.html`` (:mod:`.report_html`), each file
replaced all at once (:mod:`.atomic`). Workspaces stay on the node that ran each episode
(its report says where); with ``shared_out`` (``--out`` on storage every node mounts) the
runners write workspaces and logs straight into the folder. A folder that already holds a
run is refused unless the run is resumed (finished episodes are kept, the rest run again)
or overwritten; one that holds anything else is never touched.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import sys
import tempfile
import time
import uuid
from importlib import resources
from pathlib import Path
from typing import Any, AsyncGenerator, Awaitable, Callable, Iterable, Mapping, Sequence, TextIO

import ray
from tqdm import tqdm

from ..agent import ModelConfig
from ..codemode.runtime import CodeRuntimeConfig
from ..core import trace_export
from ..core.registry import RUN_CODE
from ..core.definitions import snapshot_definition
from ..policies import Breaker, breaker_policy, deadline_policy
from ..runtime.registry.approval import check_policy
from ..runtime.client import ToolRegistry
from ..runtime.envhost import AgentEnvironments
from ..runtime.local import ensure_ray
from ..tools import reference_tools
from ..tools.workspace import node_folder
from .atomic import replace_file, sync_folder
from .breakers import BreakerRecorder, breaker_history
from .episode_run import DEFAULT_SYSTEM, KEEP_WORKSPACES, JobFiles, ToolFailedError, coded_failures, pack_folder
from .episodes import Episode, EpisodeError, load_episodes, repeated
from .heap import collector_paused, long_lived
from .plugins import PluginError, load_tools
from .policies import check_fleet_caps
from .report_html import render_html
from .reports import EpisodeReport, markdown_of, summary_of
from .run_folder import RunFolderError, prepare, write_reports, write_summaries
from .runner import Work
from .runners import RunnerFleet

__all__ = ["DEFAULT_SYSTEM", "EpisodeReport", "PluginError", "RunFolderError", "ToolFailedError",
           "example_episodes", "run_episodes", "run_eval"]


def example_episodes() -> Path:
    """The episodes shipped with the package (the README's first command runs them)."""
    return Path(str(resources.files("dsh_actors") / "examples" / "episodes.jsonl"))


def _example_workspace() -> Path:
    return Path(str(resources.files("dsh_actors") / "examples" / "workspace"))


class _Job:
    """What a job is made of before anything runs: where its files go, its tools (the
    reference ones and the plugins'), its template, its approval policy."""

    def __init__(self, *, tools: Sequence[Any], workspace: str | Path | None, reference: bool,
                 approvals: str, out: Path | None, shared_out: bool, scratch: str | Path | None,
                 name: str | None = None, tool_timeout_s: float = 600.0, environments: str = "native",
                 keep_workspaces: str = "failed", breaker: tuple[int, float] = (5, 30.0)) -> None:
        if environments not in ("native", "host"):
            raise ValueError(f'environments is "native" (each episode in its own) or "host" (no walls); '
                             f"got {environments!r}")
        if keep_workspaces not in KEEP_WORKSPACES:
            raise ValueError(f"keep_workspaces is one of {', '.join(KEEP_WORKSPACES)}; got {keep_workspaces!r}")
        if not tool_timeout_s > 0:
            raise ValueError(f"the tool timeout must be a positive number of seconds; got {tool_timeout_s!r}")
        self.tool_timeout_s = tool_timeout_s
        self.breaker = breaker
        Breaker("check", *breaker)  # a bad threshold or pause raises here, before anything starts
        check_policy(approvals)
        if shared_out and out is None:
            raise ValueError("shared_out needs an out folder (on storage every node mounts)")
        template = Path(workspace or _example_workspace())
        if not template.is_dir():
            raise ValueError(f"workspace template {template} is not a folder")
        self.tag = uuid.uuid4().hex[:8]
        self.name = name or f"eval-{self.tag}"
        root = out if out is not None and shared_out else Path(scratch or tempfile.gettempdir()) / "dsh-actors-jobs" / self.tag
        hidden = (str(out),) if out is not None else ()
        self.files = JobFiles(str(root.resolve()), shared_out, pack_folder(template), environments=environments,
                              keep=keep_workspaces, hidden=hidden)
        self.approvals = approvals
        self.out = out
        # The reference tools act in each episode's environment (or, chosen, on the host);
        # a plugin gets the same: its agent's workspace (at) and environment (place).
        places: Any = (AgentEnvironments(self.files.workspaces, sessions=self.name) if environments == "native"
                       else self.files.workspaces)
        found: list[Any] = list(reference_tools(places)) if reference else []
        for item in tools:
            found += load_tools(item, places) if isinstance(item, str) else [item]
        self.definitions = [snapshot_definition(d) for d in found]

    @property
    def tool_names(self) -> set[str]:
        return {d.name for d in self.definitions} | {RUN_CODE}

    async def run(self, works: list[Work], *, in_flight: int, runners_per_node: int | None,
                  on_card: Callable[[str], None] | None,
                  runner_options: dict[str, Any] | None) -> AsyncGenerator[list[EpisodeReport], None]:
        """The works' reports, in lists of those that finished together. Ends what it
        made, each actor's spans flushed first, and this process's last."""
        trace_export.configure()  # this process's tracer, from its environment (DSH_TRACE_FILE, OTEL_*)
        registries: dict[str, ToolRegistry] = {}
        fleet: RunnerFleet | None = None
        logs = self.out / "logs" if self.out is not None and not self.files.shared else None
        try:
            # The template is sent once; runners on this node write their logs straight into --out.
            self.files = dataclasses.replace(
                self.files, template=ray.put(self.files.template), home_node=node_folder() if logs is not None else None,
                home_logs=str(logs) if logs is not None else None)
            modes = sorted({w.episode.mode for w in works})
            made = await _all_settled(*(asyncio.to_thread(
                ToolRegistry.connect, f"{self.name}-{mode}", mode=mode, scope_hosting="shared",
                code_runtime=CodeRuntimeConfig() if mode != "native" else None,
                sessions=self.name) for mode in modes))  # its logs apart from another job's same agents
            # Each registry made is kept (so it is ended) even when another one failed.
            registries.update((mode, r) for mode, r in zip(modes, made) if not isinstance(r, BaseException))
            _raise_first(made)
            fleet = RunnerFleet(registries, self.files, name=self.name, in_flight=in_flight, runners_per_node=runners_per_node,
                                live=on_card is not None, ship_logs=logs is not None, options=runner_options,
                                place_by_scope=any(w.episode.changes_scope for w in works))
            # The runners start while the registries are set up: both are mostly processes starting.
            _raise_first(await _all_settled(fleet.start(episodes=len(works)),
                                            *(self._set_up(registry, works) for registry in made)))
            async with contextlib.aclosing(fleet.stream(works)) as stream:
                async for items in stream:
                    reports, superseded = [], []
                    for item in items:
                        if "card" in item:
                            if on_card is not None:
                                on_card(item["card"])
                        elif "superseded" in item:  # an attempt the infrastructure ended: it runs again
                            superseded.append((EpisodeReport.from_json(item["superseded"]), item["log"],
                                               item.get("log_name")))
                        else:
                            reports.append((EpisodeReport.from_json(item["report"]), item["log"], item.get("log_name")))
                    if logs is not None:  # what came together is written together, off the event loop
                        await asyncio.to_thread(_keep_logs, logs, [*superseded, *reports])
                    if reports:
                        yield [report for report, _, _ in reports]
        finally:
            try:
                if fleet is not None:
                    await fleet.close()
            finally:
                for registry in registries.values():
                    try:
                        await asyncio.to_thread(registry.shutdown)
                    except Exception:  # noqa: BLE001 - the others are still ended
                        pass
                await asyncio.to_thread(trace_export.flush)

    async def _set_up(self, registry: ToolRegistry, works: list[Work]) -> None:
        """The job's policies, tools and approval policy in ``registry``."""
        # Outermost, first: a tool whose calls keep failing on infrastructure (hanging past
        # their deadline included) fails the next ones at once; then no call of the job
        # waits forever, whatever its tool does.
        await registry.on("tools/execute", breaker_policy(*self.breaker, on_change=BreakerRecorder(self.name, "tool")))
        per_agent = {w.episode.agent_id: w.episode.limits.tool_timeout_s for w in works
                     if w.episode.limits.tool_timeout_s is not None}
        await registry.on("tools/execute", deadline_policy(self.tool_timeout_s, per_agent))
        for definition in self.definitions:
            await registry.register(coded_failures(definition))
        # An ask waits as long as a call may run, then fails its call (APPROVAL_TIMEOUT):
        # under --approvals ask, a job nobody answers still ends.
        await registry.approvals(policy=self.approvals, timeout_s=self.tool_timeout_s, agent_timeouts=per_agent)


async def _all_settled(*steps: Awaitable[Any]) -> list[Any]:
    """Run ``steps`` at once and wait for every one (none is left running behind a
    failure): each one's value or exception."""
    return await asyncio.gather(*steps, return_exceptions=True)


def _raise_first(outcomes: list[Any]) -> None:
    """Raise the first exception among ``outcomes`` (of :func:`_all_settled`), if any."""
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome


def _keep_logs(folder: Path, reports: list[tuple[EpisodeReport, bytes | None, str | None]]) -> None:
    """Write the logs runners sent back (each under the name its runner gave it: an attempt
    run again is ``<id>.attempt-<n>.log``), synced before their reports are written (a
    report a resumed run keeps has its log); a log that cannot be kept fails its episode."""
    for report, data, name in reports:
        if data is None:
            continue
        path = folder / (name or f"{report.id}.log")
        try:
            replace_file(path, data, sync=True)
        except (IsADirectoryError, NotADirectoryError):
            report.status, report.message = "failed", f"{path} is in the way of the episode's log (not a regular file)"
        except OSError as exc:
            report.status, report.message = "failed", f"its log could not be written to {path}: {exc.strerror or exc}"
    if any(data is not None for _, data, _ in reports):
        sync_folder(folder)


async def run_episodes(episodes: Iterable[Episode | Mapping[str, Any]], *, tools: Sequence[Any] = (),
                       workspace: str | Path | None = None, reference_tools: bool = True,
                       model: ModelConfig | None = None, approvals: str = "never", in_flight: int = 64,
                       runners_per_node: int | None = None, out: str | Path | None = None,
                       shared_out: bool = False, scratch: str | Path | None = None,
                       on_card: Callable[[str], None] | None = None,
                       runner_options: dict[str, Any] | None = None,
                       name: str | None = None, tool_timeout_s: float = 600.0, environments: str = "native",
                       keep_workspaces: str = "failed", retry_infra: int = 0, repeat: int = 1,
                       breaker: tuple[int, float] = (5, 30.0)) -> AsyncGenerator[EpisodeReport, None]:
    """Run ``episodes`` (:class:`Episode` or their JSON dicts) on episode runners over the
    connected Ray cluster; yield each one's :class:`EpisodeReport` as it finishes (exactly
    one per episode; a failed one has ``status == "failed"`` and a message).

    ``tools``: definitions, or import paths ``module:name`` (:mod:`.plugins`), registered
    beside the reference tools (without them if ``reference_tools`` is false).
    ``workspace``: the folder each episode gets a fresh copy of (default: the shipped
    example). ``model``: the model for episodes with a ``task``. ``approvals``: ``never``,
    ``always`` or ``ask``. ``in_flight``: episodes running at once over the fleet;
    ``runners_per_node``: default from each node's CPUs. ``out``: a folder that receives
    each episode's log (``out/logs``); with ``shared_out`` it is on storage every node
    mounts and the runners write workspaces and logs into it. ``scratch``: the node-local
    folder (the same path on every node) for workspaces otherwise (default: the system's
    temporary folder). ``name`` names the job's registries (``<name>-<mode>``: the
    registry an approval answer names) and runners; default ``eval-<random>``.
    ``tool_timeout_s``: every tool call's deadline (an episode's ``limits.tool_timeout_s``
    or a tool's own ``timeout_ms`` wins): past it the call ends ``TOOL_TIMEOUT``.
    ``environments``: ``native`` (each episode's tools run in an isolated environment of its
    own on its runner's node; a node that cannot make one fails its episodes
    ``ENV_UNAVAILABLE``) or ``host`` (on the host, in the workspace: no walls — only for
    commands you trust). ``keep_workspaces``: whose workspaces stay on their node once
    their episode ends (``never``, ``failed``, ``all``). ``retry_infra``: how many more
    times an episode the infrastructure ended runs again, from scratch, under the same id
    (each earlier attempt's log kept as ``<id>.attempt-<n>.log``); never one the model
    ended. ``repeat``: how many times each episode runs (its own ``repeat`` wins), each run
    an episode ``<id>.r<k>``. ``breaker``: each tool's breaker (``(threshold, pause_s)``:
    that many infrastructure failures in a row open it; a probe after the pause). Raises ``ValueError`` before
    anything runs when an episode is invalid or has a task and no model."""
    if isinstance(retry_infra, bool) or not isinstance(retry_infra, int) or retry_infra < 0:
        raise ValueError(f"retry_infra is a whole number of attempts, 0 or more; got {retry_infra!r}")
    items = repeated([e if isinstance(e, Episode) else Episode.model_validate(e) for e in episodes], repeat)
    for attribute in ("id", "agent_id"):  # each names an episode's files, scope and log
        names = [getattr(e, attribute) for e in items]
        twice = sorted({n for n in names if names.count(n) > 1}) if len(set(names)) < len(names) else []
        if twice:
            raise ValueError(f"episodes must differ in {attribute.replace('_id', '')}: {twice} used twice")
    check_fleet_caps([(e.id, list(e.policies)) for e in items])
    works = [Work(e, _model_config(e, model) if e.task is not None else None, retries_left=retry_infra)
             for e in items]
    folder = Path(out).resolve() if out is not None else None
    if folder is not None:
        (folder / "logs").mkdir(parents=True, exist_ok=True)
    job = _Job(tools=tools, workspace=workspace, reference=reference_tools, approvals=approvals,
               out=folder, shared_out=shared_out, scratch=scratch, name=name, tool_timeout_s=tool_timeout_s,
               environments=environments, keep_workspaces=keep_workspaces, breaker=breaker)
    unknown = {e.id: e.unknown_tools(job.tool_names) for e in items}
    if any(unknown.values()):
        raise ValueError("; ".join(f"episode {i}: scope names unknown tools {names}"
                                   for i, names in unknown.items() if names))
    async with contextlib.aclosing(job.run(works, in_flight=in_flight, runners_per_node=runners_per_node,
                                           on_card=on_card, runner_options=runner_options)) as batches:
        async for reports in batches:
            for report in reports:
                yield report


def _refuse_up_front(episodes: list[Episode], invalid: list[EpisodeError], known: set[str],
                     model: ModelConfig | None) -> dict[str, ModelConfig]:
    """Move to ``invalid`` (as file:line) each episode that cannot run: its scope names
    tools nobody has, or it has a task and no model. Returns each task's model."""
    configs: dict[str, ModelConfig] = {}
    for episode in list(episodes):
        try:
            unknown = episode.unknown_tools(known)
            if unknown:
                raise ValueError(f"scope names unknown tools {unknown}; known: {', '.join(sorted(known))}")
            if episode.task is not None:
                configs[episode.id] = _model_config(episode, model)
        except ValueError as exc:
            episodes.remove(episode)
            invalid.append(EpisodeError(*episode.source, str(exc)))
    return configs


def _model_config(episode: Episode, default: ModelConfig | None) -> ModelConfig:
    """The job's model with the episode's overrides; ``ValueError`` when there is none."""
    choice = episode.model
    fields: dict[str, Any] = default.model_dump() if default is not None else {}
    if choice is not None:
        fields.update({"model": choice.name} if choice.name else {})
        fields.update({"base_url": choice.base_url} if choice.base_url else {})
        fields.update({k: v for k, v in (("temperature", choice.temperature), ("seed", choice.seed),
                                         ("token_ids", choice.token_ids)) if v is not None})
    if not fields.get("model"):
        raise ValueError("a task needs a model: give the episode a model name, or run with --model "
                         "(and --base-url for anything but OpenAI's API)")
    return ModelConfig(**fields)


async def run_eval(paths: list[str | Path], out_dir: str | Path, *, concurrency: int = 64,
                   live: TextIO | None = None, progress: TextIO | None = sys.stderr,
                   resume: bool = False, overwrite: bool = False, tools: Sequence[Any] = (),
                   workspace: str | Path | None = None, reference_tools: bool = True,
                   model: ModelConfig | None = None, approvals: str = "never",
                   runners_per_node: int | None = None, shared_out: bool = False,
                   runner_options: dict[str, Any] | None = None, tool_timeout_s: float = 600.0,
                   environments: str = "native", keep_workspaces: str = "failed", retry_infra: int = 0,
                   repeat: int = 1) -> dict[str, Any]:
    """Run the episodes in ``paths`` (:func:`run_episodes` does, ``concurrency`` at once);
    write logs, reports and summaries under ``out_dir``; return the summary. ``out_dir``
    must be new or empty unless ``resume`` (keep the finished episodes of the run there,
    run the others) or ``overwrite`` (start over); else :class:`RunFolderError`.
    ``progress`` gets a progress bar (rate, ETA), ``live`` each call's card. A tool that
    raises counts as ``TOOL_FAILED``. ``model`` is the job's model for episodes with a
    ``task`` (each may override its name, endpoint and sampling); such an episode with no
    model at all, or one whose scope names tools nobody has, is reported up front."""
    started = time.monotonic()
    episodes, invalid = load_episodes(paths)
    episodes = repeated(episodes, repeat)
    twice = sorted(i for i, n in collections.Counter(e.id for e in episodes).items() if n > 1)
    if twice:
        raise ValueError(f"a run of a repeated episode has the id of another episode: {twice}")
    out = Path(out_dir).resolve()
    job = _Job(tools=tools, workspace=workspace, reference=reference_tools, approvals=approvals, out=out,
               shared_out=shared_out, scratch=None, tool_timeout_s=tool_timeout_s, environments=environments,
               keep_workspaces=keep_workspaces)
    configs = _refuse_up_front(episodes, invalid, job.tool_names, model)
    for error in invalid:
        if progress is not None:
            print(f"invalid episode: {error}", file=progress, flush=True)
    found = prepare(out, [e.id for e in episodes], resume=resume, overwrite=overwrite)
    if progress is not None:
        for damaged in found.damaged:
            print(damaged, file=progress, flush=True)
    kept = found.kept
    ensure_ray()  # only now: a refused folder, plugin or episode file never waits for a Ray to start
    reports: dict[str, EpisodeReport] = dict(kept)
    failures = 0
    bar = tqdm(total=len(episodes), initial=len(kept), unit="episode", file=progress, disable=progress is None,
               mininterval=0.5, dynamic_ncols=True)
    on_card = (lambda card: print(card, file=live, flush=True)) if live is not None else None
    with collector_paused():  # kept for the whole job, like the episodes
        works = [Work(e, configs.get(e.id), retries_left=retry_infra) for e in episodes if e.id not in kept]
    try:
        if works:
            with long_lived():  # the episodes and the setup live as long as the loop
                async with contextlib.aclosing(job.run(works, in_flight=concurrency, runners_per_node=runners_per_node,
                                                       on_card=on_card, runner_options=runner_options)) as batches:
                    async for batch in batches:
                        await asyncio.to_thread(write_reports, out / "reports", batch)
                        for report in batch:
                            reports[report.id] = report
                            if report.status != "ok":
                                failures += 1
                                if progress is not None:
                                    bar.write(f"{report.id}: {report.status} — {report.message}", file=progress)
                        bar.set_postfix(failed=failures, refresh=False)
                        bar.update(len(batch))
    finally:
        bar.close()
    ordered = [reports[e.id] for e in episodes if e.id in reports]
    summary = summary_of(ordered, invalid, time.monotonic() - started, breakers=_breakers(job.name) if works else [])
    summary["out"] = str(out)
    write_summaries(out, _summary_json(summary), markdown_of(summary), render_html(summary, ordered, out / "logs"))
    return summary


def _breakers(job: str) -> list[dict[str, Any]]:
    """The job's breakers (:func:`~.breakers.breaker_history`); none when Ray cannot say."""
    try:
        return breaker_history(job)
    except Exception:  # noqa: BLE001 - a summary without them rather than none at all
        return []


def _summary_json(summary: dict[str, Any]) -> str:
    """``summary.json``: indented, each episode's entry on one line (``json``'s indenting
    encoder is pure Python: for 10,000 episodes it cost the driver more than the job's
    own work per episode)."""
    fields = []
    for key, value in summary.items():
        if key == "per_episode" and isinstance(value, list):
            text = "[" + ",".join(f"\n    {json.dumps(entry)}" for entry in value) + ("\n  ]" if value else "]")
        else:
            text = json.dumps(value, indent=2).replace("\n", "\n  ")
        fields.append(f"\n  {json.dumps(key)}: {text}")
    return "{" + ",".join(fields) + ("\n}\n" if fields else "}\n")
