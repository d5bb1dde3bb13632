"""What undoes a registration (:class:`Disposer`), and what ties a plugin's registrations to
the process that made it (:func:`process_anchor`: a tiny actor that dies with that process,
which the registry watches)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Callable

import ray

from .process import current
from .response import Response

__all__ = ["Disposer", "process_anchor"]


class Disposer:
    """Undoes one registration: ``disposer()`` starts the undo at once and returns its
    :class:`Response` (await it, block on it, or drop it). Calling again returns the same
    response; after a failed undo (the registry was unreachable) it tries again.
    ``disposed`` is true once the undo has finished."""

    __slots__ = ("_undo", "_response", "_lock")

    def __init__(self, undo: Callable[[], Any]) -> None:
        self._undo = undo
        self._response: Response[None] | None = None
        self._lock = threading.Lock()

    def __call__(self) -> Response[None]:
        with self._lock:
            if self._response is None or self._response.failed():
                self._response = Response(self._undo)
            return self._response

    @property
    def disposed(self) -> bool:
        response = self._response
        return response is not None and response.done() and not response.failed()


class _OwnerAnchorService:
    """A tiny actor owned by one client process: Ray kills it when that process dies,
    which tells the registry to dispose that process's plugins."""

    async def wait(self) -> None:
        await asyncio.Event().wait()


def process_anchor() -> Any:
    """This process's anchor actor (made on first use): Ray kills it when this process dies."""
    state = current()
    with state.lock:
        if state.anchor is None:
            state.anchor = _OwnerAnchor.options(num_cpus=0, max_restarts=0).remote()  # type: ignore[attr-defined]
        return state.anchor


_OwnerAnchor = ray.remote(_OwnerAnchorService)
"""The anchor actor class (fate-shared with its owner's process)."""
