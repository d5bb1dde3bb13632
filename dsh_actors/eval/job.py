"""The batch evaluation: run every episode on the current Ray cluster, many agents at once.

Each episode is one agent: its scope (restrictions, guards, the episode's policies as
listeners only that agent hears) on a registry of the episode's mode (scopes hosted
``shared``: an agent costs kilobytes), its own copy of the workspace, its own session
log, and its scripted turns run as agent steps (one ``tool/result`` per call, then the
step's context). An episode that fails is reported and the others go on. Asks are
answered by an approval queue with policy ``never`` (a batch has no human to ask), so
each is recorded and then rejected.

A run owns its output folder: ``run.json`` (what it runs), ``workspaces/<agent>/``,
``logs/<episode>.log``, ``reports/<episode>.json`` (each finished episode), then
``summary.json`` and ``summary.md`` (calls, policy denials, tool errors by code, asks,
``run_code`` sub-calls, latency percentiles). A folder that already holds a run is
refused unless the run is resumed (finished episodes are kept, the rest run again) or
overwritten.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import shutil
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Sequence, TextIO

from tqdm import tqdm

from ..codemode.runtime import CodeRuntimeConfig
from ..core.errors import HarnessError, error_message
from ..core.jsonvalue import thaw
from ..log import replay_cards
from ..render import render_card
from ..runtime.client import ToolRegistry
from ..runtime.session import SessionLog
from ..runtime.step import agent_step
from ..agent import Budgets, ChatModel, ModelConfig, run_agent, score
from ..prompt import SystemPrompt
from ..core.registry import RUN_CODE, snapshot_definition
from ..core.types import ToolDefinition
from ..tools import AgentWorkspaces, reference_tools
from .episodes import Episode, EpisodeError, load_episodes
from .policies import policy_listeners

__all__ = ["EpisodeReport", "RunFolderError", "ToolFailedError", "example_episodes", "run_eval"]


class RunFolderError(HarnessError):
    """The output folder already holds a run (or something else) and neither resuming
    nor overwriting it was asked for."""

    code = "RUN_FOLDER"


class ToolFailedError(HarnessError):
    """A tool's body raised: a tool failure, counted apart from a policy's denial."""

    code = "TOOL_FAILED"


def example_episodes() -> Path:
    """The episodes shipped with the package (the README's first command runs them)."""
    return Path(str(resources.files("dsh_actors") / "examples" / "episodes.jsonl"))


def _example_workspace() -> Path:
    return Path(str(resources.files("dsh_actors") / "examples" / "workspace"))


@dataclass
class EpisodeReport:
    id: str
    agent: str
    status: str = "ok"
    message: str = ""
    calls: int = 0
    ok: int = 0
    denied: int = 0
    asks: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    sub_calls: int = 0
    sub_call_errors: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    # with a model in the loop
    stop: str | None = None
    turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_s: float = 0.0
    tool_s: float = 0.0
    model_turn_ms: list[float] = field(default_factory=list)
    tool_step_ms: list[float] = field(default_factory=list)
    final: str | None = None
    success: bool | None = None

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "errors": dict(self.errors)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "EpisodeReport":
        return cls(**{**data, "errors": Counter(data.get("errors", {}))})


def _classify(report: EpisodeReport, result: Any, seconds: float) -> None:
    report.calls += 1
    report.latencies_ms.append(seconds * 1000)
    if not result.is_error:
        report.ok += 1
    elif result.error is None:
        report.denied += 1  # a policy's denial or block: no harness error class
    else:
        report.errors[result.error["code"]] += 1  # tool failures (TOOL_FAILED) and harness errors


def _coded_failures(definition: ToolDefinition) -> ToolDefinition:
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


async def _run_episode(episode: Episode, registry: ToolRegistry, out: Path, live: TextIO | None,
                       model: ChatModel | None = None) -> EpisodeReport:
    report = EpisodeReport(episode.id, episode.agent_id)
    scope = registry.scope(episode.agent_id)
    session: SessionLog | None = None
    tools: dict[str, Any] = {}
    try:  # everything, the log and the workspace included: one failing episode never stops the others
        log_path = await asyncio.to_thread(_fresh_files, episode, out)  # file work off the event loop
        session = await SessionLog.open_async(episode.agent_id, str(log_path))
        if episode.scope.restrict is not None:
            await scope.restrict({str(key): value for key, value in episode.scope.restrict.items()})
        for guard in episode.scope.guards:
            await scope.guard(_guard(guard.tools, guard.reason))
        for shadow in episode.scope.shadows:
            await scope.register(_shadow(shadow.name, shadow.result, shadow.is_error, shadow.description))
        for event, listener in policy_listeners(episode.policies):
            await scope.on(event, listener)
        if live is not None:  # the definitions (closures and all) only render the live cards
            tools = {d.name: d for d in await scope.visible()}
        await session.append({"type": "turn/start", "agent": episode.agent_id})  # replay runs as this agent

        def seen(call: Any, result: Any, seconds: float) -> None:
            _classify(report, result, seconds)
            if live is not None:
                print(_card(tools, call, result, episode.id), file=live, flush=True)

        if episode.task is not None:
            assert model is not None  # run_eval gives every task a model
            await _with_model(episode, registry, scope, session, model, report, seen)
        else:
            await _scripted(episode, scope, session, seen)
        await session.append({"type": "turn/end"})
        events = await session.events()
        report.asks = sum(1 for e in events if e["type"] == "approval/asked")
        dispatched = [e for e in events if e["type"] == "tool/code-dispatch"]
        report.sub_calls, report.sub_call_errors = len(dispatched), sum(1 for e in dispatched if e["is_error"])
    except Exception as exc:
        report.status, report.message = "failed", error_message(exc)
    finally:
        await scope.close()
        if session is not None:
            await session.close()
    return report


def _fresh_files(episode: Episode, out: Path) -> Path:
    """The episode's own copy of the workspace, and the path of its log (a log left by an
    unfinished run is removed: this run starts it again)."""
    workspace = out / "workspaces" / episode.agent_id
    shutil.rmtree(workspace, ignore_errors=True)
    shutil.copytree(_example_workspace(), workspace)
    log_path = out / "logs" / f"{episode.id}.log"
    if log_path.exists() or log_path.is_symlink():
        if not log_path.is_file() or log_path.is_symlink():
            raise RunFolderError(f"{log_path} is in the way of the episode's log (not a regular file)")
        log_path.unlink()
    return log_path


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


DEFAULT_SYSTEM = ("You are an agent working in a software workspace. Use the tools to do the task; when it is "
                  "done, answer with the result alone.")


async def _with_model(episode: Episode, registry: ToolRegistry, scope: Any, session: SessionLog, model: ChatModel,
                      report: EpisodeReport, seen: Any) -> None:
    """The episode's agent loop: the system prompt assembled for its scope (mode-aware),
    its task, its budgets; then its scorer's verdict on the final answer."""
    prompt = SystemPrompt()
    prompt.section("task", 0, episode.system or DEFAULT_SYSTEM)
    prompt.add_registry(registry)
    assembly = await prompt.assemble({"scope": episode.agent_id})
    limits = episode.limits
    outcome = await run_agent(scope, session, model, system=assembly.text(), tools=assembly.tools,
                              task=episode.task or "", on_result=seen,
                              budgets=Budgets(limits.max_turns, limits.max_tokens, limits.max_wall_s))
    report.stop, report.turns = outcome.stop, outcome.turns
    report.prompt_tokens, report.completion_tokens = outcome.prompt_tokens, outcome.completion_tokens
    report.model_s, report.tool_s = round(outcome.model_s, 4), round(outcome.tool_s, 4)
    report.model_turn_ms = [round(s * 1000, 2) for s in outcome.model_turns_s]
    report.tool_step_ms = [round(s * 1000, 2) for s in outcome.tool_steps_s]
    report.final = outcome.final
    if episode.scorer is not None:
        report.success = score(episode.scorer, outcome.final)
    if outcome.stop == "model_error":
        raise RuntimeError(outcome.message)


def _card(tools: dict[str, Any], call: Any, result: Any, episode: str) -> str:
    definition = tools.get(call["name"])
    args = call["arguments"]
    call_view = definition.present_call(args) if definition is not None and definition.present_call else None
    result_view = definition.present_result(args, result) if definition is not None and definition.present_result else None
    return f"[{episode}] " + render_card(call["name"], args, call_view, result_view, result)


def _percentile(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))], 2)


