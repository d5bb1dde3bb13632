"""Code Mode on Ray: a run and its sub-calls, on the executor that took the call or in a
per-run queue of a queue actor.

By default (``code_dispatch="in-task"``) the executor running ``run_code`` runs the program's
sandbox and each sub-call itself, on its own loop with no Ray hop (the local side of the
transport): the bridge's FIFO runs them one at a time in submission order, each through
the full pipeline as the calling agent, and the run's signal is passed to every sub-call
as it is.

With ``code_dispatch="queue-actor"`` the registry keeps a pool of :class:`CodeRunQueue`
actors pinned one to each node (created with the registry, so no run pays an actor
start-up). The executor sends each run to a queue on its own node — one frame on the
queue's channel, as a call to an executor on the node travels — and the queue hosts it:
the run's queue of sub-calls (one at a time, in submission order), their pipelines (the
queue is an executor for them: the local side of the transport, no hop per sub-call) and
the program's sandbox. So a fleet's Code Mode work (sandboxes, their CPU, a program that
floods its host) stays off the executors that serve native calls, at the cost of one
actor per node and one hop per run. The run's signal is mirrored into the queue (its
``abort`` runs in a control concurrency group, so it is never stuck behind a run): the
in-flight sub-call's tool sees it and the bridge drains the queue before ``run_code``
returns. A queue that dies under a run fails that run with ``WORKER_CRASHED``.

``tool/code-dispatch`` events go to the agent's session log (its id is the agent's, or
``<sessions>/<agent>`` in a registry connected with ``sessions``), when one is open. benchmarks/RESULTS.md has both modes side by side.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import threading
import time
import uuid
from typing import Any, Callable, Mapping, cast

import msgpack
import ray

from ...codemode.backends import resolved_backend
from ...codemode.runtime import CodeRuntime, CodeRuntimeConfig, make_runtime
from ...codemode.transport import RUN_CODE, build_run_code
from ...core import telemetry
from ...core.signal import AbortController
from ...core.errors import HarnessError
from ...core.types import (ToolDefinition, ToolExecution, ToolExecutionResult, ToolRunContext, token_from_bytes,
                          token_to_bytes)
from .. import metrics
from ..backoff import WHILE_RESTARTING
from ..caller.calls import Call, CallInput
from ..errors import ACTOR_GONE, ExecutionCancelledError, WorkerCrashedError, died_for_good, never_reached, translate
from .executor import ExecutorCore
from ..caller.owner import owner
from ..local import this_node
from ..process import current
from ..signals import portable_reason
from ..session.client import SessionLog
from .surface import CallSurface
from ..traces import FlushesSpans
from ..wire import Outcome, agent_session

__all__ = ["QUEUE_OPTIONS", "CodeRunQueue", "CodeRunQueueService", "ray_run_code"]


_OPENING = WHILE_RESTARTING.within(5.0)  # a run waits this long for a Code Mode queue to answer
_ANSWER = b"Q"  # the tag of a queue's answer (other answers are the Outcome a lane makes of a stopped task)


QUEUE_OPTIONS = {"num_cpus": 0, "max_restarts": -1, "max_task_retries": 0}
"""Options of a Code Mode queue actor (applied where the registry starts it)."""


def pack_run(run_id: str, code: str, ctx: ToolRunContext) -> bytes:
    """One run on its way to its queue: a msgpack bytes value (the channel's and an actor
    task's cheapest argument) with what the run's body reads of its context, and its call's
    trace context (its sub-calls' parent)."""
    parent = ctx.parent
    return msgpack.packb([run_id, code, ctx.call_id, ctx.agent, token_to_bytes(ctx.token),
                          None if parent is None else token_to_bytes(parent), sorted(ctx.visible),
                          telemetry.carrier(ctx.token)])


def _unpack_run(raw: bytes, signal: Any,
                deferred: list[Any]) -> tuple[str, str, ToolRunContext, dict[str, str] | None]:
    run_id, code, call_id, agent, token, parent, visible, trace = msgpack.unpackb(raw)
    execution = ToolExecution(call_id=call_id, name=RUN_CODE, arguments={"code": code}, agent=agent,
                              parent=None if parent is None else token_from_bytes(parent), signal=signal,
                              token=token_from_bytes(token))
    # The body reads only the names it binds (its sub-calls resolve their definitions here).
    names = cast("Mapping[str, ToolDefinition]", dict.fromkeys(visible))
    return run_id, code, ToolRunContext(execution, deferred, names), trace


class CodeRunQueueService(CallSurface, FlushesSpans):
    """Hosts many runs and their queues (see the module docs). A run arrives like a call
    to an executor (:class:`~.surface.CallSurface`): from its executor on this node as a
    frame on this queue's channel, else as an actor task."""

    def __init__(self, registry: str, namespace: str, mode: str = "code",
                 config: CodeRuntimeConfig | None = None, sessions: str | None = None) -> None:
        self._owner = owner(registry, namespace)
        self._core = ExecutorCore(registry, namespace)  # it runs its sub-calls' pipelines itself
        self._take_calls()
        self._run_code = build_run_code(mode, runtime=lambda: _worker_runtime(config),
                                        dispatch=_in_task_dispatcher(registry, namespace),
                                        record=_recorder(namespace, sessions))
        self._runs: dict[str, AbortController] = {}
        # Aborts for runs this queue does not hold (not yet, or no longer): a late abort
        # must not re-create a finished run, and an early one must still stop it.
        self._tombstones: dict[str, tuple[Any, float]] = {}
        self._lock = threading.Lock()  # abort runs on the control group's own thread

    def _begin(self, run_id: str) -> AbortController:
        with self._lock:
            controller = self._runs.get(run_id)
            if controller is None:
                controller = self._runs[run_id] = AbortController()
                early = self._tombstones.pop(run_id, None)
                if early is not None:
                    controller.abort(early[0])
            return controller

    async def execute(self, envelope: bytes, plan_box: Any = None, hub: Any = None) -> bytes:
        """Run one ``run_code`` (:func:`pack_run`) here, its sub-calls on this loop in
        submission order; answers its value or the exception it raised, with the contexts
        its sub-calls deferred."""
        if self._owner.local is None:
            self._core.serve_here()  # calls made on this loop run here: no hop to an executor
        deferred: list[Any] = []
        run_id = msgpack.unpackb(envelope)[0]
        controller = self._begin(run_id)
        _, code, ctx, trace = _unpack_run(envelope, controller.signal, deferred)
        try:
            with telemetry.open_elsewhere(ctx.token, trace), self._agents.running(ctx.agent):
                # (its sub-calls' spans: children of its run_code's)
                answer: tuple[Any, BaseException | None] = (await self._run_code.execute({"code": code}, ctx), None)
        except Exception as exc:  # the run's own failure (CodeRunFailedError, a runtime refused): its caller's
            answer = (None, exc)
        finally:
            with self._lock:
                self._runs.pop(run_id, None)
        return _ANSWER + ray.cloudpickle.dumps((*answer, deferred))

    def open(self, run_id: str) -> None:
        """A probe before a run is sent (nothing runs: a dead queue found now is replaced
        before the run went to it)."""

    @ray.method(concurrency_group="control")
    def abort(self, run_id: str, reason: Any) -> None:
        with self._lock:
            controller = self._runs.get(run_id)
            if controller is None:
                now = time.monotonic()
                self._tombstones[run_id] = (reason, now)
                for old in [k for k, (_, at) in self._tombstones.items() if now - at > 60.0]:
                    self._tombstones.pop(old, None)
                return
        controller.abort(reason)

    def runs(self) -> int:
        return len(self._runs)

    async def abort_agents(self, agents: list[str], why: str) -> int:
        """Cancel the runs of ``agents`` here, and their sub-calls' pipelines."""
        return self._agents.cancel(agents, why) + await self._core.abort_agents(agents, why)


_making = threading.Lock()


async def _worker_runtime(config: CodeRuntimeConfig | None) -> CodeRuntime | None:
    """One code runtime per worker process and config (it holds no per-run state). The
    first is made on a thread: choosing its backend probes this host's walls in a
    subprocess, and on the loop that would stall every other call of the process."""
    if config is None:
        return None
    return current().code_runtimes.get(config) or await asyncio.to_thread(_made_runtime, config)


def _made_runtime(config: CodeRuntimeConfig) -> CodeRuntime:
    with _making:  # two first runs at once make one runtime
        runtime = current().code_runtimes.get(config)
        if runtime is None:
            runtime = current().code_runtimes[config] = _Counted(make_runtime(config), resolved_backend(config))
        return runtime


class _Counted:
    """A code runtime whose runs are counted (``dsh_sandbox_runs`` by backend and outcome)."""

    def __init__(self, inner: CodeRuntime, backend: str) -> None:
        self._inner, self._backend = inner, backend
        self.language, self.dialect, self.isolation = inner.language, inner.dialect, inner.isolation

    async def run(self, program: str, bindings: Any, signal: Any = None) -> Any:
        outcome = "failed"
        try:
            result = await self._inner.run(program, bindings, signal)
            outcome = "ok" if result.error is None else result.error.kind
            return result
        finally:
            metrics.count("dsh_sandbox_runs", self._backend, outcome)

    def close(self) -> None:
        self._inner.close()

    def __getattr__(self, name: str) -> Any:  # anything else a backend offers (e.g. its workers' pids)
        return getattr(self._inner, name)


def _queued(registry: str, namespace: str, pool: list[Any], inner: ToolDefinition) -> ToolDefinition:
    """``run_code`` whose body sends each run to a queue actor, on the run's node when one
    is there (``pool``: ``(handle, node)`` pairs), and mirrors the run's signal into it.

    A queue this process streams to is sent the run at once (its channel tells a run that
    never reached it from one that may have run); any other is probed first, so one seen
    dead for good is replaced (by the registry, which owns the pool) before the run goes.
    A run that never reached its queue goes once more, to a queue that answers; one whose
    queue died under it fails with ``WORKER_CRASHED``."""
    async def opened(run_id: str) -> Any:
        state, here = owner(registry, namespace), this_node()
        for pause in _OPENING.pauses():
            local = [entry for entry in pool if entry[1] == here]
            queue, node = random.choice(local or pool)
            if state.remote.streams_to(queue):
                return queue
            try:
                await queue.open.remote(run_id)
                return queue
            except ACTOR_GONE as exc:
                if pause is None:
                    break
                if died_for_good(exc):
                    fresh = await state.link.call("code_queue", queue._actor_id.hex())
                    pool[:] = [fresh if q._actor_id == queue._actor_id else (q, n) for q, n in pool]
                else:
                    await asyncio.sleep(pause)  # Ray is restarting it
        raise WorkerCrashedError("no Code Mode queue actor is available for this run")

    async def hosted(queue: Any, run_id: str, run: bytes, signal: Any) -> bytes:
        unfollow = (signal.add_listener(lambda reason: queue.abort.remote(run_id, portable_reason(reason)))
                    if signal is not None else None)
        sent = owner(registry, namespace).remote.send(queue, run, None, None)
        try:
            return await sent
        except asyncio.CancelledError:
            sent.cancel()  # this call was cancelled: so is its run, in the queue
            raise
        finally:
            if unfollow is not None:
                unfollow()

    async def execute(args: Any, ctx: ToolRunContext) -> Any:
        run_id = uuid.uuid4().hex
        run = pack_run(run_id, args["code"], ctx)
        for last in (False, True):
            queue = await opened(run_id)
            try:
                raw = await hosted(queue, run_id, run, ctx.signal)
                break
            except ACTOR_GONE as exc:
                if never_reached(exc) and not last:
                    continue  # nothing ran: once more, on a queue that answers
                raise _queue_failed(exc) from None
            except Exception as exc:
                raise _queue_failed(exc) from None
        return _answered(raw, ctx)

    return dataclasses.replace(inner, execute=execute)


def _queue_failed(exc: BaseException) -> HarnessError:
    """The queue died under the run (Ray restarts it for the next runs): a coded failure
    of this call, never Ray's own text."""
    failure = translate(exc, actor=WorkerCrashedError, what="the Code Mode queue of this run")
    code = getattr(failure, "code", "RAY_ERROR")
    return HarnessError(f"the Code Mode queue running this program failed before it finished [{code}]; "
                        "its tool calls may or may not have run", code)


def _answered(raw: bytes, ctx: ToolRunContext) -> Any:
    """The run's value (or what it raised) from its queue's answer, its deferred contexts
    handed to ``ctx``."""
    if raw[:1] != _ANSWER:  # the queue's task stopped before the run could answer
        outcome = Outcome.read(raw)
        if outcome.kind == "cancelled":
            raise ExecutionCancelledError("the Code Mode run was cancelled in its queue")
        error = (outcome.failure or {}).get("error") or {}
        raise HarnessError(f"the Code Mode queue running this program failed [{error.get('code')}]",
                           str(error.get("code") or "RAY_ERROR"))
    value, raised, deferred = ray.cloudpickle.loads(memoryview(raw)[1:])
    for context in deferred:
        ctx.defer_context(context)
    if raised is not None:
        raise raised
    return value


def _in_task_dispatcher(registry: str, namespace: str) -> Callable[[Any], Any]:
    """Sub-calls run by the run's own executor: the bridge's FIFO already serialises them
    and the run's signal goes with each (see the module docs)."""
    def dispatch(run_signal: Any) -> Any:
        state = owner(registry, namespace)

        async def send(fields: dict[str, Any]) -> ToolExecutionResult:
            return await Call.of(state, CallInput(fields, {})).run()

        return send

    return dispatch


def _recorder(namespace: str, scope: str | None) -> Callable[[], Any]:
    """Per run: what appends its dispatch events to its agent's session log (``scope``:
    its registry's ``sessions``)."""
    def per_run() -> Any:
        sessions: dict[str, Any] = {}  # looked up once per run (its node's writer is asked)

        async def record(agent: str, event: dict[str, Any]) -> None:
            if agent not in sessions:  # None: no session open for it
                sessions[agent] = await SessionLog.find_async(agent_session(scope, agent), namespace)
            if sessions[agent] is not None:
                await sessions[agent].append(event)

        return record

    return per_run


def ray_run_code(mode: str, registry: str, namespace: str, pool: list[Any], config: CodeRuntimeConfig | None,
                 dispatch: str = "in-task", sessions: str | None = None) -> ToolDefinition:
    """The ``run_code`` transport of a Ray registry (its body is a coroutine in an executor).

    ``dispatch``: ``in-task`` (the run and its sub-calls on the executor that took the
    call) or ``queue-actor`` (the run in a pooled queue actor on its node) — the same
    order and abort semantics; see the module docs and benchmarks/RESULTS.md.
    """
    in_task = build_run_code(mode, runtime=lambda: _worker_runtime(config),
                             dispatch=_in_task_dispatcher(registry, namespace), record=_recorder(namespace, sessions))
    # No Ray options either way: the body is a coroutine in the executor, mostly waiting.
    return _queued(registry, namespace, pool, in_task) if dispatch == "queue-actor" else in_task


CodeRunQueue = ray.remote(concurrency_groups={"control": 2})(CodeRunQueueService)  # type: ignore[call-overload]
"""The Code Mode queue actor class (``abort`` runs in a concurrency group of its own: never behind a run)."""
