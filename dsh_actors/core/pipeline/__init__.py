"""The execution pipeline, one module per stage, in the order a call walks them:

``create`` → ``pre_execute`` → ``approval`` (for ask) → ``guards`` → ``dispatch``
(``tools/execute`` around core dispatch) → ``post_execute`` → ``finalize``.

:func:`execute` runs a call end to end against an :class:`ExecutionPlan`; the staged
functions :func:`prepare`, :func:`dispatch`, :func:`finalize` and :func:`finish` are
the same pipeline in pieces (``execute`` is exactly them composed; :func:`run` and
:func:`gate` start from an execution already created), for schedulers that
interleave calls. The harness owns the outermost layer: any failure in any stage
becomes exactly one error result, and every call ends in exactly one ``tools/result``
notification. Which failures still go through post-execute:

==========================================================  =================
failure                                                     post-execute?
==========================================================  =================
tool body raises, unknown tool, argument violations          yes
pre-execute deny, refused ask, guard denial                  yes
a wrapper's own (short-circuit) result                       yes
arguments not lossless JSON, unreadable input                no
a pre-execute listener raises or returns a malformed value   no
the approval seam raises or answers outside its outcomes     no
a guard raises                                               no
a tools/execute listener raises or returns a malformed value no (deferred contexts lost)
a post-execute listener raises                               (it is post-execute)
final materialisation fails                                  no
==========================================================  =================
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Literal

from .. import telemetry
from ..errors import error_result
from ..types import ExecutionToken, ToolExecution, ToolExecutionResult, text_block
from .approval import resolve_ask
from ..boundary import as_failure, is_own_cancellation
from .chain import run_chain, settle
from .create import InvalidExecutionInputError, create_execution
from .dispatch import dispatch_tool, parse_result, run_execute
from .finalize import finish, notify_observers
from .guards import GuardError, run_guards
from .plan import ApprovalOutcome, ApprovalRequest, ApprovalSeam, ExecutionPlan, PlanResolver
from .post_execute import run_post_execute
from .pre_execute import run_pre_execute

__all__ = [
    "ApprovalOutcome",
    "ApprovalRequest",
    "ApprovalSeam",
    "ExecutionPlan",
    "GuardError",
    "InvalidExecutionInputError",
    "PlanResolver",
    "Step",
    "dispatch",
    "dispatch_tool",
    "execute",
    "finalize",
    "finish",
    "gate",
    "notify_observers",
    "parse_result",
    "prepare",
    "run",
    "run_chain",
    "settle",
]

log = logging.getLogger("dsh_actors.pipeline")


@dataclass(frozen=True, slots=True)
class Step:
    """Where a call stands between stages.

    ``stage`` is ``"dispatch"`` (policy allowed it), ``"post"`` (a result awaits
    post-execute) or ``"final"`` (a result goes straight to :func:`finish`).
    """

    stage: Literal["dispatch", "post", "final"]
    execution: ToolExecution
    plan: ExecutionPlan | None
    result: ToolExecutionResult | None = None


def _denied(reason: str) -> ToolExecutionResult:
    return ToolExecutionResult({"content": [text_block("Error: " + reason)], "is_error": True})


def _failed(thrown: BaseException, origin: str = "a listener") -> ToolExecutionResult:
    return ToolExecutionResult(error_result(as_failure(thrown, origin)))


async def prepare(source: Any, plan_for: PlanResolver, *, token: ExecutionToken | None = None) -> Step:
    """Create the execution, then run pre-execute, approval and guards."""
    execution, failure = create_execution(source, token)
    plan, final = _planned(execution, failure, plan_for)
    return final if final is not None else await gate(execution, plan)  # type: ignore[arg-type]


def _planned(execution: ToolExecution, failure: dict[str, Any] | None,
             plan_for: PlanResolver) -> tuple[ExecutionPlan | None, Step | None]:
    """The execution's plan, or the final step when there is none or creation failed."""
    try:
        plan = plan_for(execution.agent)
    except Exception as exc:  # a resolver is harness code, not user code
        log.warning("no execution plan for agent %r: %s", execution.agent, exc)
        return None, Step("final", execution, None, _failed(exc))
    if failure is not None:
        return plan, Step("final", execution, plan, ToolExecutionResult(failure))
    return plan, None