def _summary(reports: list[EpisodeReport], invalid: list[EpisodeError], seconds: float) -> dict[str, Any]:
    latencies = [ms for r in reports for ms in r.latencies_ms]
    errors: Counter[str] = Counter()
    for r in reports:
        errors.update(r.errors)
    return {
        "episodes": len(reports) + len(invalid),
        "episodes_ok": sum(r.status == "ok" for r in reports),
        "episodes_failed": sum(r.status != "ok" for r in reports) + len(invalid),
        "invalid": [str(e) for e in invalid],
        "calls": sum(r.calls for r in reports),
        "ok": sum(r.ok for r in reports),
        "denials": sum(r.denied for r in reports),
        "tool_errors": sum(errors.values()),
        "asks": sum(r.asks for r in reports),
        "errors_by_code": dict(sorted(errors.items())),
        "sub_calls": {"total": sum(r.sub_calls for r in reports),
                      "ok": sum(r.sub_calls - r.sub_call_errors for r in reports),
                      "errors": sum(r.sub_call_errors for r in reports)},
        "latency_ms": {"p50": _percentile(latencies, 50), "p90": _percentile(latencies, 90),
                       "p99": _percentile(latencies, 99)},
        "model": _model_summary([r for r in reports if r.stop is not None]),
        "wall_s": round(seconds, 3),
        "per_episode": [{"id": r.id, "agent": r.agent, "status": r.status, "message": r.message, "calls": r.calls,
                         "ok": r.ok, "denied": r.denied, "asks": r.asks, "errors": dict(r.errors),
                         "sub_calls": r.sub_calls, "sub_call_errors": r.sub_call_errors,
                         **({"stop": r.stop, "turns": r.turns, "tokens": r.prompt_tokens + r.completion_tokens,
                             "model_s": r.model_s, "tool_s": r.tool_s, "model_turn_ms": r.model_turn_ms,
                             "tool_step_ms": r.tool_step_ms, "success": r.success, "final": r.final}
                            if r.stop is not None else {})}
                        for r in reports],
    }


