"""Sending calls: the caller's side of every execution on Ray.

:class:`Dispatcher` (one per registry per process) creates each call's execution once —
here, in the caller's process — and sends it as one envelope to an executor actor
picked from :class:`ExecutorPool` (alone, or batched with the other calls this loop has
in flight there: see ``batches``); it resubmits when the executor answers *stale* or
*need plan* (nothing ran), and finishes the call here when its input was unusable or
its executor died, so the caller always gets exactly one result. A call made on an
executor's own loop (a Code Mode sub-call) runs on that executor without a Ray hop.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Mapping


from ..core.errors import error_result
from ..core.pipeline import ExecutionPlan, finish
from ..core.pipeline.create import create_execution
from ..core.types import ExecutionToken, ToolExecution, ToolExecutionResult
from .batches import SentCall, lanes_of
from .errors import ACTOR_GONE, ExecutionCancelledError, WorkerCrashedError, died_for_good, translate
from .executor import cancel_task, executor_here
from .link import RegistryLink
from .plans import PlanCache, fetch_plan
from .signals import send_signal
from .version import version_key
from .wire import Outcome, PlanTicket, pack_call

__all__ = ["CallInput", "Dispatcher", "ExecutorPool", "cancel_call", "create", "dispatcher"]

_STALE_RETRIES = 3
SICK_S = 5.0
"""How long a process avoids an executor that just failed a call (Ray is restarting it)."""
REVIVAL_WAIT_S = 10.0
"""How long a call waits for a restarting executor when every executor is restarting."""
_FIELDS = ("call_id", "name", "arguments", "agent", "parent", "signal")


class CallInput(Mapping[str, Any]):
    """The caller's input with some fields overridden (a scope sets ``agent``), read lazily
    so creation reads each field once and turns a raising getter into the call's result,
    exactly as in one process."""

    def __init__(self, call: Any, overrides: Mapping[str, Any]) -> None:
        self._call = call
        self._overrides = overrides

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        if key in self._overrides:
            return True
        if self._call is None:
            return False
        if isinstance(self._call, Mapping):
            return key in self._call
        return True  # attributes: read (and let a getter raise) in __getitem__

    def __getitem__(self, key: str) -> Any:
        if key in self._overrides:
            return self._overrides[key]
        if isinstance(self._call, Mapping):
            return self._call[key]
        return getattr(self._call, key, None)

    def __iter__(self) -> Any:
        return iter(_FIELDS)

    def __len__(self) -> int:
        return len(_FIELDS)


def create(source: Mapping[str, Any]) -> tuple[ToolExecution, dict[str, Any] | None]:
    """The execution of a call, created now in the caller's process: its fields read once
    and its arguments snapshotted, so later changes to the caller's objects change nothing."""
    return create_execution(source, ExecutionToken())


_TURN_CALLS = 16
"""How many calls made in one turn of an event loop go to the same executor (so they
travel as one batch) before the next executor's turn."""


class ExecutorPool:
    """This process's view of a registry's executor actors, picked in turn: the calls one
    turn of the event loop makes go to one executor (up to :data:`_TURN_CALLS`), so they
    share an actor task, and the next turn's go to the next one.

    An executor that failed a call is avoided for :data:`SICK_S` while Ray restarts it
    (calls sent to a restarting actor fail at once, and executions never retry); when
    every executor is avoided, a call first waits (up to :data:`REVIVAL_WAIT_S`) for a
    probe that runs nothing and that Ray may retry to reach the restarted process. One
    that died for good is reported to the registry, which replaces it, and the view
    refreshed.
    """

    def __init__(self, link: RegistryLink) -> None:
        self._link = link
        self._handles: list[Any] = []
        self._incarnation = -1  # of the registry the handles came from
        self._sick: dict[Any, float] = {}  # actor id -> avoided until (monotonic)
        self._probes: dict[Any, Any] = {}  # actor id -> ref of its revival probe (any loop may await it)
        self._next = 0
        self._turn_executor: Any = None  # the executor of this loop turn (None: no turn open)
        self._turn_calls = 0  # calls sent to it this turn

    async def pick(self) -> Any:
        if not self._handles or self._incarnation != self._link.incarnation:
            self._link.actor()
            self._incarnation = self._link.incarnation
            self._handles = list(await self._link.call("executors"))
        if self._turn_executor is not None and self._turn_calls < _TURN_CALLS:
            self._turn_calls += 1
            return self._turn_executor
        handle = self._rotate()
        if self._sick.get(handle._actor_id, 0.0) > time.monotonic():
            await self._revived(handle)
        if self._turn_executor is None:  # a new turn: it ends when this loop turn does
            asyncio.get_running_loop().call_soon(self._end_turn)
        self._turn_executor, self._turn_calls = handle, 1
        return handle

    async def _revived(self, handle: Any) -> None:
        """Wait until ``handle``'s restarted process answers (or the wait runs out, or it
        died for good: the call sent next then gets its coded result as before)."""
        key = handle._actor_id
        probe = self._probes.get(key)
        if probe is None:  # one probe per executor; its future may be awaited from any loop
            probe = self._probes[key] = handle.alive.options(max_task_retries=-1).remote().future()
        try:
            # shield: a waiter that gives up must not cancel the probe the others await
            await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(probe)), REVIVAL_WAIT_S)
        except Exception:
            return
        finally:
            if probe.done() and self._probes.get(key) is probe:
                del self._probes[key]
        self._sick.pop(key, None)

    def _end_turn(self) -> None:
        self._turn_executor, self._turn_calls = None, 0

    def _rotate(self) -> Any:
        now = time.monotonic()
        for _ in range(len(self._handles)):
            self._next = (self._next + 1) % len(self._handles)
            handle = self._handles[self._next]
            if self._sick.get(handle._actor_id, 0.0) <= now:
                return handle
        return self._handles[self._next]  # all recently failed: try anyway

    def failed(self, handle: Any, died: bool) -> None:
        self._sick[handle._actor_id] = time.monotonic() + SICK_S
        self._end_turn()
        if not died:
            return
        self._handles = []
        try:
            self._link.actor().replace_executor.remote(handle._actor_id.hex())
        except Exception:
            pass  # the registry is gone too: the next call reports that