async def gate(execution: ToolExecution, plan: ExecutionPlan) -> Step:
    """Run pre-execute, approval and guards for an execution already created (the Ray
    runtime creates it in the caller's process and rebuilds it where it runs)."""
    execution._resolve(plan.tools.get(execution.name))
    traced = telemetry.tracing()  # checked once: a stage's span costs nothing when nobody traces
    try:
        pre = run_pre_execute(execution, plan)
        decision = await (telemetry.staged("pre_execute", pre) if traced else pre)
        if decision["kind"] == "deny":
            telemetry.decided(execution, "pre_execute", "deny")
            return Step("post", execution, plan, _denied(decision["reason"]))
        if decision["kind"] == "ask":
            asked = resolve_ask(execution, plan, decision)
            refusal = await (telemetry.staged("approval", asked) if traced else asked)
            if refusal is not None:
                telemetry.decided(execution, "approval", "deny")
                return Step("post", execution, plan, _denied(refusal))
            telemetry.decided(execution, "approval", "allow")
        if plan.guards:
            guarded = run_guards(execution, plan)
            reason = await (telemetry.staged("guards", guarded) if traced else guarded)
            if reason is not None:
                telemetry.decided(execution, "guards", "deny")
                return Step("post", execution, plan, _denied(reason))
    except BaseException as exc:  # a listener, the approval seam or a guard failed: fail closed
        if is_own_cancellation(exc):
            raise
        return Step("final", execution, plan, _failed(exc, "a policy (pre-execute, approval or guard)"))
    return Step("dispatch", execution, plan)


async def dispatch(step: Step) -> Step:
    """Run the ``tools/execute`` around stage (and the body) for a prepared call."""
    if step.stage != "dispatch" or step.plan is None:
        raise ValueError(f"dispatch() needs a step prepared for dispatch, got stage {step.stage!r}")
    try:
        running = run_execute(step.execution, step.plan)
        result = await (telemetry.staged("dispatch", running) if telemetry.tracing() else running)
    except BaseException as exc:
        if is_own_cancellation(exc):
            raise
        return Step("final", step.execution, step.plan, _failed(exc, "a tools/execute listener"))
    return Step("post", step.execution, step.plan, result)


async def finalize(step: Step, *, observe: bool = True) -> ToolExecutionResult:
    """Run post-execute on a ``"post"`` step (if any), then :func:`finish`."""
    result = step.result
    if result is None:
        raise ValueError("finalize() needs a step that carries a result")
    if step.stage == "post" and step.plan is not None:
        try:
            before = result
            post = run_post_execute(step.execution, result, step.plan)
            result = await (telemetry.staged("post_execute", post) if telemetry.tracing() else post)
            if result.get("is_error") and not before.get("is_error"):
                telemetry.decided(step.execution, "post_execute", "block")
        except BaseException as exc:
            if is_own_cancellation(exc):
                raise
            result = _failed(exc, "a tools/post-execute listener")
    return finish(step.execution, result, step.plan, observe=observe)


async def _complete(step: Step, observe: bool = True) -> ToolExecutionResult:
    if step.stage == "dispatch":
        step = await dispatch(step)
    return await finalize(step, observe=observe)


async def execute(source: Any, plan_for: PlanResolver, *, token: ExecutionToken | None = None) -> ToolExecutionResult:
    """Run one call through the whole pipeline; never raises (cancellation propagates)."""
    if not telemetry.tracing():
        return await _complete(await prepare(source, plan_for, token=token))
    execution, failure = create_execution(source, token)  # read once: the span needs its name and id
    with telemetry.tool_span(execution) as span:
        plan, final = _planned(execution, failure, plan_for)
        result = await _complete(final if final is not None else await gate(execution, plan))  # type: ignore[arg-type]
        telemetry.record_result(span, result)
        return result


async def run(execution: ToolExecution, plan: ExecutionPlan, *, observe: bool = True,
              trace_parent: Any = None) -> ToolExecutionResult:
    """:func:`execute` for an execution already created, against its plan (``observe``:
    see :func:`finish`); ``trace_parent`` is the caller's trace context (a carrier)."""
    if not telemetry.tracing():
        return await _complete(await gate(execution, plan), observe)
    with telemetry.tool_span(execution, trace_parent) as span:
        result = await _complete(await gate(execution, plan), observe)
        telemetry.record_result(span, result)
        return result
