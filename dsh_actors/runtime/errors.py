"""The one place Ray's exceptions become ours (httpx's transport boundary).

::

    HarnessError
    ├── PolicyUnavailableError    POLICY_UNAVAILABLE   a policy actor died, hung or is unreachable
    ├── WorkerCrashedError        WORKER_CRASHED       the process running the call died
    ├── ExecutionCancelledError   CANCELLED            the call's task was cancelled
    ├── ObjectLostError           OBJECT_LOST          a value the call needed is gone
    ├── ScopeUnavailableError     SCOPE_UNAVAILABLE    an agent scope actor is gone
    ├── RegistryUnavailableError  REGISTRY_UNAVAILABLE the registry actor is gone
    ├── PlacementError            PLACEMENT_FAILED     no node can run the tool (resources, runtime_env)
    └── RayRuntimeError           RAY_ERROR            any other Ray failure

Raw Ray exceptions never reach callers, observers or logs: :func:`translate` maps them,
chaining the original as ``__cause__``; an application error raised inside a remote call
is unwrapped to the original exception.
"""

from __future__ import annotations

from typing import Any

import ray.exceptions as rx

from ..core.errors import ExecutionCancelledError, HarnessError, error_message
from .process import current

__all__ = [
    "ChannelLost",
    "ExecutionCancelledError",
    "HeldDead",
    "ObjectLostError",
    "PlacementError",
    "PolicyUnavailableError",
    "RayRuntimeError",
    "RegistryUnavailableError",
    "ScopeUnavailableError",
    "WorkerCrashedError",
    "ACTOR_GONE",
    "DEAD_ACTORS",
    "OBJECT_GONE",
    "RAY_ERROR",
    "died_for_good",
    "held_dead",
    "never_reached",
    "remote_call",
    "translate",
    "unfollowed",
]

RAY_ERROR = rx.RayError
"""Every failure Ray raises (for ``except`` clauses that map it with :func:`translate`)."""


class ChannelLost(Exception):
    """An executor's channel (:mod:`.channel`) closed while a call was on it: the executor
    had said it received the call (``reached``: it may have run) or not (nothing ran).
    Not a caller-facing error: the caller turns it into ``WORKER_CRASHED`` or sends the
    call elsewhere, exactly as for Ray's failures in :data:`ACTOR_GONE`."""

    def __init__(self, reached: bool) -> None:
        super().__init__("the executor's channel closed " + (
            "after it received the call" if reached else "before the call reached it"))
        self.reached = reached


class HeldDead(Exception):
    """The call was not sent: this process's Ray already held its actor dead for good
    (:func:`held_dead`). Like :class:`ChannelLost`, never caller-facing: the caller sends
    the call elsewhere, since nothing of it reached the dead process."""

    def __init__(self, actor_id: str) -> None:
        super().__init__(f"actor {actor_id} is dead for good; the call was not sent to it")


ACTOR_GONE = (rx.RayActorError, rx.ActorUnavailableError, ChannelLost, HeldDead)
"""The failures meaning "the executor is gone": dead, restarting or unreachable (through
Ray, or its channel closed)."""
OBJECT_GONE = rx.ObjectLostError
"""Ray's failure meaning "that object is gone" (its owner died, or it was evicted)."""


def died_for_good(exc: BaseException) -> bool:
    """``True`` when ``exc`` says its actor is dead and will not restart."""
    return isinstance(exc, (rx.ActorDiedError, HeldDead))


_DEAD, _UNFOLLOWED = 4, (0, 1)  # ActorTableData's DEAD; DEPENDENCIES_UNREADY, PENDING_CREATION


def _local_state(handle: Any) -> int | None:
    try:
        return int(handle._get_local_state())
    except Exception:  # noqa: BLE001 - a handle (or a Ray) without it: unknown
        return None


def held_dead(handle: Any) -> bool:
    """``True`` when this process's Ray holds ``handle``'s actor dead for good: a call
    submitted now would be failed at once, unsent — with the very error a call that died
    inside the actor gets, so the caller checks this before it submits (≈0.4 µs)."""
    return _local_state(handle) == _DEAD


def unfollowed(handle: Any) -> bool:
    """``True`` while this process's Ray does not follow ``handle``'s actor's state yet (it
    does once a call was made through a handle to it; until then :func:`held_dead` cannot
    tell a dead actor from a live one)."""
    return _local_state(handle) in _UNFOLLOWED


_NOT_SENT = "The actor is restarting"
"""What Ray says when it fails a call at once because the actor is restarting: it did not
send the call (measured on Ray 2.60: a call in flight when its actor died reads "Socket
closed" or "Connection reset", one sent to an actor killed for good "died unexpectedly").
A test holds this to Ray's behaviour, so an upgrade that changes it fails there."""


