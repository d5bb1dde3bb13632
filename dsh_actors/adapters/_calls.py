"""What every framework adapter shares: an agent's tools, and its calls through the pipeline.

An adapter turns :class:`ToolCalls` into the framework's own tools; this module knows
nothing of any framework. A call:

- runs the registry's whole pipeline as the agent (in this process through an
  :class:`~dsh_actors.InMemoryRegistry`, or on Ray through a
  :class:`~dsh_actors.runtime.ToolRegistry`), with a signal of its own that is aborted when
  the framework cancels the call (a timeout of the framework's is a cancellation);
- answers an ``ask`` through the framework's approval flow. In this process the registry's
  approval seam is wrapped by :class:`FrameworkApproval`: a call the framework already
  approved is allowed once, and one it has not is deferred to it (the pipeline ends that
  attempt denied, nothing runs, and :meth:`ToolCalls.call` answers :class:`Asked`); every
  other caller's ask goes to the seam it wrapped. On Ray the asked call waits in this
  process, its ask in the registry's approval queue (:mod:`~dsh_actors.runtime.registry.asking`),
  and the framework's approved retry answers it and collects the result. With
  ``framework_asks=False`` every ask goes to the registry's own seam (on Ray, the queue,
  answerable from any process);
- is recorded in the agent's session log, when it has one: a call the framework cancelled
  too (its own result if it stopped within :data:`CANCEL_GRACE_S` of its signal's abort,
  else ``CANCELLED``).
"""

from __future__ import annotations

import asyncio
import contextvars
import uuid
from dataclasses import dataclass
from typing import Any

from ..core.errors import ExecutionCancelledError, error_result
from ..core.pipeline import ApprovalRequest, ApprovalSeam
from ..core.pipeline.chain import settle
from ..core.jsonvalue import thaw
from ..core.signal import AbortController
from ..core.types import ToolDefinition, ToolExecutionResult
from ..log.events import tool_result_event
from ..runtime.errors import AskLostError, WorkerCrashedError
from ..runtime.registry.asking import AskingCalls
from ..inmemory import InMemoryRegistry, InMemoryScope

__all__ = ["Asked", "FrameworkApproval", "ToolCalls", "kept"]

CANCEL_GRACE_S = 0.2
"""How long a call the framework cancelled (in this process) may take to stop on its aborted
signal, ending through the pipeline as usual (its observers hear its result, the session log
records it), before it is cancelled too (the runtime's force-stop grace is as long)."""

_LOST = {
    "unknown": "no call waits for this approval (answered already, or asked in another process); call the tool again",
    "late": "the approved call did not end in time; its result is lost",
    "gone": "the registry's approval queue is gone, and the call waiting for this approval with it; call the tool again",
}


def kept(result: ToolExecutionResult) -> dict[str, Any]:
    """What a framework keeps of ``result`` beside what its model sees (its metadata, an
    artifact): ``{"dsh": {call_id, is_error, error?, meta?}}``, plain JSON."""
    record = {"call_id": result.call_id, "is_error": bool(result.is_error), "error": result.error, "meta": result.meta}
    return {"dsh": thaw({key: value for key, value in record.items() if value is not None})}


@dataclass
class Asked:
    """The pipeline asked for approval and the framework has yet to give it: the call did not
    run. ``reason`` is the policy's."""

    reason: str | None


@dataclass
class _Asking:
    """What the approval seam needs to know of the adapter's call in flight."""

    approved: bool
    asked: bool = False
    reason: str | None = None


_ASKING: contextvars.ContextVar[_Asking | None] = contextvars.ContextVar("dsh_adapter_asking", default=None)


class FrameworkApproval:
    """An approval seam that lets a framework answer the asks of the calls made through an
    adapter (allowed once when the framework approved the call, else deferred to it); any
    other ask goes to ``fallback`` (absent: unavailable, so it is denied, as without a seam)."""

    def __init__(self, fallback: ApprovalSeam | None = None) -> None:
        self.fallback = fallback

    async def request(self, request: ApprovalRequest) -> str:
        asking = _ASKING.get()
        if asking is None:
            return "unavailable" if self.fallback is None else str(await settle(self.fallback.request(request)))
        if asking.approved:
            return "allowed-once"
        asking.asked, asking.reason = True, request.reason
        return "cancelled"


