"""One call, from the process that makes it to its one result.

A :class:`Call` walks forward: its execution was created once, here, in the caller's
process (token, identity, frozen arguments); it takes the plan ticket of its scope,
packs its :class:`~.wire.Envelope`, takes a route — the executor of this very loop, or an
executor through this process's lanes; each route has the same ``send`` — sends, and reads the
:class:`~.wire.Outcome`. It sends again when nothing ran: *stale plan* (a fresh ticket),
*need the plan* (the same executor, with the plan's ref), or an executor that the call
never reached (another executor). Every other ending is final here:

- a result: the ``tools/result`` observers hear it here, once (the executor never runs
  them, so a result that dies with its executor before it is collected is heard once,
  as the failure the caller got);
- an executor that died while it held the call: one ``WORKER_CRASHED`` result;
- a cancel, made at any moment (even before anything was sent): one ``CANCELLED`` result;
- unusable input: its error result, and nothing leaves this process.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Mapping

from ...core import telemetry
from ...core.errors import error_result
from ...core.pipeline import finish, notify_observers
from ...core.pipeline.create import create_execution
from ...core.types import ExecutionToken, ToolExecution, ToolExecutionResult
from ..errors import ACTOR_GONE, ExecutionCancelledError, WorkerCrashedError, never_reached, translate
from .owner import RegistryOwner
from ..signals import send_signal
from .transport import LocalTransport, Sent
from ..wire import Envelope, Outcome, PlanTicket

__all__ = ["Call", "CallInput", "create"]

_STALE_RETRIES = 3
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


class _LocalRoute:
    """To the executor of this very loop: the caller's signal goes as it is, no Ray hop."""

    __slots__ = ("local", "signal")
    executor = None

    def __init__(self, local: LocalTransport, signal: Any) -> None:
        self.local, self.signal = local, signal

    def send(self, envelope: bytes, plan_box: Any) -> Sent:
        return self.local.send(envelope, plan_box, self.signal)

    def unreachable(self, exc: BaseException) -> None:
        pass  # (this loop's own executor: nothing to avoid)


class _RemoteRoute:
    """To one executor, through this process's lanes (its channel, or actor tasks)."""

    __slots__ = ("owner", "executor", "hub")

    def __init__(self, owner: RegistryOwner, executor: Any, hub: Any) -> None:
        self.owner, self.executor, self.hub = owner, executor, hub

    def send(self, envelope: bytes, plan_box: Any) -> Sent:
        return self.owner.remote.send(self.executor, envelope, plan_box, self.hub)

    def unreachable(self, exc: BaseException) -> None:
        """It failed the call (gone, restarting): the routes avoid it while it heals."""
        self.owner.routes.unreachable(self.executor, exc)


class Call:
    """One call on its way (see the module docs). :meth:`cancel` may come from any thread,
    at any moment: before the call is sent, it is never sent; after, it is stopped where
    it runs."""

    __slots__ = ("owner", "execution", "failure", "_cancelled", "_sent")

    def __init__(self, owner: RegistryOwner, execution: ToolExecution, failure: Mapping[str, Any] | None) -> None:
        self.owner, self.execution, self.failure = owner, execution, failure
        self._cancelled = False
        self._sent: Sent | None = None

    @classmethod
    def of(cls, owner: RegistryOwner, source: Mapping[str, Any]) -> "Call":
        return cls(owner, *create(source))

    def cancel(self) -> None:
        self._cancelled = True  # set first: a send that follows sees it
        sent = self._sent
        if sent is not None:
            sent.cancel()

    async def run(self) -> ToolExecutionResult:
        """Exactly one result, whatever happens on the way."""
        execution, plans = self.execution, self.owner.plans
        ticket: PlanTicket | None = None
        release: Callable[[], None] | None = None
        try:
            if self.failure is not None:  # unusable input never leaves this process
                return await self._finish(await plans.ticket(execution.agent), self.failure)
            local = self.owner.local_here()
            hub = signal_id = aborted = None
            if execution.signal is not None and local is None:
                hub = await self.owner.link.signal_hub()
                signal_id, aborted, release = send_signal(execution.signal, hub)
            trace = telemetry.carrier(execution.parent)  # the caller's span (a sub-call's: its run_code's)
            stale, box, unreached = 0, None, None
            route: _LocalRoute | _RemoteRoute | None = None
            while True:
                if ticket is None:
                    ticket = await plans.ticket(execution.agent, refresh=stale > 0)
                check = None if stale >= _STALE_RETRIES or plans.current(ticket) else ticket.version
                envelope = Envelope.of(execution, version=check, plan_id=ticket.plan_id, key=self.owner.version_key,
                                       signal_id=signal_id, aborted=aborted, trace=trace).pack()
                if route is None:
                    route = (_LocalRoute(local, execution.signal) if local is not None
                             else _RemoteRoute(self.owner, await self.owner.routes.pick(avoid=unreached), hub))
                if self._cancelled:
                    raise ExecutionCancelledError(f'tool call "{execution.name}" ({execution.call_id}) was cancelled')
                sent = route.send(envelope, box)
                self._sent = sent
                if self._cancelled:  # a cancel that came while it was being sent
                    sent.cancel()
                try:
                    outcome = Outcome.read(await sent)
                except asyncio.CancelledError:
                    sent.cancel()  # the awaiting task was cancelled: the call is stopped where it runs
                    raise
                except ACTOR_GONE as exc:
                    # The executor is gone or restarting (a body that killed its process, a
                    # ray.kill, a lost node): the routes avoid it while it heals.
                    route.unreachable(exc)
                    if never_reached(exc) and unreached is not route.executor:
                        unreached, route, box = route.executor, None, None  # it never arrived: another one
                        continue
                    raise WorkerCrashedError(
                        f'the worker running tool call "{execution.name}" ({execution.call_id}) died before it '
                        "finished (its executor actor is gone)") from exc
                finally:
                    self._sent = None
                if outcome.value is not None:
                    return await self._observed(ticket, outcome.value)
                if outcome.failure is not None:  # a batched call stopped before its pipeline ended
                    return await self._finish(ticket, outcome.failure)
                if outcome.kind == "cancelled":
                    raise ExecutionCancelledError(f'tool call "{execution.name}" ({execution.call_id}) was cancelled')
                if outcome.kind == "need_plan":  # that executor has not cached this plan: send it the ref
                    box = ticket.plan_box
                    continue
                # stale: a fresh plan, again (on whichever executor is next)
                stale, ticket, box, route = stale + 1, None, None, None
        except asyncio.CancelledError:
            self.cancel()  # the awaiting task was cancelled: stop the call too
            raise
        except Exception as exc:
            what = f'tool call "{execution.name}" ({execution.call_id})'
            return await self._finish(ticket, error_result(translate(exc, what=what)))
        finally:
            if release is not None:
                release()

    async def _observed(self, ticket: PlanTicket, result: ToolExecutionResult) -> ToolExecutionResult:
        """A final result from the executor: its observers hear it here, once."""
        if ticket.observed:
            plan = await self.owner.plans.plan_of(ticket)
            self.execution.freeze()
            if plan is not None:
                notify_observers(self.execution, result, plan)
        return result

    async def _finish(self, ticket: PlanTicket | None, failure: Mapping[str, Any]) -> ToolExecutionResult:
        """Finish a call here: its input was unusable, or it failed on the way. Observers
        still hear it once; the caller still gets exactly one result."""
        plan = await self.owner.plans.plan_of(ticket) if ticket is not None else None
        return finish(self.execution, failure, plan)
