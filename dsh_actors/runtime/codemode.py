"""Code Mode on Ray: the run's sub-calls, run by its executor or by a per-run queue actor.

By default (``code_dispatch="in-task"``) the executor running ``run_code`` runs each
sub-call itself, on its own loop with no Ray hop (the local side of the transport): the
bridge's FIFO already runs them one at a time in submission order, each through the full
pipeline as the calling agent, and the run's signal is passed to every sub-call as it is.

With ``code_dispatch="queue-actor"`` the registry keeps a pool of :class:`CodeRunQueue`
actors pinned one to each node (created with the registry, so no run pays an actor
start-up). Each ``run_code`` execution picks one on its own node and gets its own queue
there, keyed by a run id: sub-calls run one at a time in submission order, and the queue
actor runs each one's pipeline itself (it is an executor for them: the local side of the
transport), as the calling agent — one actor hop out and back per sub-call, as a native
call costs. The run's signal is mirrored into the queue (its ``abort`` runs in a control
concurrency group, so it is never stuck behind a queued call): the in-flight sub-call's
tool sees it, queued ones are abandoned, and the bridge drains the queue before
``run_code`` returns. ``tool/code-dispatch`` events go to the session log whose id is the
agent's id, when one is open. benchmarks/RESULTS.md has both modes side by side.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from typing import Any, Callable

import ray

from ..codemode.backends import resolved_backend
from ..codemode.runtime import CodeRuntime, CodeRuntimeConfig, make_runtime
from ..codemode.transport import build_run_code
from ..core.signal import AbortController
from ..core.types import ToolDefinition, ToolExecutionResult
from . import metrics
from .backoff import WHILE_RESTARTING
from .calls import Call, CallInput
from .errors import ACTOR_GONE, RAY_ERROR, WorkerCrashedError, died_for_good, translate
from .executor import ExecutorCore
from .mailboxes import PROCESS_INCARNATION
from .owner import owner
from .routes import this_node
from .signals import portable_reason
from .session import SessionLog
from .wire import Outcome

__all__ = ["QUEUE_OPTIONS", "CodeRunQueue", "CodeRunQueueService", "ray_run_code"]


_OPENING = WHILE_RESTARTING.within(5.0)  # a run waits this long for a Code Mode queue to answer


class _Run:
    __slots__ = ("lock", "controller")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.controller = AbortController()


QUEUE_OPTIONS = {"num_cpus": 0, "max_restarts": -1, "max_task_retries": 0}
"""Options of a Code Mode queue actor (applied where the registry starts it)."""


class CodeRunQueueService:
    """Hosts many runs' queues; each run's sub-calls go one at a time, in order."""

    def __init__(self, registry: str, namespace: str) -> None:
        self._owner = owner(registry, namespace)
        self._core = ExecutorCore(registry, namespace)  # it runs its sub-calls' pipelines itself
        self._runs: dict[str, _Run] = {}
        # Aborts for runs this queue does not hold (not yet, or no longer): a late abort
        # must not re-create a finished run, and an early one must still stop its calls.
        self._tombstones: dict[str, tuple[Any, float]] = {}
        self._lock = threading.Lock()  # abort runs on the control group's own thread

    def _run(self, run_id: str) -> _Run:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                run = self._runs[run_id] = _Run()
                early = self._tombstones.pop(run_id, None)
                if early is not None:
                    run.controller.abort(early[0])
            return run

    async def submit(self, run_id: str, fields: dict[str, Any]) -> bytes | str:
        """Run one sub-call when its turn comes (its result as an executor outcome's wire
        form); a string when the run ended first."""
        if self._owner.local is None:
            self._core.serve_here()  # calls made on this loop run here: no hop to an executor
        run = self._run(run_id)
        async with run.lock:  # asyncio.Lock is FIFO: submission order
            signal = run.controller.signal
            if signal.aborted:
                return f"run_code run is over ({signal.reason}); tool call abandoned"
            result = await Call.of(self._owner, CallInput({**fields, "signal": signal}, {})).run()
            return Outcome.result(result)

    def open(self, run_id: str) -> None:
        """Start ``run_id``'s queue here (nothing runs: a dead queue found now is replaced
        before any sub-call was sent to it)."""
        self._run(run_id)

    @ray.method(concurrency_group="control")
    def abort(self, run_id: str, reason: Any) -> None:
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                now = time.monotonic()
                self._tombstones[run_id] = (reason, now)
                for old in [k for k, (_, at) in self._tombstones.items() if now - at > 60.0]:
                    self._tombstones.pop(old, None)
                return
        run.controller.abort(reason)

    async def forget(self, run_id: str) -> None:
        with self._lock:
            run = self._runs.pop(run_id, None)
        if run is not None:
            async with run.lock:
                pass

    def runs(self) -> int:
        return len(self._runs)

    async def alive(self) -> str:
        """This queue process's incarnation: a probe that runs nothing."""
        return PROCESS_INCARNATION


_runtimes: dict[CodeRuntimeConfig, CodeRuntime] = {}


