"""The batch evaluation: run every episode on the current Ray cluster, many agents at once.

Each episode is one agent: its scope (restrictions, guards, the episode's policies as
listeners only that agent hears) on a registry of the episode's mode, its own session
log, and its scripted turns run as agent steps (one ``tool/result`` per call, then the
step's context). The job writes ``logs/<episode>.log``, ``summary.json`` and
``summary.md`` (calls, denials, asks, errors by code, latency percentiles). An episode
that fails is reported and the others go on. Asks are answered by an approval queue with
policy ``never`` (a batch has no human to ask), so each is recorded and then rejected.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TextIO

from ..codemode.runtime import CodeRuntimeConfig
from ..core.errors import error_message
from ..core.jsonvalue import thaw
from ..log import replay_cards
from ..render import render_card
from ..runtime.client import ToolRegistry
from ..runtime.session import SessionLog
from ..runtime.step import agent_step
from ..tools import reference_tools
from .episodes import Episode, EpisodeError, load_episodes
from .policies import policy_listeners

__all__ = ["EpisodeReport", "example_episodes", "run_eval"]


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
    latencies_ms: list[float] = field(default_factory=list)


def _classify(report: EpisodeReport, result: Any, seconds: float) -> None:
    report.calls += 1
    report.latencies_ms.append(seconds * 1000)
    if not result.is_error:
        report.ok += 1
    elif result.error is None:
        report.denied += 1  # a policy's denial (or a block): no harness error class
    else:
        report.errors[result.error["code"]] += 1


def _shadow(name: str, result: str, is_error: bool, description: str | None) -> dict[str, Any]:
    def execute(args: Any, ctx: Any) -> Any:
        if is_error:
            raise RuntimeError(result)
        return [{"type": "text", "text": result}]

    return {"name": name, "description": description or f"{name} (canned for this agent)",
            "parameters": {"type": "object"}, "execute": execute}


def _guard(tools: list[str], reason: str) -> Any:
    names = frozenset(tools)
    return lambda execution: reason if execution.name in names else None


async def _run_episode(episode: Episode, registry: ToolRegistry, logs: Path, live: TextIO | None) -> EpisodeReport:
    report = EpisodeReport(episode.id, episode.agent_id)
    scope = registry.scope(episode.agent_id)
    session = SessionLog.open(episode.agent_id, str(logs / f"{episode.id}.log"))
    tools = {d.name: d for d in await scope.visible()}
    try:
        await session.events()  # the log is up before approvals or dispatches look for it
        if episode.scope.restrict is not None:
            await scope.restrict({str(key): value for key, value in episode.scope.restrict.items()})
        for guard in episode.scope.guards:
            await scope.guard(_guard(guard.tools, guard.reason))
        for shadow in episode.scope.shadows:
            await scope.register(_shadow(shadow.name, shadow.result, shadow.is_error, shadow.description))
        for event, listener in policy_listeners(episode.policies):
            await scope.on(event, listener)
        tools = {d.name: d for d in await scope.visible()}
        await session.append({"type": "turn/start"})
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

            def seen(call: Any, result: Any, seconds: float) -> None:
                _classify(report, result, seconds)
                if live is not None:
                    print(_card(tools, call, result, episode.id), file=live, flush=True)

            await agent_step(scope, session, calls, on_result=seen)
        await session.append({"type": "turn/end"})
        report.asks = sum(1 for e in await session.events() if e["type"] == "approval/asked")
    except Exception as exc:  # one failing episode never stops the others
        report.status, report.message = "failed", error_message(exc)
    finally:
        await scope.close()
        await session.close()
    return report


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
        "asks": sum(r.asks for r in reports),
        "errors_by_code": dict(sorted(errors.items())),
        "latency_ms": {"p50": _percentile(latencies, 50), "p90": _percentile(latencies, 90),
                       "p99": _percentile(latencies, 99)},
        "wall_s": round(seconds, 3),
        "per_episode": [{"id": r.id, "agent": r.agent, "status": r.status, "message": r.message, "calls": r.calls,
                         "ok": r.ok, "denied": r.denied, "asks": r.asks, "errors": dict(r.errors)}
                        for r in reports],
    }


def _markdown(summary: dict[str, Any]) -> str:
    latency = summary["latency_ms"]
    lines = [
        "# Evaluation summary", "",
        f"{summary['episodes']} episodes ({summary['episodes_ok']} ok, {summary['episodes_failed']} failed), "
        f"{summary['calls']} calls in {summary['wall_s']} s.", "",
        "| calls | ok | denials | asks | errors | p50 ms | p90 ms | p99 ms |",
        "|---|---|---|---|---|---|---|---|",
        f"| {summary['calls']} | {summary['ok']} | {summary['denials']} | {summary['asks']} | "
        f"{sum(summary['errors_by_code'].values())} | {latency['p50']} | {latency['p90']} | {latency['p99']} |", "",
        "| error code | count |", "|---|---|",
        *[f"| {code} | {count} |" for code, count in summary["errors_by_code"].items()], "",
        "| episode | agent | status | calls | ok | denied | asks | errors |", "|---|---|---|---|---|---|---|---|",
        *[f"| {e['id']} | {e['agent']} | {e['status']}{(': ' + e['message']) if e['message'] else ''} | {e['calls']} | "
          f"{e['ok']} | {e['denied']} | {e['asks']} | {sum(e['errors'].values())} |" for e in summary["per_episode"]],
    ]
    if summary["invalid"]:
        lines += ["", "Invalid episodes:", *[f"- {line}" for line in summary["invalid"]]]
    return "\n".join(lines) + "\n"


async def run_eval(paths: list[str | Path], out_dir: str | Path, *, concurrency: int = 16,
                   live: TextIO | None = None, progress: TextIO | None = sys.stderr) -> dict[str, Any]:
    """Run the episodes in ``paths``; write logs and summaries under ``out_dir``; return the summary."""
    started = time.monotonic()
    episodes, invalid = load_episodes(paths)
    for error in invalid:
        if progress is not None:
            print(f"invalid episode: {error}", file=progress, flush=True)
    out = Path(out_dir)
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    workspace = out / "workspace"
    if not workspace.exists():
        shutil.copytree(_example_workspace(), workspace)
    tag = uuid.uuid4().hex[:8]
    registries: dict[str, ToolRegistry] = {}
    for mode in sorted({e.mode for e in episodes}):
        registry = ToolRegistry.connect(f"eval-{mode}-{tag}", mode=mode, scope_hosting="shared",  # a fleet
                                        code_runtime=CodeRuntimeConfig() if mode != "native" else None)
        for definition in reference_tools(str(workspace)):
            await registry.register(definition)
        await registry.approvals(policy="never")
        registries[mode] = registry
    gate = asyncio.Semaphore(max(1, concurrency))
    done = [0]

    async def one(episode: Episode) -> EpisodeReport:
        async with gate:
            report = await _run_episode(episode, registries[episode.mode], logs, live)
        done[0] += 1
        if progress is not None:
            detail = f"{report.calls} calls" + (f" — {report.message}" if report.message else "")
            print(f"[{done[0]}/{len(episodes)}] {episode.id}: {report.status} ({detail})", file=progress, flush=True)
        return report

    try:
        reports = list(await asyncio.gather(*(one(e) for e in episodes)))
    finally:
        for registry in registries.values():
            registry.shutdown()
    summary = _summary(reports, invalid, time.monotonic() - started)
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    (out / "summary.md").write_text(_markdown(summary))
    return summary


def show_log(path: str | Path, workspace: str | Path | None = None) -> str:
    """``dsh-actors show LOG``: a session log's calls as cards, re-rendered from the log."""
    from ..log import read_records

    events = read_records(path)
    root = str(workspace or Path(path).resolve().parent)
    tools = {d.name: d for d in reference_tools(root)}
    rendered = []
    for event, cards in zip([e for e in events if e.get("type") == "tool/result"], replay_cards(events, tools)):
        rendered.append(render_card(event["name"], thaw(event.get("arguments")), cards["call"], cards["result"], event))
    return "\n".join(rendered)
