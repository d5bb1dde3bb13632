"""How one episode runs, on whichever episode runner has it (:mod:`.runners`).

An episode is one agent: its scope (restrictions, guards, shadows, the episode's policies
as listeners only that agent hears) on the job's registry for its mode, its own copy of
the workspace template, its own session log, and its turns (scripted, or a model in the
loop). Everything it touches is on the runner's node: the workspace is copied to that
node's disk, the log is written by that node's session writer, and its calls go to that
node's executors (the caller side's locality). An episode that fails is reported and the
others go on: nothing an episode does raises out of :func:`run_episode`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import inspect
import io
import os
import shutil
import stat
import threading
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..agent import Budgets, ChatModel, run_agent, score
from ..core import telemetry
from ..core.errors import HarnessError, error_message
from ..core.types import ToolDefinition
from ..log.frames import read_records
from ..prompt import SystemPrompt
from ..render import render_card
from ..runtime.client import ToolRegistry
from ..runtime.envhost import end_environment, start_environment
from ..runtime.session.client import SessionLog
from ..runtime.step import agent_step
from ..tools import AgentWorkspaces
from ..tools.workspace import node_folder
from .episodes import Episode
from .policies import policy_listeners
from .reports import EpisodeReport, classify
from .termination import is_infra_code, termination

__all__ = ["DEFAULT_SYSTEM", "JobFiles", "ToolFailedError", "coded_failures", "pack_folder", "run_episode"]

DEFAULT_SYSTEM = ("You are an agent working in a software workspace. Use the tools to do the task; when it is "
                  "done, answer with the result alone.")


class ToolFailedError(HarnessError):
    """A tool's body raised: a tool failure, counted apart from a policy's denial."""

    code = "TOOL_FAILED"


@dataclass(frozen=True)
class JobFiles:
    """Where a job's episodes keep their files, the same on every node.

    ``shared``: ``root`` is on storage every node mounts (the run's ``--out``): workspaces
    in ``root/workspaces/<agent>``, logs in ``root/logs``. Otherwise ``root`` is a scratch
    folder on each node's own disk, and an episode's files are in ``root/workspaces/<node>/``
    and ``root/logs/<node>/`` (:func:`~dsh_actors.tools.workspace.node_folder`) on the node
    that ran it (a call that ran elsewhere would find no workspace, not another copy) —
    except the logs of episodes run on ``home_node`` (the driver's), which go straight into
    ``home_logs`` (the run's ``--out/logs``) instead of being sent back to the driver."""

    root: str
    shared: bool
    template: Any
    """The workspace template as a tar archive (bytes, or an object ref to them)."""
    home_node: str | None = None
    home_logs: str | None = None
    environments: str = "native"
    """``native``: each episode's tools run in an environment of its own (:mod:`dsh_actors.envs`);
    ``host``: on the host, in its workspace — no walls, chosen explicitly."""
    keep: str = "failed"
    """Which episodes' workspaces stay once they end: ``never``, ``failed`` or ``all``."""
    hidden: tuple[str, ...] = ()
    """Host paths no environment may see (the run's output folder)."""

    @functools.cached_property
    def workspaces(self) -> AgentWorkspaces:
        return AgentWorkspaces(Path(self.root) / "workspaces", per_node=not self.shared)

    def logs(self) -> Path:
        """This node's log folder."""
        if self.shared:
            return Path(self.root) / "logs"
        if self.home_logs is not None and node_folder() == self.home_node:
            return Path(self.home_logs)
        return Path(self.root) / "logs" / node_folder()

    def kept_in_place(self, log: Path) -> bool:
        """Whether ``log`` is already where the run keeps it (nothing to send back)."""
        return self.shared or (self.home_logs is not None and log.parent == Path(self.home_logs))


def pack_folder(folder: str | Path) -> bytes:
    """``folder`` as a tar archive (the workspace template, sent once to every runner)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        archive.add(str(folder), arcname=".")
    return buffer.getvalue()


def unpack_folder(data: bytes, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as archive:
        archive.extractall(into, filter="data")  # no absolute paths, links out or devices


def coded_failures(definition: ToolDefinition) -> ToolDefinition:
    """``definition`` whose body's uncoded exceptions become :class:`ToolFailedError`, so a
    raising tool is told apart from a denial (whose result has no error code). A plain
    body stays plain: it still runs on the executor's threads, never on its loop."""
    body = definition.execute

    def failed(exc: Exception) -> Exception:
        return exc if isinstance(exc, HarnessError) else ToolFailedError(error_message(exc))

    if inspect.iscoroutinefunction(body):
        async def run_async(args: Any, ctx: Any) -> Any:
            try:
                return await body(args, ctx)
            except Exception as exc:
                raise failed(exc) from exc
        return dataclasses.replace(definition, execute=run_async)

    def run(args: Any, ctx: Any) -> Any:
        try:
            return body(args, ctx)
        except Exception as exc:
            raise failed(exc) from exc
    return dataclasses.replace(definition, execute=run)


def _shadow(name: str, result: str, is_error: bool, description: str | None) -> dict[str, Any]:
    def execute(args: Any, ctx: Any) -> Any:
        if is_error:
            raise ToolFailedError(result)
        return [{"type": "text", "text": result}]

    return {"name": name, "description": description or f"{name} (canned for this agent)",
            "parameters": {"type": "object"}, "execute": execute}


def _guard(tools: list[str], reason: str) -> Any:
    names = frozenset(tools)
    return lambda execution: reason if execution.name in names else None


def started_report(episode: Episode, node: str | None, attempt: int, model: str | None) -> EpisodeReport:
    """An episode's report before anything ran: one with a task counts as a model episode
    (unscored: a failure until its scorer says otherwise) whatever happens next."""
    report = EpisodeReport(episode.id, episode.agent_id, node=node, attempts=attempt,
                           model=model or ("(none)" if episode.task is not None else None), task=episode.task_id)
    if episode.task is not None and episode.scorer is not None:
        report.success = False
    return report


_SNAPSHOT_BYTES, _SNAPSHOT_FILES = 8 << 20, 2000  # a template up to this size is copied from memory
_snapshots: dict[Path, tuple[list[str], list[tuple[str, bytes, int]]] | None] = {}
_snapshots_lock = threading.Lock()


def _snapshot(template: Path) -> tuple[list[str], list[tuple[str, bytes, int]]] | None:
    """The template's folders and files (bytes and mode), read once per process; ``None``
    for one too large to hold or holding links (it is copied from disk instead)."""
    with _snapshots_lock:
        if template in _snapshots:
            return _snapshots[template]
    folders: list[str] = []
    files: list[tuple[str, bytes, int]] = []
    size, snapshot = 0, None
    for root, names, leaves in os.walk(template):
        if any(os.path.islink(os.path.join(root, name)) for name in names + leaves):
            break  # links are copied as copytree copies them
        here = Path(root).relative_to(template)
        folders += [str(here / name) for name in sorted(names)]
        for leaf in sorted(leaves):
            path = Path(root) / leaf
            data = path.read_bytes()  # a link inside the template is followed, as copytree does
            size += len(data)
            files.append((str(here / leaf), data, path.stat().st_mode & 0o777))
        if size > _SNAPSHOT_BYTES or len(files) > _SNAPSHOT_FILES:
            break  # too large to hold: copied from disk too
    else:
        snapshot = (folders, files)
    with _snapshots_lock:
        _snapshots[template] = snapshot
    return snapshot


def _copy_template(template: Path, workspace: Path) -> None:
    """A fresh copy of ``template`` at ``workspace``: from memory (plain syscalls; the
    template is read once per process), or with ``copytree`` for a large one."""
    snapshot = _snapshot(template)
    if snapshot is None:
        shutil.copytree(template, workspace)
        return
    folders, files = snapshot
    workspace.mkdir(parents=True)
    for folder in folders:
        os.mkdir(workspace / folder)
    masked = _umask()
    for name, data, mode in files:
        fd = os.open(workspace / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            if mode & masked:
                os.fchmod(fd, mode)  # the template's mode exactly, whatever the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        finally:
            os.close(fd)


@functools.cache
def _umask() -> int:
    """This process's umask, read once from /proc (setting it to read it would race with
    the threads making files); ``0o777`` where it cannot be read: every mode is then set."""
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1], 8) for line in status if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        return 0o777


_made: set[Path] = set()  # log folders this process made (made once, not once per episode)


def _fresh_files(episode: Episode, files: JobFiles, template: Path) -> tuple[Path, Path]:
    """The episode's own copy of the workspace on this node, and the path of its log (a
    log or workspace left by an earlier attempt is removed: this one starts again)."""
    workspace = files.workspaces.parent / episode.agent_id
    if os.path.lexists(workspace):
        shutil.rmtree(workspace, ignore_errors=True)
    _copy_template(template, workspace)
    logs = files.logs()
    if logs not in _made:
        logs.mkdir(parents=True, exist_ok=True)
        _made.add(logs)
    log_path = logs / f"{episode.id}.log"
    try:
        found = os.lstat(log_path)
    except FileNotFoundError:
        return workspace, log_path
    if not stat.S_ISREG(found.st_mode):  # a folder, a link, a device: not ours to remove
        raise HarnessError(f"{log_path} is in the way of the episode's log (not a regular file)")
    log_path.unlink()
    return workspace, log_path


async def run_episode(episode: Episode, registry: ToolRegistry, files: JobFiles, template: Path, *,
                      model: ChatModel | None = None, attempt: int = 1,
                      card: Callable[[str], None] | None = None) -> tuple[EpisodeReport, Path | None]:
    """Run ``episode``; its report and the path of its log on this node. ``card`` hears
    each call's card as it completes (live cards); ``attempt`` > 1 starts the agent's
    scope afresh (what an earlier attempt set up there is dropped first)."""
    report = started_report(episode, node_folder(), attempt, model.config.model if model is not None else None)
    scope = registry.scope(episode.agent_id)
    session: SessionLog | None = None
    log_path: Path | None = None
    tools: dict[str, Any] = {}
    environment: str | None = None
    failure: str | None = None  # the code of what failed the episode outside its calls
    try:  # everything, the log and the workspace included: one failing episode never stops the others
        if attempt > 1:
            await scope.close()
        workspace, log_path = await asyncio.to_thread(_fresh_files, episode, files, template)
        report.workspace = str(workspace)
        session_id = registry.session_id(episode.agent_id)
        if files.environments == "native":
            # Its root holds the host's system alone (every other episode's files, the run's
            # output and Ray's session are not in it); the job's paths are named for any other backend.
            hidden = tuple(p for p in files.hidden if not str(workspace).startswith(p.rstrip("/") + "/"))
            environment = await start_environment(session_id, episode.environment.spec(str(workspace), hidden))
        session = await SessionLog.open_async(session_id, str(log_path))
        if episode.scope.restrict is not None:
            await scope.restrict({str(key): value for key, value in episode.scope.restrict.items()})
        for guard in episode.scope.guards:
            await scope.guard(_guard(guard.tools, guard.reason))
        for shadow in episode.scope.shadows:
            await scope.register(_shadow(shadow.name, shadow.result, shadow.is_error, shadow.description))
        for event, listener in policy_listeners(episode.policies):
            await scope.on(event, listener)
        if card is not None:  # the definitions (closures and all) only render the live cards
            tools = {d.name: d for d in await scope.visible()}
        await session.append({"type": "turn/start", "agent": episode.agent_id})  # replay runs as this agent

        def seen(call: Any, result: Any, seconds: float) -> None:
            classify(report, result, seconds, str(call.get("name", "")))
            if card is not None:
                card(_card(tools, call, result, episode.id, episode.agent_id))

        if episode.task is not None:
            assert model is not None  # the job gives every task a model
            await _with_model(episode, registry, scope, session, model, report, seen)
        else:
            with telemetry.agent_span(episode.agent_id):  # a model's run has its own (run_agent's)
                await _scripted(episode, scope, session, seen)
        await session.append({"type": "turn/end"})
    except Exception as exc:
        report.status, report.message, failure = "failed", error_message(exc), getattr(exc, "code", None)
    finally:
        await scope.close()
        if environment is not None:  # every process it holds ends with the episode
            await end_environment(registry.session_id(episode.agent_id))
        if session is not None:
            summary = await session.close()
            _count_logged(report, summary)
            if report.status == "ok" and summary is not None and not await asyncio.to_thread(_on_disk, log_path, summary):
                report.status, report.message = "failed", f"its log {log_path} does not hold what its writer took"
        conclude(report, failure)
        if report.workspace is not None and not _kept(files.keep, report.status):  # (once its end is known)
            await asyncio.to_thread(shutil.rmtree, report.workspace, True)
            report.workspace = None
    return report, log_path


def conclude(report: EpisodeReport, failure: str | None = None) -> None:
    """Say how the episode ended (:func:`~.termination.termination`); one whose call was
    lost to infrastructure did not end ``ok``: its later turns stood on a result the model
    did not earn."""
    report.termination = termination(stop=report.stop, errors=report.errors, failure_code=failure,
                                      failed=report.status != "ok")
    if report.termination["reason"] == "tool_lost" and report.status == "ok":
        lost = sorted(code for code in report.errors if is_infra_code(code))
        report.status, report.message = "failed", f"a tool call was lost to infrastructure ({', '.join(lost)})"


KEEP_WORKSPACES = ("never", "failed", "all")
"""Which episodes' workspaces a job keeps (``--keep-workspaces``)."""


def _kept(keep: str, status: str) -> bool:
    return keep == "all" or (keep == "failed" and status != "ok")


def _on_disk(log_path: Path | None, summary: dict[str, Any]) -> bool:
    """Whether the episode's log file is there with every event its writer acknowledged
    (a report that says ``ok`` must never stand beside a missing or emptied trajectory)."""
    try:
        return log_path is not None and summary["events"] == len(read_records(log_path))
    except (OSError, HarnessError):
        return False


def _count_logged(report: EpisodeReport, summary: dict[str, Any] | None) -> None:
    """What the episode's log holds that its loop did not see: the asks the approval
    queue logged and the sub-calls Code Mode dispatched (from the log's summary as it
    closed: the events themselves stay on the writer's node)."""
    if summary is None:  # its writer died with the log open: nothing to count from
        return
    by_type, errors = summary["by_type"], summary["errors_by_type"]
    report.asks = by_type.get("approval/asked", 0)
    report.sub_calls = by_type.get("tool/code-dispatch", 0)
    report.sub_call_errors = errors.get("tool/code-dispatch", 0)


async def _scripted(episode: Episode, scope: Any, session: SessionLog, seen: Any) -> None:
    for number, turn in enumerate(episode.turns, start=1):
        if turn.user is not None:
            await session.append({"type": "user/message", "content": turn.user})
        calls = ([{"call_id": f"{episode.id}:{number}:code", "name": "run_code", "arguments": {"code": turn.code}}]
                 if turn.code is not None else
                 [{"call_id": c.call_id or f"{episode.id}:{number}:{i}", "name": c.name,
                   "arguments": c.arguments} for i, c in enumerate(turn.calls, start=1)])
        if not calls:
            continue
        await session.append({"type": "assistant/message", "content": "",
                              "tool_calls": [{"call_id": c["call_id"], "name": c["name"],
                                              "arguments": c["arguments"]} for c in calls]})
        await agent_step(scope, session, calls, on_result=seen)


async def _with_model(episode: Episode, registry: ToolRegistry, scope: Any, session: SessionLog, model: ChatModel,
                      report: EpisodeReport, seen: Any) -> None:
    """The episode's agent loop: the system prompt assembled for its scope (mode-aware),
    its task, its budgets; then its scorer's verdict on the final answer."""
    prompt = SystemPrompt()
    prompt.section("task", 0, episode.system or DEFAULT_SYSTEM)
    prompt.add_registry(registry)
    assembly = await prompt.assemble({"scope": episode.agent_id})
    limits = episode.limits
    report.stop = "model_error"  # until the loop says otherwise: a loop that raises is counted, unscored
    if episode.scorer is not None:
        report.success = False
    outcome = await run_agent(scope, session, model, system=assembly.text(), tools=assembly.tools,
                              task=episode.task or "", on_result=seen,
                              budgets=Budgets(limits.max_turns, limits.max_tokens, limits.max_wall_s,
                                              limits.max_invalid_calls))
    report.stop, report.turns = outcome.stop, outcome.turns
    report.prompt_tokens, report.completion_tokens = outcome.prompt_tokens, outcome.completion_tokens
    report.model_s, report.tool_s = round(outcome.model_s, 4), round(outcome.tool_s, 4)
    report.model_turn_ms = [round(s * 1000, 2) for s in outcome.model_turns_s]
    report.tool_step_ms = [round(s * 1000, 2) for s in outcome.tool_steps_s]
    report.final = outcome.final
    if episode.scorer is not None:  # only a final answer can succeed: a cut-off one never does
        report.success = outcome.stop == "final" and score(episode.scorer, outcome.final)
    if outcome.stop in ("model_error", "malformed_reply"):
        raise RuntimeError(outcome.message)
    if outcome.message:
        report.message = outcome.message


def _card(tools: dict[str, Any], call: Any, result: Any, episode: str, agent: str = "") -> str:
    definition = tools.get(call["name"])
    args = call["arguments"]
    call_view = definition.present_call(args) if definition is not None and definition.present_call else None
    if call_view and isinstance(call_view.get("cwd"), str) and agent:  # the agent's real folder, not the pattern
        call_view = {**call_view, "cwd": call_view["cwd"].replace("<node>", node_folder()).replace("<agent>", agent)}
    result_view = definition.present_result(args, result) if definition is not None and definition.present_result else None
    return f"[{episode}] " + render_card(call["name"], args, call_view, result_view, result)