class ToolCalls:
    """``agent``'s tools in ``target`` (an :class:`~dsh_actors.InMemoryRegistry` or one of its
    scopes, a :class:`~dsh_actors.runtime.ToolRegistry` or an ``AgentScope``), as an adapter
    lists and calls them. ``log``: the agent's session log (a
    :class:`~dsh_actors.runtime.session.client.SessionLog`, or anything with ``append(event)``),
    where each call's result is recorded as a ``tool/result``, as the batch job records a step.
    ``framework_asks``: put asks to the framework (``False``: to the registry's own seam — on
    Ray its approval queue, answered from any process). ``ask_ttl_s``: on Ray, how long a call
    asked of the framework waits for its answer (then its ask is cancelled: nothing runs)."""

    def __init__(self, target: Any, agent: str | None = None, *, log: Any = None, framework_asks: bool = True,
                 ask_ttl_s: float = 600.0) -> None:
        if agent is not None and hasattr(target, "scope"):
            target = target.scope(agent)
        self.target, self.log = target, log
        registry: Any = target._registry if isinstance(target, InMemoryScope) else getattr(target, "registry", target)
        self.framework_asks = framework_asks
        self._stopped: dict[str, ToolExecutionResult] = {}  # call id -> what a cancelled call ended with
        self.asking: AskingCalls | None = None  # on Ray: the calls asked of the framework, held here
        self._asks: dict[str, tuple[str, str | None]] = {}  # call id -> its ask (id, reason), held here
        if framework_asks and isinstance(registry, InMemoryRegistry):
            if not isinstance(registry.state.approval, FrameworkApproval):
                registry.set_approval(FrameworkApproval(registry.state.approval))
        elif framework_asks:
            self.asking = AskingCalls(registry.name, registry.namespace, ttl_s=ask_ttl_s)

    def may_ask(self) -> bool:
        """Whether a policy may answer ``ask`` to the agent's calls, the registry as it stands
        now: in this process, whether the agent's plan has a ``tools/pre-execute`` listener (only
        those decide; a named policy is one); on Ray, assumed."""
        if isinstance(self.target, InMemoryScope):
            return bool(self.target._registry.state.plan(self.target.agent_id).pre_execute)
        if isinstance(self.target, InMemoryRegistry):
            return bool(self.target.state.plan(None).pre_execute)
        return True

    async def definitions(self) -> list[ToolDefinition]:
        """The tools the agent sees now (its shadows and restrictions applied)."""
        return list(await settle(self.target.visible()))

    async def call(self, name: str, arguments: Any, *, call_id: str | None = None,
                   approved: bool = False) -> ToolExecutionResult | Asked:
        """Run one call as the agent: its result (an ``is_error`` one included), or
        :class:`Asked` when the framework's approval is needed first. ``approved``: the
        framework approved this call (a retry after its approval flow)."""
        call_id = call_id or f"call-{uuid.uuid4().hex[:12]}"
        try:
            if self.asking is not None:
                outcome = await self._on_ray(name, arguments, call_id, approved)
            else:
                outcome = await self._here(name, arguments, call_id, approved)
        except asyncio.CancelledError:
            stopped = self._stopped.pop(call_id, None)
            if self.log is not None:
                if stopped is None:
                    failure = ExecutionCancelledError(f'tool call "{name}" ({call_id}) was cancelled by the framework')
                    stopped = ToolExecutionResult({**error_result(failure), "call_id": call_id})
                await settle(self.log.append(tool_result_event(arguments, name, stopped)))
            raise
        if self.log is not None and not isinstance(outcome, Asked):
            await settle(self.log.append(tool_result_event(arguments, name, outcome)))
        return outcome

    async def reject(self, call_id: str) -> None:
        """The framework rejected the call: its ask, held here on Ray, is answered so (in this
        process the call did not wait: nothing to do)."""
        held = self._asks.pop(call_id, None)
        if held is not None and self.asking is not None:
            await self.asking.answer(call_id, held[0], "rejected")

    async def _here(self, name: str, arguments: Any, call_id: str, approved: bool) -> ToolExecutionResult | Asked:
        asking = _Asking(approved)
        token = _ASKING.set(asking if self.framework_asks else None)
        try:
            result = await self._execute(name, arguments, call_id)
        finally:
            _ASKING.reset(token)
        return Asked(asking.reason) if asking.asked else result

    async def _on_ray(self, name: str, arguments: Any, call_id: str, approved: bool) -> ToolExecutionResult | Asked:
        """A call on Ray whose ask goes to the framework: asked, it waits here (held) for the
        framework's answer, which the framework's approved retry gives; approved without an ask
        held here (the call asked again, or this process is not the one that asked), it runs
        and any ask of it is answered at once."""
        assert self.asking is not None
        if not approved and call_id in self._asks:  # asked again (LangGraph runs a node again): still held
            return Asked(self._asks[call_id][1])
        held = self._asks.pop(call_id, (None, None))[0] if approved else None
        if held is None:
            kind, value = await self.asking.run_or_ask(call_id, self._execute(name, arguments, call_id, grace=False))
            if kind == "done":
                return ToolExecutionResult(value)
            if not approved:
                self._asks[call_id] = (value["id"], value.get("reason"))
                return Asked(value.get("reason"))
            held = value["id"]
        status, value = await self.asking.answer(call_id, held, "allowed-once")
        if status == "done":
            return ToolExecutionResult(value)
        lost = (WorkerCrashedError("the process holding the call died before it ended; call the tool again")
                if status == "died" else AskLostError(_LOST[status]))
        return ToolExecutionResult({**error_result(lost), "call_id": call_id})

    async def _execute(self, name: str, arguments: Any, call_id: str, grace: bool = True) -> ToolExecutionResult:
        """The call through the pipeline. Cancelled, its signal is aborted, and (``grace``:
        the caller hears what it ended with) it has :data:`CANCEL_GRACE_S` to stop by itself."""
        controller = AbortController()
        running = asyncio.ensure_future(settle(self.target.execute(call_id=call_id, name=name, arguments=arguments,
                                                                   signal=controller.signal)))
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:  # the framework's: the call's signal says so, and it has a grace to stop
            controller.abort("the framework cancelled the call")
            try:
                await asyncio.wait({running}, timeout=CANCEL_GRACE_S if grace else 0)
            finally:
                if grace and running.done() and not running.cancelled() and running.exception() is None:
                    self._stopped[call_id] = running.result()
                else:
                    running.cancel()
            raise