def _worker_runtime(config: CodeRuntimeConfig | None) -> CodeRuntime | None:
    """One code runtime per worker process and config (it holds no per-run state)."""
    if config is None:
        return None
    runtime = _runtimes.get(config)
    if runtime is None:
        runtime = _runtimes[config] = _Counted(make_runtime(config), resolved_backend(config))
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


def _dispatcher(registry: str, namespace: str, pool: list[Any]) -> Callable[[Any], Any]:
    """Sub-calls through a queue actor picked per run, on the run's node when one is there
    (``pool``: ``(handle, node)`` pairs). A queue seen dead for good when the run opens is
    replaced (by the registry, which owns the pool) and the run opens on its successor; one
    that dies under a sub-call fails that sub-call with a coded text."""
    async def opened(run_id: str) -> Any:
        here = this_node()
        for pause in _OPENING.pauses():
            local = [entry for entry in pool if entry[1] == here]
            queue, node = random.choice(local or pool)
            try:
                await queue.open.remote(run_id)
                return queue
            except ACTOR_GONE as exc:
                if pause is None:
                    break
                if died_for_good(exc):
                    fresh = await owner(registry, namespace).link.call("code_queue", queue._actor_id.hex())
                    pool[:] = [fresh if q._actor_id == queue._actor_id else (q, n) for q, n in pool]
                else:
                    await asyncio.sleep(pause)  # Ray is restarting it
        raise WorkerCrashedError("no Code Mode queue actor is available for this run")

    def dispatch(run_signal: Any) -> Any:
        run_id = uuid.uuid4().hex
        held: list[Any] = []  # the run's queue, once opened
        removers: list[Callable[[], None]] = []

        async def send(fields: dict[str, Any]) -> ToolExecutionResult:
            try:
                if not held:
                    held.append(await opened(run_id))
                    removers.append(run_signal.add_listener(
                        lambda reason: held[0].abort.remote(run_id, portable_reason(reason))))
                outcome = await held[0].submit.remote(run_id, {k: v for k, v in fields.items() if k != "signal"})
            except Exception as exc:
                # The queue actor died (Ray restarts it for the next runs): this sub-call
                # fails inside the program with a coded text, never Ray's own.
                failure = translate(exc, actor=WorkerCrashedError, what="the Code Mode queue of this run")
                code = getattr(failure, "code", "RAY_ERROR")
                raise RuntimeError(f"Error: the Code Mode queue of this run failed before the call finished "
                                   f"[{code}]; the tool call may or may not have run") from None
            if isinstance(outcome, str):
                raise RuntimeError(outcome)
            return Outcome.read(outcome).value  # type: ignore[return-value]

        async def close() -> None:
            for remove in removers:
                remove()
            if held:
                try:
                    await held[0].forget.remote(run_id)
                except RAY_ERROR:
                    pass  # the queue died with this run's state in it: nothing left to forget

        send.close = close  # type: ignore[attr-defined]
        return send

    return dispatch


def _in_task_dispatcher(registry: str, namespace: str) -> Callable[[Any], Any]:
    """Sub-calls run by the run's own executor: the bridge's FIFO already serialises them
    and the run's signal goes with each (see the module docs)."""
    def dispatch(run_signal: Any) -> Any:
        state = owner(registry, namespace)

        async def send(fields: dict[str, Any]) -> ToolExecutionResult:
            return await Call.of(state, CallInput(fields, {})).run()

        return send

    return dispatch


def _recorder(namespace: str) -> Callable[[], Any]:
    def per_run() -> Any:
        sessions: dict[str, Any] = {}  # looked up once per run (a KV read)

        async def record(agent: str, event: dict[str, Any]) -> None:
            if agent not in sessions:
                sessions[agent] = await SessionLog.find_async(agent, namespace)  # None: no session open for it
            if sessions[agent] is not None:
                await sessions[agent].append(event)

        return record

    return per_run


def ray_run_code(mode: str, registry: str, namespace: str, pool: list[Any], config: CodeRuntimeConfig | None,
                 dispatch: str = "in-task") -> ToolDefinition:
    """The ``run_code`` transport of a Ray registry (its body is a coroutine in an executor).

    ``dispatch``: ``queue-actor`` (each run's queue lives in a pooled queue actor) or
    ``in-task`` (the run's own task sends its sub-calls) — the same order and abort
    semantics; see benchmarks/RESULTS.md for what each costs.
    """
    return build_run_code(
        mode,
        runtime=lambda: _worker_runtime(config),
        dispatch=(_dispatcher(registry, namespace, pool) if dispatch == "queue-actor"
                  else _in_task_dispatcher(registry, namespace)),
        record=_recorder(namespace),
    )  # no Ray options: the body is a coroutine in the executor, mostly waiting on sub-calls


CodeRunQueue = ray.remote(concurrency_groups={"control": 2})(CodeRunQueueService)  # type: ignore[call-overload]
"""The Code Mode queue actor class (``abort`` runs in a concurrency group of its own: never behind a sub-call)."""
