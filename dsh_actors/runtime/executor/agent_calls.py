"""The calls a process runs now, by agent: what aborting an agent's work cancels.

An episode run again after its runner died must not share its workspace with its dead
attempt's calls, which its executors would otherwise go on running (nobody waits for
them, and nothing else stops them). :class:`AgentCalls` knows each running call's task by
its agent, so the executors and Code Mode queues can cancel every call of given agents
(:meth:`~.surface.CallSurface.abort_agents`); a cancelled call cancels its body (a body in
a thread of its own runs to its end: see the executor's per-agent thread share).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Iterable, Iterator

__all__ = ["AgentCalls"]


class AgentCalls:
    """Running calls' tasks, by agent (one per process that runs calls)."""

    def __init__(self) -> None:
        self._tasks: dict[str, set[asyncio.Task[object]]] = {}

    @contextlib.contextmanager
    def running(self, agent: str | None) -> Iterator[None]:
        """The current task runs a call of ``agent`` for as long as this block lasts."""
        task = asyncio.current_task()
        if agent is None or task is None:
            yield
            return
        tasks = self._tasks.setdefault(agent, set())
        tasks.add(task)
        try:
            yield
        finally:
            tasks.discard(task)
            if not tasks:
                self._tasks.pop(agent, None)

    def cancel(self, agents: Iterable[str], why: str) -> int:
        """Cancel every running call of ``agents``; how many there were."""
        doomed = [task for agent in set(agents) for task in self._tasks.get(agent, ())]
        for task in doomed:
            task.cancel(why)
        return len(doomed)

    def cancel_from_any_thread(self, agents: Iterable[str], why: str) -> int:
        """:meth:`cancel` for a caller on another thread than the calls' loop: each is
        cancelled on its own loop; how many there were."""
        doomed = [task for agent in set(agents) for task in list(self._tasks.get(agent, ()))]
        for task in doomed:
            task.get_loop().call_soon_threadsafe(task.cancel, why)
        return len(doomed)
