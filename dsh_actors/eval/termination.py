"""How an episode ended, and whose doing it was: the model's, or the infrastructure's.

A trainer turns each episode into a reward, and an evaluator into a pass rate; an episode
ended by a lost runner, a dead environment or an endpoint answering 503 says nothing
about the model and must be masked (or retried), never scored as the model's zero. Every
report carries ``termination: {reason, infra}`` from the closed set :data:`REASONS`;
``infra`` is true exactly when the end says nothing about the model.

A call's failure is the infrastructure's when its code is one of :data:`INFRA_CODES` (an
executor, scope, registry, environment or log lost; a hung tool past the job's deadline;
an ask nobody answered): such a call makes its episode end ``tool_lost`` — its later turns
were decided on a result the model did not earn.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..core.errors import INFRA_CODES

__all__ = ["INFRA_CODES", "REASONS", "Reason", "is_infra_code", "termination"]


@dataclass(frozen=True)
class Reason:
    name: str
    infra: bool
    what: str


REASONS: dict[str, Reason] = {r.name: r for r in (
    # the model's
    Reason("final", False, "the model answered without calling a tool (scored when there is a scorer)"),
    Reason("scripted", False, "a scripted episode ran every turn"),
    Reason("max_turns", False, "the model used every turn it was given"),
    Reason("max_tokens", False, "the model used every token it was given"),
    Reason("max_wall", False, "the episode ran out of wall time"),
    Reason("length", False, "the endpoint cut the model's reply at its length limit"),
    Reason("content_filter", False, "the endpoint withheld the model's reply"),
    Reason("malformed_reply", False, "the model's reply could not be read as a message"),
    Reason("invalid_calls", False, "the model made too many invalid calls in a row (unknown tools, bad arguments)"),
    # the infrastructure's
    Reason("endpoint_unavailable", True, "the model endpoint failed after its retries"),
    Reason("tool_lost", True, "a tool call was lost to infrastructure (its code says which: WORKER_CRASHED, "
                              "ENV_GONE, TOOL_TIMEOUT…)"),
    Reason("environment_failed", True, "the episode's environment could not start, or died"),
    Reason("runner_lost", True, "the episode's runner died, and again when it ran a second time (or no runner "
                                "was left)"),
    Reason("job_cancelled", True, "the job was cancelled, or its driver stopped, before the episode ended"),
    Reason("harness_error", True, "the harness itself failed (a log it could not write, a registry gone)"),
)}
"""Every way an episode ends, the model's first."""


_STOPS = {"final": "final", "max_turns": "max_turns", "max_tokens": "max_tokens", "max_wall": "max_wall",
          "length": "length", "content_filter": "content_filter", "malformed_reply": "malformed_reply",
          "invalid_calls": "invalid_calls", "model_error": "endpoint_unavailable", "aborted": "job_cancelled"}
"""A model run's ``stop`` as a termination reason."""

_FAILURES = {"ENV_UNAVAILABLE": "environment_failed", "ENV_START_FAILED": "environment_failed",
             "ENV_GONE": "environment_failed", "RUNNER_LOST": "runner_lost"}
"""The code of what failed an episode outside its calls, as a termination reason (any
other failure of the harness is ``harness_error``)."""


def is_infra_code(code: str | None) -> bool:
    return code in INFRA_CODES


def termination(*, stop: str | None, errors: Mapping[str, int], failure_code: str | None = None,
                failed: bool = False) -> dict[str, Any]:
    """``{reason, infra}`` for an episode: ``stop`` (its model run's, ``None`` when
    scripted), its calls' error counts by code, and — when the episode failed outside its
    calls — the code of what failed it (a model run that failed says so in its ``stop``;
    any other failure is the harness's own)."""
    if failed and failure_code in _FAILURES:
        name = _FAILURES[failure_code]  # type: ignore[index]
    elif failed and stop not in _STOPS:
        name = "harness_error"
    elif failed and stop not in ("model_error", "malformed_reply", "aborted"):
        name = "harness_error"  # the model's run ended, then the harness failed the episode
    elif any(is_infra_code(code) for code, count in errors.items() if count):
        name = "tool_lost"
    elif stop is None:
        name = "scripted"
    else:
        name = _STOPS.get(stop, "harness_error")
    return {"reason": name, "infra": REASONS[name].infra}