def _model_summary(reports: list[EpisodeReport]) -> dict[str, Any] | None:
    """Episodes with a model in the loop: success, turns, tokens, model vs tool time."""
    if not reports:
        return None
    scored = [r for r in reports if r.success is not None]
    model_s, tool_s = sum(r.model_s for r in reports), sum(r.tool_s for r in reports)
    return {
        "episodes": len(reports),
        "scored": len(scored),
        "success_rate": round(sum(bool(r.success) for r in scored) / len(scored), 4) if scored else None,
        "stops": dict(Counter(r.stop for r in reports if r.stop is not None)),
        "turns": sum(r.turns for r in reports),
        "tokens": {"prompt": sum(r.prompt_tokens for r in reports),
                   "completion": sum(r.completion_tokens for r in reports)},
        "model_s": round(model_s, 3), "tool_s": round(tool_s, 3),
        "model_share": round(model_s / (model_s + tool_s), 4) if model_s + tool_s else None,
        "model_turn_ms": _spread([ms for r in reports for ms in r.model_turn_ms]),
        "tool_step_ms": _spread([ms for r in reports for ms in r.tool_step_ms]),
    }


def _spread(values: list[float]) -> dict[str, float | None]:
    return {"p50": _percentile(values, 50), "p90": _percentile(values, 90), "p99": _percentile(values, 99),
            "max": round(max(values), 2) if values else None}


def _markdown(summary: dict[str, Any]) -> str:
    latency = summary["latency_ms"]
    lines = [
        "# Evaluation summary", "",
        f"{summary['episodes']} episodes ({summary['episodes_ok']} ok, {summary['episodes_failed']} failed), "
        f"{summary['calls']} calls in {summary['wall_s']} s.", "",
        "| calls | ok | policy denials | tool errors | asks | run_code sub-calls (errors) | p50 ms | p90 ms | p99 ms |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {summary['calls']} | {summary['ok']} | {summary['denials']} | {summary['tool_errors']} | "
        f"{summary['asks']} | {summary['sub_calls']['total']} ({summary['sub_calls']['errors']}) | "
        f"{latency['p50']} | {latency['p90']} | {latency['p99']} |", "",
        "| error code | count |", "|---|---|",
        *[f"| {code} | {count} |" for code, count in summary["errors_by_code"].items()], "",
        "| episode | agent | status | calls | ok | denied | asks | errors |", "|---|---|---|---|---|---|---|---|",
        *[f"| {e['id']} | {e['agent']} | {e['status']}{(': ' + e['message']) if e['message'] else ''} | {e['calls']} | "
          f"{e['ok']} | {e['denied']} | {e['asks']} | {sum(e['errors'].values())} |" for e in summary["per_episode"]],
    ]
    model = summary.get("model")
    if model:
        rate = "—" if model["success_rate"] is None else f"{model['success_rate'] * 100:.1f}%"
        turn, step = model["model_turn_ms"], model["tool_step_ms"]
        lines += ["", "| model episodes | success (scored) | turns | prompt tokens | completion tokens | model s | "
                      "tool s | stops |", "|---|---|---|---|---|---|---|---|",
                  f"| {model['episodes']} | {rate} ({model['scored']}) | {model['turns']} | "
                  f"{model['tokens']['prompt']} | {model['tokens']['completion']} | {model['model_s']} | "
                  f"{model['tool_s']} | {', '.join(f'{k} {v}' for k, v in sorted(model['stops'].items()))} |",
                  "", "| ms | p50 | p90 | p99 | max |", "|---|---|---|---|---|",
                  f"| a model turn | {turn['p50']} | {turn['p90']} | {turn['p99']} | {turn['max']} |",
                  f"| a step's tool calls | {step['p50']} | {step['p90']} | {step['p99']} | {step['max']} |"]
    if summary["invalid"]:
        lines += ["", "Invalid episodes:", *[f"- {line}" for line in summary["invalid"]]]
    return "\n".join(lines) + "\n"


