"""The approval seam as an actor: an approval queue that humans or supervisors answer.

``registry.approvals(policy="ask")`` mounts the registry's approval queue (an actor owned
by the registry actor, made on first use: the first ask, or the first client call). An
``ask`` decision then becomes a pending request that any driver can list and answer — ``ApprovalQueue.pending()`` / ``allow(id)`` /
``reject(id)``, or ``dsh-actors approvals list|allow|reject``. Outcomes follow the
specification: ``allowed-once`` (the only grant; nothing is remembered), ``rejected``,
``cancelled`` (the call's signal aborted first; a late answer is discarded) and
``unavailable`` (the queue is gone). With policy ``never`` every ask is rejected without
asking. Each request appends ``approval/asked`` and then ``approval/decided`` to the
agent's session log (the session whose id is the agent id, when one is open). With
policy ``always`` every ask is allowed (once) without asking, and recorded the same way.

An ask has a deadline: the queue's (``registry.approvals(timeout_s=…)``, with per-agent
ones beside it), after which it is settled ``expired`` — recorded, and the call fails
with :class:`ApprovalTimeoutError` (``APPROVAL_TIMEOUT``: nobody answered, which is not a
denial) — or its call's, when the call's signal aborts or its task is cancelled first:
the ask is then cancelled in the queue, so no one can allow a call that is gone.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import ray

from ...core.errors import HarnessError
from ...core.pipeline import ApprovalRequest
from ...core.within import within
from .. import metrics
from ..errors import ACTOR_GONE, RAY_ERROR, remote_call, translate
from ..requester import CHECK_S, requester, still_there
from ..response import NamedActorClient, Response
from ..session.client import SessionLog
from ..wire import agent_session
from .held import HeldCalls

__all__ = ["ActorApproval", "ApprovalQueue", "APPROVALS_OPTIONS", "ApprovalQueueActor", "ApprovalQueueService",
           "ApprovalTimeoutError", "EXPIRED", "POLICIES", "check_policy", "check_timeout"]

POLICIES = ("ask", "never", "always")
ANSWERS = ("allowed-once", "rejected")
EXPIRED = "expired"
"""How the queue settles an ask nobody answered within its deadline (its seam raises
:class:`ApprovalTimeoutError` for it: the pipeline's four outcomes stay as they are)."""


class ApprovalTimeoutError(HarnessError):
    """Nobody answered an ask within its deadline: the call did not run."""

    code = "APPROVAL_TIMEOUT"


def check_timeout(timeout_s: object) -> float | None:
    if timeout_s is None:
        return None
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < float("inf"):
        raise ValueError(f"an ask's deadline is a positive number of seconds (or None: none); got {timeout_s!r}")
    return float(timeout_s)


def check_policy(policy: object) -> str:
    if policy not in POLICIES:
        raise ValueError('approval policy must be one of "ask", "never" or "always"')
    return policy  # type: ignore[return-value]


class _Pending:
    __slots__ = ("future", "info", "requester")

    def __init__(self, future: asyncio.Future[str], info: dict[str, Any], requester: tuple[Any, str] | None) -> None:
        self.future = future
        self.info = info
        self.requester = requester


def answer_hint(registry: str, namespace: str, agent: str, tool_name: str, request_id: str) -> str:
    """What an operator types to answer one pending ask (the cluster address included:
    a driver's own local Ray has one nobody told them)."""
    address = ray.get_runtime_context().gcs_address
    flags = f"--registry {registry} --address {address}"
    if namespace != "dsh-actors":
        flags += f" --namespace {namespace}"
    return (f'dsh-actors: agent "{agent}" asks to run "{tool_name}"; answer with '
            f"`dsh-actors approvals allow {request_id} {flags}` (or reject)")


APPROVALS_OPTIONS = {"num_cpus": 0, "max_restarts": 0}
"""Options of the approval queue actor (a dead one is mounted again, not restarted)."""


class ApprovalQueueService:
    """Pending asks, their answers, the policy, and the session-log records."""

    def __init__(self, namespace: str, policy: str = "ask", registry: str = "default",
                 timeout_s: float | None = None, agent_timeouts: dict[str, float] | None = None,
                 sessions: str | None = None) -> None:
        self._namespace = namespace
        self._sessions = sessions  # its registry's: whose session log an agent's asks go to
        self._registry = registry
        self._policy = check_policy(policy)
        self._overrides: dict[str, str] = {}
        self._timeout_s = check_timeout(timeout_s)
        self._agent_timeouts = {agent: check_timeout(s) for agent, s in (agent_timeouts or {}).items()}
        self._pending: dict[str, _Pending] = {}
        self._cancelled: set[str] = set()
        self._watcher: asyncio.Future[None] | None = None
        self._held = HeldCalls(self._pending_ask)

    async def _log(self, agent: str, event: dict[str, Any], near: str | None = None) -> Any:
        """Append ``event`` to ``agent``'s session log if one is open (its writers are asked,
        node ``near``'s first); returns the log, to append to again."""
        session = await SessionLog.find_async(agent_session(self._sessions, agent), self._namespace, near=near)
        if session is not None:  # else no session is open for this agent
            await session.append(event)
        return session

    async def request(self, request_id: str, agent: str, tool_name: str, call_id: str | None,
                      reason: str | None, requester: tuple[Any, str] | None = None,
                      node: str | None = None) -> str:
        """Ask, and wait for the answer. ``requester`` is the process that runs the call
        (its actor handle and its incarnation): should it die, the ask is cancelled — an
        ask never outlives its call. ``node``: the requester's (its agent's log is
        looked for there first)."""
        asked: dict[str, Any] = {"type": "approval/asked", "id": request_id, "tool_name": tool_name}
        if call_id is not None:
            asked["call_id"] = call_id
        if reason is not None:
            asked["reason"] = reason
        session = await self._log(agent, asked, node)  # a failing append fails the request before anything is decided
        if request_id in self._cancelled:
            self._cancelled.discard(request_id)
            outcome = "cancelled"
        elif self._overrides.get(agent, self._policy) == "never":
            outcome = "rejected"
        elif self._overrides.get(agent, self._policy) == "always":
            outcome = "allowed-once"  # granted without asking, and recorded like any answer
        else:
            future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            # Printed here, so it reaches the driver's console (Ray forwards actor output):
            # how to answer, from any shell, including the cluster's address.
            print(answer_hint(self._registry, self._namespace, agent, tool_name, request_id), flush=True)
            self._pending[request_id] = _Pending(future, {
                "id": request_id, "agent": agent, "tool_name": tool_name, "call_id": call_id,
                "reason": reason, "asked_at": time.time(),
            }, requester)
            metrics.gauge("dsh_approvals_pending", len(self._pending))
            self._held.asked(self._pending[request_id].info)
            self._watch()
            deadline = self._agent_timeouts.get(agent, self._timeout_s)
            try:
                outcome = await (within(future, deadline) if deadline is not None else future)
            except TimeoutError:
                outcome = EXPIRED  # nobody answered in time: the call fails, coded (not a denial)
            finally:
                self._pending.pop(request_id, None)
                metrics.gauge("dsh_approvals_pending", len(self._pending))
        decided = {"type": "approval/decided", "id": request_id, "outcome": outcome}
        if session is not None:
            await session.append(decided)
        else:
            await self._log(agent, decided, node)  # opened while the ask waited
        return outcome

    def _watch(self) -> None:
        if self._watcher is None or self._watcher.done():
            self._watcher = asyncio.ensure_future(self._watch_requesters())

    async def _watch_requesters(self) -> None:
        """While asks are pending: every few seconds, ask each requesting process whether it
        is still the one that asked; an ask whose process died (or was restarted) is
        cancelled, so it can no longer be allowed."""
        while self._pending:
            await asyncio.sleep(CHECK_S)
            by_process: dict[tuple[str, str], list[str]] = {}
            handles: dict[tuple[str, str], Any] = {}
            for request_id, entry in list(self._pending.items()):
                # the process running the call, and the gateway replica holding it for its client
                for process in (entry.requester, self._held.holder(entry.info["call_id"] or "")):
                    if process is not None:
                        handle, incarnation = process
                        key = (handle._actor_id.hex(), incarnation)
                        by_process.setdefault(key, []).append(request_id)
                        handles[key] = handle
            for key, requests in by_process.items():
                if not await still_there(handles[key], key[1]):
                    for request_id in requests:
                        self._settle(request_id, "cancelled")

    def _settle(self, request_id: str, outcome: str) -> bool:
        entry = self._pending.get(request_id)
        if entry is None or entry.future.done():
            return False
        entry.future.set_result(outcome)
        return True

    def answer(self, request_id: str, outcome: str) -> bool:
        """Answer a pending ask; ``False`` when it is no longer pending (first answer wins)."""
        if outcome not in ANSWERS:
            raise ValueError(f"an answer is one of {', '.join(ANSWERS)}; got {outcome!r}")
        return self._settle(request_id, outcome)

    def cancel(self, request_id: str) -> bool:
        """The call's signal aborted: settle as cancelled (or refuse the ask when it arrives)."""
        if self._settle(request_id, "cancelled"):
            return True
        if request_id not in self._pending:
            self._cancelled.add(request_id)
        return False

    def _pending_ask(self, call_id: str) -> dict[str, Any] | None:
        return next((dict(p.info) for p in self._pending.values() if p.info["call_id"] == call_id), None)

    # calls whose ask is put to their client (the MCP gateway): see held.py

    async def ask_of(self, call_id: str, holder: tuple[Any, str] | None) -> dict[str, Any] | None:
        return await self._held.ask_of(call_id, holder)

    async def answer_held(self, call_id: str, request_id: str, outcome: str) -> bool:
        """Answer the ask of a held call, unless its holder died (the call then has nobody
        to tell its result: the ask is cancelled instead, so it never runs unseen)."""
        holder = self._held.holder(call_id)
        if holder is not None and not await still_there(*holder):
            self._settle(request_id, "cancelled")
            return False
        return self.answer(request_id, outcome)

    def forget(self, call_id: str) -> None:
        self._held.forget(call_id)

    def report_held(self, call_id: str, report: Any) -> None:
        self._held.report(call_id, report)

    def deposit(self, call_id: str, result: Any) -> None:
        self._held.deposit(call_id, result)

    async def collect(self, call_id: str, timeout_s: float, heard: int | None = None) -> tuple[str, Any]:
        return await self._held.collect(call_id, timeout_s, heard)

    def pending(self) -> list[dict[str, Any]]:
        return sorted((dict(p.info) for p in self._pending.values()), key=lambda info: info["asked_at"])

    async def set_policy(self, policy: str, agent: str | None = None) -> None:
        check_policy(policy)
        if agent is None:
            self._policy = policy
            return
        self._overrides[agent] = policy
        await self._log(agent, {"type": "approval/policy", "policy": policy})

    def policy(self, agent: str | None = None) -> str:
        return self._overrides.get(agent, self._policy) if agent is not None else self._policy

    def set_timeout(self, timeout_s: float | None, agents: dict[str, float] | None = None) -> None:
        """The deadline of asks made from now on (``None``: none), and per-agent ones."""
        self._timeout_s = check_timeout(timeout_s)
        self._agent_timeouts = {agent: check_timeout(s) for agent, s in (agents or {}).items()}

    def cancel_agents(self, agents: list[str]) -> int:
        """Cancel every pending ask of these agents (their calls are being aborted: an
        episode's dead attempt, say); how many were pending."""
        chosen = set(agents)
        doomed = [request_id for request_id, p in self._pending.items() if p.info["agent"] in chosen]
        return sum(self._settle(request_id, "cancelled") for request_id in doomed)


def _node() -> str | None:
    try:
        return ray.get_runtime_context().get_node_id()
    except Exception:  # noqa: BLE001 - not connected to Ray
        return None


class ActorApproval:
    """The seam an execution plan carries: asks the queue actor, follows the call's signal.
    Made with the ``registry`` actor instead of the queue's ``handle``, it asks the registry
    for the queue on its first ask in each process (the queue is made then)."""

    __slots__ = ("handle", "registry")

    def __init__(self, handle: Any = None, registry: Any = None) -> None:
        self.handle = handle
        self.registry = registry

    def __reduce__(self) -> tuple[Any, ...]:
        return (ActorApproval, (self.handle, self.registry))

    async def _queue(self) -> Any:
        if self.handle is None:
            try:
                self.handle = await self.registry.approval_queue.remote()
            except ACTOR_GONE:
                return None
            except RAY_ERROR as exc:
                raise translate(exc, what="the registry") from None
        return self.handle

    async def request(self, request: ApprovalRequest) -> str:
        signal = request.signal
        if signal is not None and signal.aborted:
            return "cancelled"  # no one is asked
        handle = await self._queue()
        if handle is None:
            return "unavailable"  # unmounted, or its registry is gone
        request_id = uuid.uuid4().hex
        ref = handle.request.remote(request_id, request.agent, request.tool_name, request.call_id,
                                    request.reason, requester(), _node())
        remove = signal.add_listener(lambda _: handle.cancel.remote(request_id)) if signal else None
        try:
            outcome = await ref
        except asyncio.CancelledError:
            handle.cancel.remote(request_id)  # the call is gone: so is its ask (nobody may allow it now)
            raise
        except ACTOR_GONE:
            return "unavailable"
        except RAY_ERROR as exc:
            raise translate(exc, what="the approval queue") from None
        finally:
            if remove is not None:
                remove()
        if outcome == EXPIRED:
            raise ApprovalTimeoutError(f'nobody answered the ask to run tool "{request.tool_name}" in time '
                                       "(its deadline passed); the call did not run")
        return outcome  # type: ignore[no-any-return]


class ApprovalQueue(NamedActorClient):
    """Client of a registry's approval queue: list pending asks and answer them."""

    @property
    def registry(self) -> str:
        return self._key

    def _what(self) -> str:
        return "the approval queue"

    async def _find(self) -> Any:
        """The queue's actor, as its registry knows it (the registry makes it on first use;
        a name lookup could still find a queue just killed). Raises ``ValueError`` when
        there is no such registry or it has no queue mounted."""
        if self._actor is None:
            try:
                registry = await asyncio.to_thread(ray.get_actor, self._key, namespace=self.namespace)
            except ValueError:
                raise ValueError(f"no registry {self._key!r} in namespace {self.namespace!r}") from None
            handle = await remote_call(registry.approval_queue, what="the registry")
            if handle is None:
                raise ValueError(f"registry {self._key!r} has no approval queue mounted "
                                 "(registry.approvals() mounts it)")
            self._actor = handle
        return self._actor

    def _handle(self) -> Any:
        return self._actor if self._actor is not None else Response(self._find).result()

    async def actor(self) -> Any:
        """The queue's actor handle (found through its registry); ``ValueError`` when the
        registry has none mounted."""
        return await self._find()

    def _call(self, method: str, *args: Any) -> Response[Any]:
        async def call() -> Any:
            return await remote_call(getattr(await self._find(), method), *args, what=self._what())
        return Response(call)

    def pending(self) -> Response[list[dict[str, Any]]]:
        """Pending asks, oldest first: ``id``, ``agent``, ``tool_name``, ``call_id``, ``reason``."""
        return self._call("pending")

    def allow(self, request_id: str) -> Response[bool]:
        """Grant one pending ask once; ``False`` when it is no longer pending."""
        return self._call("answer", request_id, "allowed-once")

    def reject(self, request_id: str) -> Response[bool]:
        return self._call("answer", request_id, "rejected")

    def set_policy(self, policy: str, agent: str | None = None) -> Response[None]:
        """``ask`` or ``never``, for everyone or (recorded in its session log) one agent."""
        check_policy(policy)
        return self._call("set_policy", policy, agent)

    def policy(self, agent: str | None = None) -> Response[str]:
        return self._call("policy", agent)

    def set_timeout(self, timeout_s: float | None, agents: dict[str, float] | None = None) -> Response[None]:
        """The deadline of asks made from now on (``None``: none) and per-agent ones: an ask
        not answered by then fails its call with ``APPROVAL_TIMEOUT``."""
        check_timeout(timeout_s)
        return self._call("set_timeout", timeout_s, agents)


ApprovalQueueActor = ray.remote(ApprovalQueueService)
"""The approval queue actor class (options: :data:`APPROVALS_OPTIONS`)."""