class Dispatcher:
    """Sends calls to one registry's executors (see the module docs)."""

    def __init__(self, link: RegistryLink) -> None:
        self._link = link
        self._plans = PlanCache(link)
        self._pool = ExecutorPool(link)
        self._key = version_key(link.namespace, link.name)

    async def current_plan(self, agent: str | None) -> ExecutionPlan | None:
        """``agent``'s plan as of now, for a view read in this process: its cached ticket
        while the version subscription vouches for it (else asked for again), and the plan
        itself fetched once per plan — not its definitions shipped on every read.
        ``None`` when the plan object is lost."""
        ticket = self._plans.cached(agent)
        if ticket is None or not self._plans.current(ticket):
            ticket = await self._plans.ticket(agent, refresh=True)  # fetched now: as current as any
        return await fetch_plan(ticket)

    async def execute(self, source: Mapping[str, Any], cancel_box: list[Any]) -> ToolExecutionResult:
        """Create the call's execution from ``source`` and run it (see :meth:`run`)."""
        return await self.run(*create(source), cancel_box)

    async def run(self, execution: ToolExecution, failure: Mapping[str, Any] | None,
                  cancel_box: list[Any]) -> ToolExecutionResult:
        """Run one created execution (``failure``: its creation's error result, if any);
        ``cancel_box`` receives the executor task's ref (to cancel it)."""
        ticket: PlanTicket | None = None
        unpublish: Callable[[], None] | None = None
        try:
            if failure is not None:  # unusable input never leaves this process
                ticket = await self._plans.ticket(execution.agent)
                return await self._finish_here(execution, ticket, failure)
            # A call made on an executor's own loop (a Code Mode sub-call sent by its run)
            # runs on that executor: no Ray hop, and its signal passes as it is.
            here = executor_here(self._link.namespace, self._link.name)
            signal_id = aborted = hub = None
            if execution.signal is not None and here is None:
                hub = await self._link.signal_hub()
                signal_id, aborted, unpublish = send_signal(execution.signal, hub)
            executor: Any = here or await self._pool.pick()
            attempt, box = 0, None
            while True:
                if ticket is None:
                    ticket = await self._plans.ticket(execution.agent, refresh=attempt > 0)
                check = None if attempt >= _STALE_RETRIES or self._plans.current(ticket) else ticket.version
                envelope = pack_call(execution, version=check, plan_id=ticket.plan_id, key=self._key,
                                     signal_id=signal_id, aborted=aborted)
                if here is not None:
                    ref: Any = asyncio.ensure_future(here.execute_here(envelope, box, execution.signal))
                else:  # alone, or batched with the other calls this loop has in flight there
                    ref = lanes_of(self).send(executor, envelope, box, hub)
                cancel_box[:] = [ref]
                try:
                    outcome = Outcome.read(await ref)
                except ACTOR_GONE as exc:
                    # The executor died under the call (a body that killed its process, a
                    # ray.kill, a lost node): this call gets one result; the pool heals.
                    self._pool.failed(executor, died=died_for_good(exc))
                    raise WorkerCrashedError(
                        f'the worker running tool call "{execution.name}" ({execution.call_id}) died before it '
                        f"finished (its executor actor is gone)") from exc
                if outcome.value is not None:
                    return outcome.value
                if outcome.failure is not None:  # a batched call stopped before its pipeline ended
                    return await self._finish_here(execution, ticket, outcome.failure)
                if outcome.kind == "cancelled":
                    raise ExecutionCancelledError(f'tool call "{execution.name}" ({execution.call_id}) was cancelled')
                if outcome.kind == "need_plan":  # that executor has not cached this plan: send it the ref
                    box = ticket.plan_box
                    continue
                # stale: a fresh plan, again (on whichever executor is next)
                attempt, ticket, box, executor = attempt + 1, None, None, here or await self._pool.pick()
        except asyncio.CancelledError:
            if cancel_box:
                cancel_call(cancel_box[0])  # the awaiting task was cancelled: stop the call too
            raise
        except Exception as exc:
            what = f'tool call "{execution.name}" ({execution.call_id})'
            return await self._finish_here(execution, ticket, error_result(translate(exc, what=what)))
        finally:
            if unpublish is not None:
                unpublish()

    async def _finish_here(self, execution: ToolExecution, ticket: PlanTicket | None,
                           failure: Mapping[str, Any]) -> ToolExecutionResult:
        """Finish a call in this process: its input was unusable, or its worker died or was
        cancelled. Observers still hear it once; the caller still gets exactly one result."""
        plan = await fetch_plan(ticket) if ticket is not None else None
        return finish(execution, failure, plan)


def cancel_call(handle: Any) -> None:
    """Stop a call sent by :meth:`Dispatcher.run` (what it put in ``cancel_box``), from any thread."""
    if isinstance(handle, SentCall):
        handle.cancel()
    else:
        cancel_task(handle)


_DISPATCHERS: dict[int, Dispatcher] = {}
_DISPATCHERS_LOCK = threading.Lock()


def dispatcher(link: RegistryLink) -> Dispatcher:
    """The process's dispatcher for ``link``'s registry."""
    with _DISPATCHERS_LOCK:
        found = _DISPATCHERS.get(id(link))
        if found is None:
            found = _DISPATCHERS[id(link)] = Dispatcher(link)
        return found
