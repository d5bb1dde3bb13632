"""What an evaluation reports: one :class:`EpisodeReport` per episode, and the run's
summary (``summary.json``'s fields and ``summary.md``'s tables) made from them."""

from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..core.errors import outcome_of
from .episodes import EpisodeError
from .termination import REASONS

__all__ = ["EpisodeReport", "classify", "markdown_of", "percentile", "summary_of"]


@dataclass
class EpisodeReport:
    """What one episode did: its calls by outcome, its model turns, where it ran."""

    id: str
    """The episode's id."""
    agent: str
    """The agent that ran it."""
    status: str = "ok"
    """``ok``, or ``failed`` (``message`` says why)."""
    message: str = ""
    """Why it failed (empty when it did not)."""
    calls: int = 0
    """Tool calls made (``run_code`` counts once; its sub-calls are ``sub_calls``)."""
    ok: int = 0
    """Calls that succeeded."""
    denied: int = 0
    """Calls a policy denied or blocked."""
    asks: int = 0
    """Approvals asked for."""
    errors: Counter[str] = field(default_factory=Counter)
    """Failed calls by error code (``TOOL_FAILED``, ``INVALID_ARGS``, ``TOOL_TIMEOUT``…)."""
    sub_calls: int = 0
    """Tool calls made from ``run_code`` programs."""
    sub_call_errors: int = 0
    """Of those, the ones that failed."""
    latencies_ms: list[float] = field(default_factory=list)
    """Each call's duration, in call order."""
    call_tools: list[str] = field(default_factory=list)
    """Each call's tool, in call order (beside ``latencies_ms``)."""
    # with a model in the loop
    model: str | None = None
    """The model's name, for an episode with a task (``null``: scripted)."""
    stop: str | None = None
    """How the model's run ended: ``final``, ``length``, ``content_filter``, ``max_turns``,
    ``max_tokens``, ``max_wall``, ``aborted``, ``model_error``, ``malformed_reply``."""
    turns: int = 0
    """Model turns taken."""
    prompt_tokens: int = 0
    """Prompt tokens, as the endpoint counted them, over every turn."""
    completion_tokens: int = 0
    """Completion tokens, as the endpoint counted them, over every turn."""
    model_s: float = 0.0
    """Seconds spent waiting for the model."""
    tool_s: float = 0.0
    """Seconds spent in the agent's tool steps."""
    model_turn_ms: list[float] = field(default_factory=list)
    """Each model turn's duration."""
    tool_step_ms: list[float] = field(default_factory=list)
    """Each tool step's duration (its calls, parallel where they may be)."""
    final: str | None = None
    """The model's last answer (a cut-off or withheld one included, never scored)."""
    success: bool | None = None
    """The scorer's verdict; ``null`` without a scorer; ``false`` for any stop but ``final``."""
    # where it ran
    node: str | None = None
    """The node whose runner ran it (its workspace, log and calls were there)."""
    workspace: str | None = None
    """Its workspace's path on that node."""
    runner: str | None = None
    """The runner actor that ran it (``dsh-runner:<job>:<id>``, as ``ray list actors`` shows)."""
    task: str | None = None
    """The episode it is a run of, when its task runs more than once (``repeat``)."""
    termination: dict[str, Any] | None = None
    """How it ended and whose doing that was: ``{reason, infra}`` (``dsh_actors.eval.termination``);
    ``infra`` is true exactly when the end says nothing about the model."""
    attempts: int = 1
    """How many times it ran: 1, more when its runner died or (``--retry-infra``) the
    infrastructure ended an attempt."""
    retried: list[dict[str, Any]] = field(default_factory=list)
    """The earlier attempts, each ``{attempt, termination | runner_lost, message, log}``
    (``log``: its own log, ``<id>.attempt-<n>.log``, when kept)."""
    reran: str | None = None
    """Why it ran a second time (its first runner died), when it did."""

    def to_json(self) -> dict[str, Any]:
        # Field by field, lists copied: ``dataclasses.asdict`` deep-copies every value and
        # cost a job's driver more than anything else it did per episode.
        data = {name: getattr(self, name) for name in _FIELDS}
        for name in _LISTS:
            data[name] = list(data[name])
        data["errors"] = dict(self.errors)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "EpisodeReport":
        return cls(**{**data, "errors": Counter(data.get("errors", {}))})