_RUN_FILE = "run.json"


def _refuse_up_front(episodes: list[Episode], invalid: list[EpisodeError], extra_tools: set[str],
                     model: ModelConfig | None) -> dict[str, ModelConfig]:
    """Move to ``invalid`` (as file:line) each episode that cannot run: its scope names
    tools nobody has, or it has a task and no model. Returns each task's model."""
    known = {d.name for d in reference_tools(str(_example_workspace()))} | extra_tools | {RUN_CODE}
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
        fields.update({k: v for k, v in (("temperature", choice.temperature), ("seed", choice.seed)) if v is not None})
    if not fields.get("model"):
        raise ValueError("a task needs a model: give the episode a model name, or run with --model "
                         "(and --base-url for anything but OpenAI's API)")
    return ModelConfig(**fields)


def _prepare(out: Path, episodes: list[Episode], resume: bool, overwrite: bool) -> dict[str, EpisodeReport]:
    """Make ``out`` this run's folder; returns the reports of episodes a resumed run keeps."""
    if resume and overwrite:
        raise RunFolderError("--resume and --overwrite contradict each other; pass one")
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"--out {out} is a file, not a folder")
    used = out.exists() and any(out.iterdir())
    ours = (out / _RUN_FILE).is_file()
    if used and not ours:
        raise RunFolderError(f"--out {out} is not empty and holds no dsh-actors run; choose a new or empty folder")
    if used and not (resume or overwrite):
        state = "a finished run" if (out / "summary.json").exists() else "an unfinished run"
        raise RunFolderError(f"--out {out} already holds {state}; pass --resume to keep its finished episodes "
                             "and run the rest, --overwrite to start over, or choose a new folder")
    if used and overwrite:
        shutil.rmtree(out)
    kept: dict[str, EpisodeReport] = {}
    if used and resume:
        wanted = {e.id for e in episodes}
        for path in (out / "reports").glob("*.json"):
            report = EpisodeReport.from_json(json.loads(path.read_text()))
            if report.id in wanted and report.status == "ok":
                kept[report.id] = report
        for stale in ("summary.json", "summary.md"):
            (out / stale).unlink(missing_ok=True)
    for folder in ("logs", "reports", "workspaces"):
        (out / folder).mkdir(parents=True, exist_ok=True)
    (out / _RUN_FILE).write_text(json.dumps({"episodes": [e.id for e in episodes]}, indent=2) + "\n")
    return kept


