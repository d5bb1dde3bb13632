"""Executor actors: every call's pipeline is an actor task on an async executor.

A registry keeps a small pool of executor actors (``num_cpus=0``, spread over the nodes).
A call is one actor task there (:meth:`ExecutorCore.execute`), one of a batch that
shares an actor task (:meth:`~ExecutorCore.execute_batch`, its outcomes handed over by
:meth:`~ExecutorCore.collect`; see ``lanes``), or — from a caller on the executor's own
node — one frame on the executor's channel (:meth:`~ExecutorCore.channel`; see
``channel_server``), which skips Ray's per-task cost: the whole pipeline — gates, policy-actor
awaits, approval waits, post-execute, observers — is a coroutine on the executor's event
loop, so a call that waits costs a coroutine, never a CPU slot or a process. The tool
body runs where it belongs:

- an ``async def`` body: a coroutine in the executor;
- a plain (synchronous) body: the executor's bounded thread pool, never on its loop, each
  agent holding at most its share of the threads (:mod:`.thread_shares`)
  (through :data:`~dsh_actors.core.body.BODY_RUNNER`);
- a body whose definition declares Ray options or force-stop: a Ray task with exactly
  those options (:func:`run_body_task`), started only after every gate passed — a
  streaming one (:func:`run_body_task_reporting`) when the call's caller listens for its
  progress, each report an item of the stream.

Plans arrive as object refs and are cached per executor, already *placed* (each
definition's ``execute`` replaced by the wrapper that runs it where it belongs).
:class:`ExecutorCore` is the plain class; :data:`ExecutorActor` is its actor shell.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import queue
import signal as _signals
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Iterator

import ray

from ...core.body import BODY_RUNNER
from ...core.errors import ToolTimeoutError, outcome_of
from ...core.progress import listening, progress_to, relay
from ...core import pipeline, telemetry, trace_export
from ...core.jsonvalue import FrozenDict
from ...core.pipeline import ExecutionPlan
from ...core.pipeline.chain import settle
from ...core.signal import AbortSignal
from ...core.types import ToolDefinition, ToolRunContext
from ..errors import OBJECT_GONE, ExecutionCancelledError, PlacementError, WorkerCrashedError, translate
from .. import metrics
from ..caller.owner import owner
from .placement import demand, execution_options, feasible, force_stop
from ..signals import RemoteSignal, send_signal, signal_of
from .surface import CallSurface
from .thread_shares import ThreadShares
from ..traces import FlushesSpans
from ..caller.transport import LocalTransport
from ..version import read_version
from ..wire import Envelope, Outcome

__all__ = ["BODY_FLUSH_S", "CANCEL_GRACE_S", "ExecutorActor", "ExecutorCore", "cancel_task", "run_body_task"]

CANCEL_GRACE_S = 2.0
"""How long a cancelled body task gets to stop on its own before its worker is killed."""
BODY_FLUSH_S = 1.0
"""How long a traced body task waits for its spans to be exported before it returns (a
task's worker is pooled and ended with the job: nobody can ask it later). One export per
task; with the collector down, a task waits this long, and the next ones (while that
export is stuck) not at all."""
_PLANS = 256
log = logging.getLogger("dsh_actors.runtime")


def cancel_task(ref: Any, grace_s: float = CANCEL_GRACE_S) -> None:
    """Cancel a task: politely first, then (still running after ``grace_s``) by killing its
    worker — a streaming task's (a generator) after the grace whatever it reads: once
    cancelled it reads ended though its body may run on. Executions never retry, so a
    killed body does not run again. (An actor task
    can only be cancelled politely: its coroutine sees ``CancelledError``.) An asyncio task
    (a call run in its caller's executor) is cancelled on its own loop."""
    if isinstance(ref, asyncio.Future):
        ref.get_loop().call_soon_threadsafe(ref.cancel)
        return
    try:
        ray.cancel(ref)
    except Exception:
        return

    def force() -> None:
        if not ray.is_initialized():  # the connection ended first: never start a new Ray
            return
        try:
            if isinstance(ref, ray.ObjectRefGenerator) or not ray.wait([ref], timeout=0)[0]:
                ray.cancel(ref, force=True)  # (a task that ended meanwhile is left alone)
        except Exception:
            pass

    timer = threading.Timer(grace_s, force)
    timer.daemon = True
    timer.start()


class ForceStop:
    """Kills a force-stoppable body's task when its budget (plus grace) runs out, or when
    its caller aborted and it did not stop within the grace; remembers why."""

    def __init__(self, ref: Any, timeout_ms: float, grace_ms: float, ended: Any = None) -> None:
        self._ref = ref
        self._ended = ref if ended is None else ended  # ready once the task ended
        self.failure: BaseException | None = None
        self._grace_s = grace_ms / 1000.0
        self._timers: list[threading.Timer] = []
        self._remove: Callable[[], None] | None = None

    @classmethod
    def arm(cls, ref: Any, limits: tuple[float, float] | None, signal: AbortSignal | None,
            ended: Any = None) -> "ForceStop | None":
        if limits is None:
            return None
        stopper = cls(ref, *limits, ended=ended)
        stopper._after(limits[0] / 1000.0 + stopper._grace_s, ToolTimeoutError(limits[0]))
        if signal is not None:
            stopper._remove = signal.add_listener(lambda reason: stopper._after(
                stopper._grace_s, ExecutionCancelledError(
                    f"the call did not stop within the grace after its caller aborted ({reason})")))
        return stopper

    def _after(self, delay_s: float, failure: BaseException) -> None:
        def fire() -> None:
            if not ray.is_initialized():  # the connection ended first: never start a new Ray
                return
            ready, _ = ray.wait([self._ended], timeout=0)
            if not ready and self.failure is None:
                self.failure = failure
                try:
                    ray.cancel(self._ref, force=True)
                except Exception:
                    pass

        timer = threading.Timer(delay_s, fire)
        timer.daemon = True
        self._timers.append(timer)
        timer.start()

    def disarm(self) -> None:
        for timer in self._timers:
            timer.cancel()
        if self._remove is not None:
            self._remove()


# --- a body as its own Ray task ------------------------------------------------------------

_body_plans: "OrderedDict[str, ExecutionPlan]" = OrderedDict()
_body_loop: asyncio.AbstractEventLoop | None = None
_reporting: list[Any] = [None, None]  # the reporting bodies' loop, and its thread
_REPORT_POLL_S = 0.05
"""How often a reporting task's main thread wakes while it waits (Ray's cancel lands then)."""


def _body_of(envelope: bytes, plan_box: list[Any]) -> tuple[Envelope, ExecutionPlan]:
    """The call and its plan (cached per worker: a worker runs many bodies of a plan)."""
    trace_export.configure()
    call = Envelope.unpack(envelope)
    plan = _body_plans.get(call.plan)
    if plan is None:
        plan = _body_plans[call.plan] = ray.get(plan_box[0])
        if len(_body_plans) > _PLANS:
            _body_plans.popitem(last=False)
    return call, plan


async def _run_body(call: Envelope, plan: ExecutionPlan, execution: Any, deferred: list[Any]) -> Any:
    with telemetry.span_from(call.trace, f"tool body {call.name}", **{"gen_ai.tool.call.id": str(call.call_id)}):
        definition = plan.tools[call.name]
        return await settle(definition.execute(execution.arguments, ToolRunContext(execution, deferred, plan.tools)))


def _body_ended(stop: Callable[[], None] | None) -> None:
    if stop is not None:
        stop()
    if telemetry.tracing():  # nobody holds this worker to ask later, and the job's end kills it
        trace_export.flush(BODY_FLUSH_S)


@ray.remote(max_retries=0)
def run_body_task(envelope: bytes, plan_box: list[Any], hub: Any) -> tuple[Any, list[Any]]:
    """Run one tool body (its definition from the call's plan) in this task; returns the
    body's value and the contexts it deferred. Only bodies with Ray options come here."""
    global _body_loop
    call, plan = _body_of(envelope, plan_box)
    if _body_loop is None or _body_loop.is_closed():
        _body_loop = asyncio.new_event_loop()
    signal, stop = signal_of(call, hub)
    deferred: list[Any] = []
    try:
        value = _body_loop.run_until_complete(_run_body(call, plan, call.execution(signal), deferred))
    except BaseException:
        with _interrupts_noted():  # (Ray may interrupt twice: the second must not skip this)
            _body_loop.close()  # never reuse a loop a cancellation interrupted
        raise
    finally:
        with _interrupts_noted():
            _body_ended(stop)
    return value, deferred


def _reporting_loop() -> asyncio.AbstractEventLoop:
    """The loop reporting bodies run on in this worker (made again if its thread died)."""
    loop, thread = _reporting
    if loop is None or not thread.is_alive():
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="dsh-body", daemon=True)
        thread.start()
        _reporting[:] = [loop, thread]
    return loop  # type: ignore[no-any-return]


@ray.remote(max_retries=0)
def run_body_task_reporting(envelope: bytes, plan_box: list[Any], hub: Any) -> Iterator[Any]:
    """:func:`run_body_task` for a caller that listens for the body's progress (a streaming
    task): yields each report, ``(progress, total, message)``, as the body makes it, then
    ``[value, deferred]``. The body runs on a loop of another thread, so this one can hand
    reports on while it runs; cancelled, this task ends only once the body has (a plain
    body runs to its end, or until the force-stop kills the worker, as in :func:`run_body_task`)."""
    call, plan = _body_of(envelope, plan_box)
    signal, stop = signal_of(call, hub)
    reports: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
    deferred: list[Any] = []
    ended = threading.Event()

    async def body() -> Any:
        try:
            with progress_to(lambda *report: reports.put(report)):
                return await _run_body(call, plan, call.execution(signal), deferred)
        finally:
            ended.set()

    with _interrupts_noted() as interrupted:
        running = asyncio.run_coroutine_threadsafe(body(), _reporting_loop())
        running.add_done_callback(lambda _: reports.put(None))
        try:
            while not interrupted.is_set():
                try:
                    report = reports.get(timeout=_REPORT_POLL_S)  # (the note of an interrupt is read between waits)
                except queue.Empty:
                    continue
                if report is None:
                    break
                yield report
            if interrupted.is_set():
                raise KeyboardInterrupt  # (once the body has stopped, below): Ray's cancel, as it expects it
            yield [running.result(), deferred]
        finally:
            running.cancel()  # (cancelled here: its body's coroutine sees CancelledError)
            while not ended.wait(_REPORT_POLL_S):
                pass
            _body_ended(stop)


@contextlib.contextmanager
def _interrupts_noted() -> Iterator[threading.Event]:
    """Within this block, Ray's cancel of this task (an interrupt of the main thread) is
    noted in the event it yields instead of raised. Ray interrupts once per request and may
    ask twice (its caller's cancel, and the recursive cancel of the actor task that made
    it): a second interrupt raised while the first one's cleanup ran cut that cleanup short,
    and the body ran on untracked. Outside a main thread, interrupts raise as before."""
    noted, active = threading.Event(), [True]

    def on_interrupt(signum: int, frame: Any) -> None:
        if not active[0]:  # (a handler left behind by an abandoned task: raise, as Ray's default does)
            raise KeyboardInterrupt
        noted.set()

    try:
        previous = _signals.signal(_signals.SIGINT, on_interrupt)
    except ValueError:  # not this process's main thread
        yield noted
        return
    try:
        yield noted
    finally:
        active[0] = False
        _signals.signal(_signals.SIGINT, previous)


# --- placing a plan's bodies -----------------------------------------------------------------

PLACEMENT_TIMEOUT_S = 30.0
"""How long a body waits for a node that *could* run it to exist (an autoscaler may be
adding one) before its call fails with ``PLACEMENT_FAILED``; a node that exists but is
busy is ordinary queueing and has no limit here."""
_nodes_cache: list[Any] = [0.0, []]


async def _cluster_nodes() -> list[dict[str, float]]:
    """Every alive node's total resources (read at most once a second per process)."""
    loop = asyncio.get_running_loop()
    if loop.time() - _nodes_cache[0] > 1.0:
        nodes = await loop.run_in_executor(None, ray.nodes)
        _nodes_cache[:] = [loop.time(), [n.get("Resources", {}) for n in nodes if n.get("Alive")]]
    return _nodes_cache[1]


async def _placeable(name: str, needed: dict[str, float], patience_s: float) -> None:
    """Return once some node could run the body; raise ``PlacementError`` after
    ``patience_s`` if none can (the body never starts, so nothing runs twice)."""
    deadline = asyncio.get_running_loop().time() + patience_s
    while not feasible(needed, await _cluster_nodes()):
        if asyncio.get_running_loop().time() >= deadline:
            raise PlacementError(f'tool "{name}" needs {needed}, and no node in the cluster has that much '
                                 f"(waited {patience_s:.0f}s for one to join)")
        await asyncio.sleep(1.0)


class _Placement:
    """Turns a plan's definitions into ones whose bodies run where they belong."""

    def __init__(self, plan_id: str, plan_box: list[Any], hub: Callable[[], Any]) -> None:
        self.plan_id, self.plan_box, self.hub = plan_id, plan_box, hub

    def plan(self, plan: ExecutionPlan) -> ExecutionPlan:
        tools = {name: self.definition(d) for name, d in plan.tools.items()}
        reserved = {name: tools.get(name, d) for name, d in plan.reserved.items()}
        return dataclasses.replace(plan, tools=FrozenDict(tools), reserved=FrozenDict(reserved))

    def definition(self, definition: ToolDefinition) -> ToolDefinition:
        options = execution_options(definition)
        limits = force_stop(definition)
        if len(options) == 1 and limits is None:  # only max_retries: the body stays in the executor
            return definition
        patience = definition.extras.get("placement_timeout_s", PLACEMENT_TIMEOUT_S)
        return dataclasses.replace(definition, execute=self._remote(definition.name, options, limits, float(patience)))

    def _remote(self, name: str, options: dict[str, Any], limits: tuple[float, float] | None,
                patience_s: float) -> Any:
        bound, reporting = run_body_task.options(**options), run_body_task_reporting.options(**options)
        needed = demand(options)

        async def execute(args: Any, ctx: ToolRunContext) -> Any:
            await _placeable(name, needed, patience_s)
            signal = ctx.signal
            signal_id = aborted = unpublish = hub = None
            if signal is not None:
                hub = await self.hub()
                signal_id, aborted, unpublish = send_signal(signal, hub)
            envelope = Envelope.of(ctx.execution, plan_id=self.plan_id, signal_id=signal_id, aborted=aborted,
                                   trace=telemetry.carrier()).pack()  # its span's parent: this dispatch
            sink = listening()
            task = (bound if sink is None else reporting).remote(envelope, self.plan_box, hub)
            ended = task if sink is None else task.completed()
            stopper = ForceStop.arm(task, limits, signal, ended)
            try:
                value, deferred = await task if sink is None else await _reported(task, sink)
            except asyncio.CancelledError:
                cancel_task(task)
                raise
            except Exception as exc:
                if stopper is not None and stopper.failure is not None:
                    raise stopper.failure from exc
                raise translate(exc, actor=WorkerCrashedError, what=f'tool "{name}" ({ctx.call_id})') from exc
            finally:
                if stopper is not None:
                    stopper.disarm()
                if unpublish is not None:
                    unpublish()
            for context in deferred:
                ctx.defer_context(context)
            return value

        execute.__name__ = name
        return execute


async def _reported(stream: Any, sink: Callable[..., None]) -> tuple[Any, list[Any]]:
    """The ``(value, deferred)`` a reporting body task streams last, its reports handed to
    ``sink`` on the way."""
    last = await relay(stream, sink)
    if last is None:
        raise ray.exceptions.RaySystemError("the body's task ended without its value")
    return last[0], last[1]


# --- the executor ----------------------------------------------------------------------------

def _count_call(tool: str, result: Any, seconds: float) -> None:
    metrics.call_ended(tool, *outcome_of(result), seconds * 1000)


def _count_denial(stage: str, kind: str, tool: str) -> None:
    if kind in ("deny", "block"):
        metrics.count("dsh_policy_denials", stage, kind, tool)


telemetry.on_denial(_count_denial)

class ExecutorCore(CallSurface, FlushesSpans):
    """Runs calls' pipelines as coroutines on one event loop (see the module docs).

    ``registry`` / ``namespace`` name the registry it serves (its signal hub is looked
    up once, for bodies that run as tasks); ``threads`` bounds the pool that runs plain
    bodies, each agent holding at most its share of it (:mod:`.thread_shares`); ``calls`` bounds the calls running at once, sent alone or batched (more wait
    for a slot; a Code Mode sub-call runs in its run's slot).
    """

    def __init__(self, registry: str, namespace: str, threads: int = 32, calls: int = 10_000) -> None:
        self.registry, self.namespace = registry, namespace
        trace_export.configure()  # this process's tracer, from its environment (DSH_TRACE_FILE, OTEL_*)
        self._plans: "OrderedDict[str, ExecutionPlan]" = OrderedDict()
        self._threads = ThreadShares(threads)
        self._take_calls()
        self._calls = calls
        self._slots: asyncio.Semaphore | None = None  # made on the actor's loop
        self._in_flight = 0


    async def _signal_hub(self) -> Any:
        return await owner(self.registry, self.namespace).link.signal_hub()

    async def _plan(self, plan_id: str, plan_box: list[Any] | None) -> ExecutionPlan | bytes:
        plan = self._plans.get(plan_id)
        if plan is not None:
            self._plans.move_to_end(plan_id)
            return plan
        if plan_box is None:
            return Outcome.NEED_PLAN
        try:
            raw = await plan_box[0]
        except OBJECT_GONE:
            return Outcome.STALE  # its scope actor went away; the client refetches (and reports it)
        plan = _Placement(plan_id, plan_box, self._signal_hub).plan(raw)
        self._plans[plan_id] = plan
        if len(self._plans) > _PLANS:
            self._plans.popitem(last=False)
        return plan

    async def execute(self, envelope: bytes, plan_box: list[Any] | None = None, hub: Any = None) -> bytes:
        """One call through the pipeline; answers an :class:`~.wire.Outcome` in its wire
        form: the final result, or *stale* / *need plan* when nothing ran (the client
        resubmits).

        A call carries ``plan_box`` only after this executor answered ``NEED_PLAN``, and
        ``hub`` only when its caller passed a signal: one bytes argument is the cheapest
        thing Ray ships, and the result's bytes are the cheapest thing it returns."""
        if self._slots is None:
            self.serve_here()
        assert self._slots is not None
        async with self._slots:
            call = Envelope.unpack(envelope)
            signal, stop = signal_of(call, hub)
            try:
                return await self._run(call, plan_box, signal)
            except asyncio.CancelledError:
                if isinstance(signal, RemoteSignal):  # its body may outlive the cancellation: tell it
                    signal.cancelled(f'tool call "{call.name}" ({call.call_id}) was cancelled')
                raise
            finally:
                if stop is not None:
                    stop()

    def serve_here(self) -> None:
        """On the first call: this loop's slots, and this executor as the local side of the
        transport for calls made in this process on this loop (Code Mode sub-calls)."""
        self._slots = asyncio.Semaphore(self._calls)
        metrics.gauge_from("dsh_tool_calls_in_flight", lambda: self._in_flight)
        owner(self.registry, self.namespace).local = LocalTransport(self.execute_here, asyncio.get_running_loop())

    def serve_as_guest(self) -> "asyncio.Future[Any] | None":
        """Run the calls this process makes on this loop, here — a process that is not one of
        the registry's executor actors (a gateway replica) — and tell the registry
        (:meth:`tell_registry`), so its ``abort_agents`` reaches these calls as it reaches
        its executors'."""
        self.serve_here()
        _GUESTS[(self.namespace, self.registry)] = self
        return self.tell_registry()

    def tell_registry(self) -> "asyncio.Future[Any] | None":
        """Tell the registry this process runs calls of its (again for a new registry actor
        of the same name, which knows no guests). The registry has heard once the returned
        future is done; a call that runs before may miss an ``abort_agents``. ``None``: not
        an actor (a plain driver has no handle to be reached by)."""
        try:
            actor = ray.get_runtime_context().current_actor
        except RuntimeError:
            return None
        told = asyncio.ensure_future(owner(self.registry, self.namespace).link.call("add_guest", actor))
        _TELLING.add(told)
        told.add_done_callback(_told)
        return told

    async def execute_here(self, envelope: bytes, plan_box: list[Any] | None, signal: AbortSignal | None) -> bytes:
        """:meth:`execute` for a call made in this executor's own process and loop (a Code
        Mode sub-call sent by its run): the same envelope, plan and outcome, with the
        caller's signal passed as it is instead of through the signal hub."""
        return await self._run(Envelope.unpack(envelope), plan_box, signal)

    async def _run(self, call: Envelope, plan_box: list[Any] | None, signal: AbortSignal | None) -> bytes:
        BODY_RUNNER.set(self._threads.runner(call.agent))
        if call.version is not None:
            current = await asyncio.get_running_loop().run_in_executor(self._threads.pool, read_version, call.key)
            if current != call.version:
                return Outcome.STALE
        plan = await self._plan(call.plan, plan_box)
        if isinstance(plan, bytes):
            return plan
        self._in_flight += 1
        started = time.perf_counter()
        try:
            # The caller hears the result's observers (see ``calls``): not here, so a result
            # that dies with this process before it is collected is heard once, there.
            with self._agents.running(call.agent):
                result = await pipeline.run(call.execution(signal), plan, observe=False,
                                            trace_parent=call.trace)
        finally:
            self._in_flight -= 1
        _count_call(str(call.name), result, time.perf_counter() - started)
        return Outcome.result(result)


_GUESTS: dict[tuple[str, str], ExecutorCore] = {}
"""The executor core serving calls in this process as a guest, per (namespace, registry)."""
_TELLING: set["asyncio.Future[Any]"] = set()


def _told(telling: "asyncio.Future[Any]") -> None:
    _TELLING.discard(telling)
    if not telling.cancelled() and telling.exception() is not None:  # (read: asyncio would log it as lost)
        log.warning("the registry did not hear of this process's calls (its aborts will not reach them): %s",
                    telling.exception())


def abort_guest_calls(_actor: Any, namespace: str, registry: str, agents: list[str], why: str) -> int:
    """(Run in a guest's process by the registry, through ``__ray_call__``.) Cancel the calls
    of ``agents`` its guest core runs; how many."""
    core = _GUESTS.get((namespace, registry))
    return core._agents.cancel_from_any_thread(agents, why) if core is not None else 0


ExecutorActor = ray.remote(ExecutorCore)
"""The executor actor class; the registry applies its options with ``.options()``."""