_FIELDS = tuple(f.name for f in dataclasses.fields(EpisodeReport))
_LISTS = tuple(f.name for f in dataclasses.fields(EpisodeReport) if f.default_factory is list)


def classify(report: EpisodeReport, result: Any, seconds: float, tool: str = "") -> None:
    report.calls += 1
    report.latencies_ms.append(seconds * 1000)
    report.call_tools.append(tool)
    outcome, code = outcome_of(result)
    if outcome == "ok":
        report.ok += 1
    elif outcome == "denied":
        report.denied += 1  # a policy's denial or block: no harness error class
    else:
        report.errors[code] += 1  # tool failures (TOOL_FAILED) and harness errors



def percentile(values: list[float], p: float) -> float | None:
    """The ``p``-th percentile, interpolated between the closest ranks (numpy's default:
    the p50 of two samples is their mean)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = p / 100 * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return round(ordered[low] + (ordered[high] - ordered[low]) * (rank - low), 2)


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(at)) + " UTC"


def _shown(value: Any) -> str:
    return "—" if value is None else str(value)


def summary_of(reports: list[EpisodeReport], invalid: list[EpisodeError], seconds: float,
               breakers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    latencies = [ms for r in reports for ms in r.latencies_ms]
    errors: Counter[str] = Counter()
    for r in reports:
        errors.update(r.errors)
    return {
        "episodes": len(reports) + len(invalid),
        "episodes_ok": sum(r.status == "ok" for r in reports),
        "episodes_failed": sum(r.status != "ok" for r in reports) + len(invalid),
        "episodes_infra": sum(bool(r.termination and r.termination["infra"]) for r in reports),
        "terminations": dict(sorted(Counter(r.termination["reason"] for r in reports if r.termination).items())),
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
        "latency_ms": {"p50": percentile(latencies, 50), "p90": percentile(latencies, 90),
                       "p99": percentile(latencies, 99)},
        "model": _model_summary([r for r in reports if r.model is not None or r.stop is not None]),
        "repeats": _repeats([r for r in reports if r.task is not None]),
        "breakers": list(breakers or []),
        "wall_s": round(seconds, 3),
        "per_episode": [{"id": r.id, "agent": r.agent, "status": r.status, "message": r.message, "calls": r.calls,
                         "ok": r.ok, "denied": r.denied, "asks": r.asks, "errors": dict(r.errors),
                         "sub_calls": r.sub_calls, "sub_call_errors": r.sub_call_errors,
                         "node": r.node, "workspace": r.workspace, "attempts": r.attempts,
                         "termination": r.termination, **({"reran": r.reran} if r.reran else {}),
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


def passed(report: EpisodeReport) -> bool:
    """Whether a run passed: its scorer's verdict, or (unscored) that it ended ``ok``."""
    return bool(report.success) if report.success is not None else report.status == "ok"


