"""Code Mode on Ray: the run's sub-calls, sent from its executor or through a queue actor.

By default (``code_dispatch="in-task"``) the executor running ``run_code`` sends each
sub-call itself: the bridge's FIFO already runs them one at a time in submission order,
and the run's signal reaches every sub-call through the signal hub. Measured at 1.24×
100 native calls against 1.68× through a queue actor (one more actor hop per sub-call).

With ``code_dispatch="queue-actor"`` the registry actor keeps a small pool of
:class:`CodeRunQueue` actors (created with the registry, so no run pays an actor
start-up). Each ``run_code`` execution picks one and gets its own queue there, keyed by a run id: sub-calls run one at a time in submission
order, each through the full pipeline as the calling agent (a Ray task per sub-call,
with the tool's own Ray options). The run's signal is mirrored into the queue (its
``abort`` runs in a control concurrency group, so it is never stuck behind a queued
call): the in-flight sub-call's tool sees it, queued ones are abandoned, and the bridge
drains the queue before ``run_code`` returns. ``tool/code-dispatch`` events go to the
session log whose id is the agent's id, when one is open.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from typing import Any, Callable

import ray

from ..codemode.runtime import CodeRuntime, CodeRuntimeConfig, make_runtime
from ..codemode.transport import build_run_code
from ..core.jsonvalue import snapshot, thaw
from ..core.signal import AbortController
from ..core.types import ToolDefinition, ToolExecutionResult
from .errors import WorkerCrashedError, translate
from .session import session_actor_name
from .signals import portable_reason

__all__ = ["DISPATCH_MODES", "CodeRunQueue", "ray_run_code"]


class _Run:
    __slots__ = ("lock", "controller")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.controller = AbortController()


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0, concurrency_groups={"control": 2})  # type: ignore[call-overload]
class CodeRunQueue:
    """Hosts many runs' queues; each run's sub-calls go one at a time, in order."""

    def __init__(self, registry: str, namespace: str) -> None:
        from .client import ToolRegistry

        self._registry = ToolRegistry(registry, namespace)
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

    async def submit(self, run_id: str, fields: dict[str, Any]) -> dict[str, Any] | str:
        """Run one sub-call when its turn comes; a string when the run ended first."""
        run = self._run(run_id)
        async with run.lock:  # asyncio.Lock is FIFO: submission order
            signal = run.controller.signal
            if signal.aborted:
                return f"run_code run is over ({signal.reason}); tool call abandoned"
            result = await self._registry.execute({**fields, "signal": signal})
            return thaw(result)

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


_runtimes: dict[CodeRuntimeConfig, CodeRuntime] = {}


def _worker_runtime(config: CodeRuntimeConfig | None) -> CodeRuntime | None:
    """One code runtime per worker process and config (it holds no per-run state)."""
    if config is None:
        return None
    runtime = _runtimes.get(config)
    if runtime is None:
        runtime = _runtimes[config] = make_runtime(config)
    return runtime


def _dispatcher(pool: list[Any]) -> Callable[[Any], Any]:
    def dispatch(run_signal: Any) -> Any:
        queue, run_id = random.choice(pool), uuid.uuid4().hex
        remove = run_signal.add_listener(lambda reason: queue.abort.remote(run_id, portable_reason(reason)))

        async def send(fields: dict[str, Any]) -> ToolExecutionResult:
            try:
                outcome = await queue.submit.remote(run_id, {k: v for k, v in fields.items() if k != "signal"})
            except ray.exceptions.RayError as exc:
                # The queue actor died (Ray restarts it for the next runs): this sub-call
                # fails inside the program with a coded text, never Ray's own.
                failure = translate(exc, actor=WorkerCrashedError, what="the Code Mode queue of this run")
                code = getattr(failure, "code", "RAY_ERROR")
                raise RuntimeError(f"Error: the Code Mode queue of this run failed before the call finished "
                                   f"[{code}]; the tool call may or may not have run") from None
            if isinstance(outcome, str):
                raise RuntimeError(outcome)
            return ToolExecutionResult(snapshot(outcome))

        async def close() -> None:
            remove()
            try:
                await queue.forget.remote(run_id)
            except ray.exceptions.RayError:
                pass  # the queue died with this run's state in it: nothing left to forget

        send.close = close  # type: ignore[attr-defined]
        return send

    return dispatch


def _in_task_dispatcher(registry: str, namespace: str) -> Callable[[Any], Any]:
    """Sub-calls sent by the run's own task: the bridge's FIFO already serialises them and
    the run's signal travels with each through the signal hub; one actor hop less."""
    def dispatch(run_signal: Any) -> Any:
        from .client import ToolRegistry

        client = ToolRegistry(registry, namespace)

        async def send(fields: dict[str, Any]) -> ToolExecutionResult:
            return await client.execute(fields)

        return send

    return dispatch


def _recorder(namespace: str) -> Callable[[], Any]:
    def per_run() -> Any:
        sessions: dict[str, Any] = {}  # looked up once per run (a named-actor lookup costs ms)

        async def record(agent: str, event: dict[str, Any]) -> None:
            if agent not in sessions:
                try:
                    sessions[agent] = ray.get_actor(session_actor_name(agent), namespace=namespace)
                except ValueError:
                    sessions[agent] = None  # no session open for this agent
            if sessions[agent] is not None:
                await sessions[agent].append.remote(event)

        return record

    return per_run


DISPATCH_MODES = ("queue-actor", "in-task")


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
        dispatch=_dispatcher(pool) if dispatch == "queue-actor" else _in_task_dispatcher(registry, namespace),
        record=_recorder(namespace),
    )  # no Ray options: the body is a coroutine in the executor, mostly waiting on sub-calls