async def run_eval(paths: list[str | Path], out_dir: str | Path, *, concurrency: int = 16,
                   live: TextIO | None = None, progress: TextIO | None = sys.stderr,
                   resume: bool = False, overwrite: bool = False, tools: Sequence[Any] = (),
                   model: ModelConfig | None = None) -> dict[str, Any]:
    """Run the episodes in ``paths``; write logs and summaries under ``out_dir``; return the
    summary. ``out_dir`` must be new or empty unless ``resume`` (keep the finished episodes
    of the run there, run the others) or ``overwrite`` (start over); else
    :class:`RunFolderError`. ``progress`` gets a progress bar (rate, ETA). ``tools`` are
    registered next to the reference tools (a raising one counts as ``TOOL_FAILED``).
    ``model`` is the job's model for episodes with a ``task`` (each may override its name,
    endpoint and sampling); such an episode with no model at all is reported up front."""
    started = time.monotonic()
    episodes, invalid = load_episodes(paths)
    extra = [snapshot_definition(t) for t in tools]
    configs = _refuse_up_front(episodes, invalid, {d.name for d in extra}, model)
    for error in invalid:
        if progress is not None:
            print(f"invalid episode: {error}", file=progress, flush=True)
    out = Path(out_dir).resolve()
    kept = _prepare(out, episodes, resume, overwrite)
    tag = uuid.uuid4().hex[:8]
    registries: dict[str, ToolRegistry] = {}
    models: dict[ModelConfig, ChatModel] = {}  # its concurrency limit holds across the job's episodes
    bar = tqdm(total=len(episodes), initial=len(kept), unit="episode", file=progress, disable=progress is None,
               mininterval=0.5, dynamic_ncols=True)
    try:
        for mode in sorted({e.mode for e in episodes if e.id not in kept}):
            registry = ToolRegistry.connect(f"eval-{mode}-{tag}", mode=mode, scope_hosting="shared",  # a fleet
                                            code_runtime=CodeRuntimeConfig() if mode != "native" else None)
            registries[mode] = registry
            for definition in [*reference_tools(AgentWorkspaces(out / "workspaces")), *extra]:
                await registry.register(_coded_failures(definition))
            await registry.approvals(policy="never")
        models.update({config: ChatModel(config) for config in set(configs.values())})  # one per endpoint
        gate = asyncio.Semaphore(max(1, concurrency))
        failures = [0]

        async def one(episode: Episode) -> EpisodeReport:
            if episode.id in kept:
                return kept[episode.id]
            async with gate:
                chat = models[configs[episode.id]] if episode.id in configs else None
                report = await _run_episode(episode, registries[episode.mode], out, live, chat)
            await asyncio.to_thread((out / "reports" / f"{episode.id}.json").write_text,
                                    json.dumps(report.to_json()) + "\n")
            if report.status != "ok":
                failures[0] += 1
                bar.write(f"{episode.id}: {report.status} — {report.message}", file=progress)
            bar.set_postfix(failed=failures[0], refresh=False)
            bar.update()
            return report

        reports = list(await asyncio.gather(*(one(e) for e in episodes)))
    finally:
        bar.close()
        for registry in registries.values():
            registry.shutdown()
        for chat in models.values():
            await chat.close()
    summary = _summary(reports, invalid, time.monotonic() - started)
    summary["out"] = str(out)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "summary.md").write_text(_markdown(summary))
    return summary


def show_log(path: str | Path, workspace: str | Path | None = None) -> tuple[str, str | None]:
    """``dsh-actors show LOG``: a session log re-rendered — each call as a card, with the
    user's messages, approvals and ``run_code`` sub-calls where they happened. Returns the
    text and, for a damaged log, a sentence on what is damaged, where and what was
    recovered (what is recoverable is still shown)."""
    from ..log import scan_log

    scan = scan_log(Path(path).read_bytes(), path, recover_after=True)
    root = str(workspace or Path(path).resolve().parent)
    tools = {d.name: d for d in reference_tools(root)}
    parts = []
    for events in (scan.records, scan.after):
        cards = iter(replay_cards(events, tools))
        for event in events:
            kind = event.get("type")
            if kind == "tool/result":
                card = next(cards)
                parts.append(render_card(event["name"], thaw(event.get("arguments")), card["call"], card["result"], event))
            elif kind == "user/message":
                parts.append(f"» user: {event['content']}")
            elif kind == "approval/asked":
                parts.append(f"? approval asked for {event['tool_name']} ({event['id']})"
                             + (f": {event['reason']}" if event.get("reason") else ""))
            elif kind == "approval/decided":
                parts.append(f"? approval {event['outcome']} ({event['id']})")
            elif kind == "tool/code-dispatch":
                mark = "✗" if event["is_error"] else "✓"
                args = json.dumps(thaw(event["arguments"]), ensure_ascii=False)
                parts.append(f"  ↳ {mark} {event['name']}({args}) — {event['result_summary']}")
        if events is scan.records and scan.damaged:
            parts.append(f"!! damaged bytes {scan.end}-{scan.resumes_at}: events there are lost")
    return "\n".join(parts), (scan.describe(path) if scan.damaged or scan.torn_bytes else None)