def pass_at(n: int, c: int, k: int) -> float:
    """The chance that at least one of ``k`` runs drawn from ``n`` (``c`` passed) passes."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_all(n: int, c: int, k: int) -> float:
    """pass^k: the chance that every one of ``k`` runs drawn from ``n`` (``c`` passed) passes."""
    return math.comb(c, k) / math.comb(n, k)


def _repeats(runs: list[EpisodeReport]) -> dict[str, Any] | None:
    """Tasks run more than once: per task and over all, pass@k and pass^k for each k up to
    the runs a task has, from the runs the infrastructure did not end (those say nothing
    about the model: they are left out, and counted apart by reason)."""
    if not runs:
        return None
    by_task: dict[str, list[EpisodeReport]] = {}
    for run in runs:
        by_task.setdefault(str(run.task), []).append(run)
    tasks: dict[str, Any] = {}
    for task, reports in sorted(by_task.items()):
        kept = [r for r in reports if not (r.termination and r.termination["infra"])]
        n, c = len(kept), sum(passed(r) for r in kept)
        tasks[task] = {"runs": len(reports), "counted": n, "passed": c,
                       "pass@k": {k: round(pass_at(n, c, k), 4) for k in range(1, n + 1)},
                       "pass^k": {k: round(pass_all(n, c, k), 4) for k in range(1, n + 1)}}
    deepest = min(t["counted"] for t in tasks.values())
    infra = Counter(r.termination["reason"] for r in runs if r.termination and r.termination["infra"])
    return {
        "tasks": tasks,
        "pass@k": {k: round(sum(t["pass@k"][k] for t in tasks.values()) / len(tasks), 4) for k in range(1, deepest + 1)},
        "pass^k": {k: round(sum(t["pass^k"][k] for t in tasks.values()) / len(tasks), 4) for k in range(1, deepest + 1)},
        "infra_rate": {reason: round(count / len(runs), 4) for reason, count in sorted(infra.items())},
    }


def _spread(values: list[float]) -> dict[str, float | None]:
    return {"p50": percentile(values, 50), "p90": percentile(values, 90), "p99": percentile(values, 99),
            "max": round(max(values), 2) if values else None}


def markdown_of(summary: dict[str, Any]) -> str:
    latency = summary["latency_ms"]
    lines = [
        "# Evaluation summary", "",
        f"{summary['episodes']} episodes ({summary['episodes_ok']} ok, {summary['episodes_failed']} failed), "
        f"{summary['calls']} calls in {summary['wall_s']} s.", "",
        "Endings: " + (", ".join(f"{reason} {count}{' (infrastructure)' if REASONS[reason].infra else ''}"
                                  for reason, count in summary.get("terminations", {}).items()) or "none") + ".", "",
        "| calls | ok | policy denials | tool errors | asks | run_code sub-calls (errors) | p50 ms | p90 ms | p99 ms |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {summary['calls']} | {summary['ok']} | {summary['denials']} | {summary['tool_errors']} | "
        f"{summary['asks']} | {summary['sub_calls']['total']} ({summary['sub_calls']['errors']}) | "
        f"{_shown(latency['p50'])} | {_shown(latency['p90'])} | {_shown(latency['p99'])} |", "",
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
                  "| a model turn | " + " | ".join(_shown(turn[k]) for k in ("p50", "p90", "p99", "max")) + " |",
                  "| a step's tool calls | " + " | ".join(_shown(step[k]) for k in ("p50", "p90", "p99", "max")) + " |"]
    if summary.get("breakers"):
        lines += ["", "| breaker | on node | opened | closed |", "|---|---|---|---|",
                  *[f"| {b['kind']} {b['name']} | {b['node']} | {_clock(b['opened_at'])} | "
                    f"{_clock(b['closed_at']) if b['closed_at'] else 'still open'} |" for b in summary["breakers"]]]
    repeats = summary.get("repeats")
    if repeats:
        lines += ["", "| tasks run more than once | " + " | ".join(f"k={k}" for k in repeats["pass@k"]) + " |",
                  "|---|" + "---|" * len(repeats["pass@k"]),
                  "| pass@k | " + " | ".join(str(v) for v in repeats["pass@k"].values()) + " |",
                  "| pass^k | " + " | ".join(str(v) for v in repeats["pass^k"].values()) + " |",
                  "", f"{len(repeats['tasks'])} tasks; runs the infrastructure ended are left out "
                      f"({', '.join(f'{r} {v}' for r, v in repeats['infra_rate'].items()) or 'none'})."]
    if summary["invalid"]:
        lines += ["", "Invalid episodes:", *[f"- {line}" for line in summary["invalid"]]]
    return "\n".join(lines) + "\n"
