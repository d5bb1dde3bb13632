"""The process that made a request of a shared actor, and whether it still runs.

A shared actor (the approval queue, a fleet limiter) keeps requests waiting for their
callers; Ray does not tell it when a caller's process dies, so a waiting request would
outlive its call — an ask someone could still allow, a slot granted to nobody. A request
names its process (:func:`requester`: its actor handle and this process's incarnation);
the actor asks now and then (:func:`still_there`) and drops the requests of processes that
are gone or were restarted. The question goes through ``__ray_call__``, which every actor
has, so any actor can make a request (an episode runner, a scope host, an executor) —
not only those that define a probe of their own.
"""

from __future__ import annotations

import logging
from typing import Any

import ray

from ..core.within import within
from .errors import ACTOR_GONE
from .wire import PROCESS_INCARNATION

__all__ = ["CHECK_S", "requester", "still_there"]

log = logging.getLogger("dsh_actors.runtime")

CHECK_S = 2.0
"""How often an actor holding waiting requests checks that their processes still run."""


def requester() -> tuple[Any, str] | None:
    """This process, as a request names it (``None`` outside an actor: nobody to watch)."""
    try:
        return ray.get_runtime_context().current_actor, PROCESS_INCARNATION
    except Exception:  # noqa: BLE001 - not an actor
        return None


def _incarnation(actor: Any) -> str:
    """(Run in the asked actor's process by ``__ray_call__``.)"""
    return PROCESS_INCARNATION


async def still_there(handle: Any, incarnation: str) -> bool:
    """Whether the process that made a request still runs (its actor answers with the
    same incarnation); unsure (slow, or Ray's answer is not clear) counts as there."""
    try:
        return await within(handle.__ray_call__.remote(_incarnation), 30) == incarnation
    except ray.exceptions.ActorUnavailableError:  # restarting, or out of reach for now: not gone
        return True
    except ACTOR_GONE:
        return False
    except (TimeoutError, ray.exceptions.RayError):  # slow or unsure: a later check decides
        return True
    except Exception as exc:  # noqa: BLE001 - never a silent "still there": say what could not be asked
        log.warning("could not ask whether a requester still runs (it counts as running): %r", exc)
        return True