def never_reached(exc: BaseException) -> bool:
    """``True`` when ``exc`` proves its call never reached the actor (so nothing ran, and
    the call may go to another one); a call that may have arrived is never resent."""
    if isinstance(exc, ChannelLost):
        return not exc.reached
    if isinstance(exc, HeldDead):
        return True
    return isinstance(exc, rx.ActorUnavailableError) and _NOT_SENT in str(exc)


class PolicyUnavailableError(HarnessError):
    """A listener living in a policy actor could not answer; the call fails closed."""

    code = "POLICY_UNAVAILABLE"


class WorkerCrashedError(HarnessError):
    """The worker process running the call died (a crash, ``os._exit``, OOM, node loss)."""

    code = "WORKER_CRASHED"


class AskLostError(HarnessError):
    """A call asked of its caller's own flow (an agent framework's approval) is no longer
    held: answered already, never held by this process, or its approval queue is gone."""

    code = "ASK_LOST"


class ObjectLostError(HarnessError):
    """A value the call needed (its plan, its result) was lost from the object store."""

    code = "OBJECT_LOST"


class ScopeUnavailableError(HarnessError):
    """The agent's scope actor is gone (closed, or its node died)."""

    code = "SCOPE_UNAVAILABLE"


class RegistryUnavailableError(HarnessError):
    """The registry actor is gone."""

    code = "REGISTRY_UNAVAILABLE"


class PlacementError(HarnessError):
    """The tool's Ray options cannot be satisfied (resources, runtime_env)."""

    code = "PLACEMENT_FAILED"


class RayRuntimeError(HarnessError):
    """Any other failure of the Ray runtime."""

    code = "RAY_ERROR"


def _why(exc: BaseException) -> str:
    text = error_message(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def translate(exc: BaseException, *, actor: type[HarnessError] = RayRuntimeError, what: str = "the call") -> BaseException:
    """Our exception for a Ray exception (the original is chained); others pass through.

    ``actor`` is the class to use when an actor died (a scope, the registry, a policy).
    """
    if isinstance(exc, rx.RayTaskError):
        cause = getattr(exc, "cause", None)
        if isinstance(cause, BaseException) and not isinstance(cause, rx.RayError):
            return cause
        return translate(cause, actor=actor, what=what) if isinstance(cause, rx.RayError) else RayRuntimeError(_why(exc))
    mapped: HarnessError
    if isinstance(exc, rx.TaskCancelledError):
        mapped = ExecutionCancelledError(f"{what} was cancelled")
    elif isinstance(exc, (rx.WorkerCrashedError, rx.NodeDiedError, rx.LocalRayletDiedError)):
        mapped = WorkerCrashedError(f"the worker running {what} died before it finished ({_why(exc)})")
    elif isinstance(exc, rx.OutOfMemoryError):
        mapped = WorkerCrashedError(f"the worker running {what} was killed for lack of memory")
    elif isinstance(exc, rx.ObjectLostError):
        mapped = ObjectLostError(f"a value {what} needed was lost ({type(exc).__name__})")
    elif isinstance(exc, (rx.RayActorError, rx.ActorUnavailableError)):
        mapped = actor(f"{what}: the actor is unavailable ({_why(exc)})")
    elif isinstance(exc, ChannelLost):
        mapped = WorkerCrashedError(f"the executor running {what} is gone ({exc})")
    elif isinstance(exc, HeldDead):
        mapped = actor(f"{what}: the actor is unavailable ({exc})")
    elif isinstance(exc, (rx.TaskUnschedulableError, rx.ActorUnschedulableError, rx.RuntimeEnvSetupError)):
        mapped = PlacementError(f"{what} cannot be placed: {_why(exc)}")
    elif isinstance(exc, rx.RayError):
        mapped = RayRuntimeError(f"{what} failed in the Ray runtime: {_why(exc)}")
    else:
        return exc
    mapped.__cause__ = exc
    return mapped


DEAD_ACTORS: set[str] = current().dead_actors
"""Ids (hex) of actors this process saw die for good (:attr:`.process.ProcessState.dead_actors`)."""


async def remote_call(method: Any, *args: Any, unavailable: type[HarnessError] = RayRuntimeError,
                      what: str = "the call") -> Any:
    """Await one actor method call; Ray's failures become ours (an application error
    raised by the method is re-raised as itself). An actor seen dead is remembered in
    :data:`DEAD_ACTORS`."""
    try:
        return await method.remote(*args)
    except rx.RayError as exc:
        remember_dead(exc)
        raise translate(exc, actor=unavailable, what=what) from None


def remember_dead(exc: BaseException) -> None:
    """Add the actor of an ``ActorDiedError`` to :data:`DEAD_ACTORS`."""
    if isinstance(exc, rx.ActorDiedError) and getattr(exc, "actor_id", None):
        DEAD_ACTORS.add(str(exc.actor_id))
