"""Listeners that live in policy actors: state shared by every execution in the fleet.

A listener may be a plain callable (shipped in the plan to the executors) or a method of a
policy actor, wrapped by :func:`actor_listener`. Both follow the same ordering,
``call_next`` and containment rules. Because ``call_next`` cannot cross a process, an
actor method answers the waterfall with a value:

* a decision or result — it short-circuits, as a listener returning without
  ``call_next`` does;
* :data:`CONTINUE` — delegate (``await call_next()``) and return what it gives;
* ``Continue(after="method")`` — delegate, then call ``method(execution, *args, outcome)``
  on the same actor; its answer replaces the outcome unless it is ``None``.

The actor method receives ``(execution, *stage_args)``: ``(execution,)`` for
pre-execute, execute and guards, ``(execution, result)`` for post-execute and
``tools/result``. A waterfall method may also take the plain listener's last parameter,
``call_next`` — ``(execution, call_next)``, ``(execution, result, call_next)`` — so one
function works in process and in an actor: there, ``call_next()`` returns
:data:`CONTINUE`, which the method returns to hand on. An actor that dies, raises a Ray
error or does not answer within ``timeout_s`` fails the call closed with
``POLICY_UNAVAILABLE``; a ``tools/result`` observer is sent without waiting and its
failure is logged.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from dataclasses import dataclass
from typing import Any

import ray

from ..core.errors import error_message
from ..core.types import ToolExecutionResult
from .errors import RAY_ERROR, PolicyUnavailableError, translate

__all__ = ["CONTINUE", "ActorListener", "Continue", "HandOn", "actor_listener"]

log = logging.getLogger("dsh_actors.policy")


@dataclass(frozen=True, slots=True)
class Continue:
    """A policy actor's "call next" answer; ``after`` names a method to see the outcome."""

    after: str | None = None


CONTINUE = Continue()


class HandOn:
    """The ``call_next`` an actor method receives: calling it answers :data:`CONTINUE`
    (the executor then calls the real next listener)."""

    __slots__ = ()

    def __call__(self) -> Continue:
        return CONTINUE

    def __reduce__(self) -> tuple[Any, ...]:
        return (HandOn, ())


_HAND_ON = HandOn()
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def _positional_count(handle: Any, method: str) -> int | None:
    """How many positional parameters the actor method takes (``None``: unknown)."""
    try:
        parameters = handle._ray_method_signatures[method]
    except (AttributeError, KeyError, TypeError):
        return None
    return sum(1 for p in parameters if p.kind in _POSITIONAL and p.name != "_ray_trace_ctx")


class ActorListener:
    """A policy actor method usable anywhere a listener or guard is."""

    __slots__ = ("handle", "method", "timeout_s", "_arity")

    def __init__(self, handle: Any, method: str, timeout_s: float = 10.0) -> None:
        if not isinstance(method, str) or not method:
            raise TypeError("actor_listener needs the name of a method of the policy actor")
        self.handle = handle
        self.method = method
        self.timeout_s = timeout_s
        self._arity: int | None = -1  # positional parameters of the method; -1: not read yet

    @property
    def __name__(self) -> str:  # shown in logs and error texts
        return f"{self.method}@policy-actor"

    async def _ask(self, method: str, *args: Any) -> Any:
        ref = getattr(self.handle, method).remote(*args)
        try:
            async with asyncio.timeout(self.timeout_s):  # no Task per call, unlike wait_for
                return await ref
        except TimeoutError:  # asyncio's, and Ray's GetTimeoutError
            ray.cancel(ref)
            raise PolicyUnavailableError(
                f'policy actor method "{method}" did not answer within {self.timeout_s}s; the call fails closed'
            ) from None
        except RAY_ERROR as exc:
            mapped = translate(exc, actor=PolicyUnavailableError, what=f'policy actor method "{method}"')
            if isinstance(mapped, BaseException) and mapped is not exc:
                raise mapped from None
            raise PolicyUnavailableError(f'policy actor method "{method}" failed: {error_message(exc)}') from None

    def __call__(self, execution: Any, *rest: Any) -> Any:
        if rest and callable(rest[-1]) and not isinstance(rest[-1], ToolExecutionResult):
            return self._waterfall(execution, rest[:-1], rest[-1])
        if rest:  # tools/result: observe without waiting
            self._observe(execution, rest[0])
            return None
        return self._ask(self.method, execution)  # a guard: awaited by the pipeline

    async def _waterfall(self, execution: Any, args: tuple[Any, ...], call_next: Any) -> Any:
        if self._arity == -1:
            self._arity = _positional_count(self.handle, self.method)
        sent = (*args, _HAND_ON) if self._arity == len(args) + 2 else args  # it takes call_next too
        reply = await self._ask(self.method, execution, *sent)
        if not isinstance(reply, Continue):
            return reply
        outcome = await call_next()
        if reply.after is None:
            return outcome
        replaced = await self._ask(reply.after, execution, *args, outcome)
        return outcome if replaced is None else replaced

    def _observe(self, execution: Any, result: Any) -> None:
        ref = getattr(self.handle, self.method).remote(execution, result)
        name = self.method

        def report(future: Any) -> None:
            try:
                future.result()
            except Exception as exc:
                cause = translate(exc, actor=PolicyUnavailableError, what=f'observer "{name}"')
                log.warning('tool "%s" (%s): tools/result observer failed: %s',
                            execution.name, execution.call_id, error_message(cause))

        ref.future().add_done_callback(report)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ActorListener, (self.handle, self.method, self.timeout_s))


def actor_listener(handle: Any, method: str, *, timeout_s: float = 10.0) -> ActorListener:
    """Use ``handle.<method>`` as a listener, guard or observer (see the module docs)."""
    return ActorListener(handle, method, timeout_s)
