"""A response you can ``await`` or block on (Ray Serve's ``DeploymentResponse``).

Every client call returns a :class:`Response`, and its work starts when the call is made,
as ``actor.method.remote()`` sends at once: in async code it is a task on the running
loop; elsewhere (a plain driver, a threaded actor) it runs on one background event loop
per process. ``await response`` or ``response.result(timeout_s=…)`` only collects the
outcome, and a response nobody collects still does its work — fire and forget. An error
nobody collected is logged when its response is dropped, never lost in silence.
``.result()`` inside a running event loop would deadlock it, so it refuses and says to
``await``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from typing import Any, Awaitable, Callable, Generator, Generic, TypeVar

__all__ = ["NamedActorClient", "Response"]

T = TypeVar("T")
log = logging.getLogger("dsh_actors.response")

_loop: asyncio.AbstractEventLoop | None = None
_loop_lock = threading.Lock()


def background_loop() -> asyncio.AbstractEventLoop:
    """The process's background event loop (a daemon thread), started on first use."""
    global _loop
    with _loop_lock:
        if _loop is None or _loop.is_closed():
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="dsh-actors-loop", daemon=True).start()
            _loop = loop
        return _loop


def _report_uncollected(future: "asyncio.Future[Any] | concurrent.futures.Future[Any]") -> None:
    if future.cancelled():
        return
    error = future.exception()
    if error is not None:
        log.warning("a dsh-actors call nobody awaited failed: %s: %s", type(error).__name__, error)


class Response(Generic[T]):
    """The eventual value of one client call, started when the call was made: ``await``
    it or call :meth:`result` (as often as you like: the same value each time)."""

    __slots__ = ("_future", "_on_cancel", "_collected")

    def __init__(self, factory: Callable[[], Awaitable[T]], *, on_cancel: Callable[[], None] | None = None) -> None:
        self._on_cancel = on_cancel
        self._collected = False
        self._future: asyncio.Future[T] | concurrent.futures.Future[T]
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._future = asyncio.run_coroutine_threadsafe(_call(factory), background_loop())
        else:
            self._future = loop.create_task(_call(factory))

    def __await__(self) -> Generator[Any, None, T]:
        return self._await().__await__()

    async def _await(self) -> T:
        self._collected = True
        future = self._future
        if isinstance(future, concurrent.futures.Future):
            return await asyncio.wrap_future(future)
        if future.get_loop() is asyncio.get_running_loop():
            return await future  # awaiting it directly: cancelling the awaiter cancels the call
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(_wait(future), future.get_loop()))

    def result(self, timeout_s: float | None = None) -> T:
        """Block until the value is ready; :class:`TimeoutError` after ``timeout_s``."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError(
                "Response.result() blocks, and this thread is running an event loop: use `await response` instead"
            )
        self._collected = True
        future = self._future
        if isinstance(future, asyncio.Future):  # made in async code on another thread's loop
            future = asyncio.run_coroutine_threadsafe(_wait(future), future.get_loop())
        try:
            return future.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"no response within {timeout_s}s (the call may still be running)") from None

    def done(self) -> bool:
        """``True`` once the call finished (with a value or an error)."""
        return self._future.done()

    def failed(self) -> bool:
        """``True`` once the call finished with an error (or was cancelled)."""
        future = self._future
        return future.done() and (future.cancelled() or future.exception() is not None)

    def cancel(self) -> None:
        """Ask for the underlying work to stop (an execution's task is cancelled)."""
        if self._on_cancel is not None:
            self._on_cancel()

    def __del__(self) -> None:
        if self._collected:
            return
        future = getattr(self, "_future", None)
        if future is None:
            return
        try:
            if future.done():
                _report_uncollected(future)
            else:  # fire and forget: whoever dropped it can no longer hear how it ends
                future.add_done_callback(_report_uncollected)
        except Exception:
            pass  # interpreter shutdown

    @classmethod
    def of(cls, value: T) -> "Response[T]":
        """A response that is already complete."""
        response = cls.__new__(cls)
        response._on_cancel = None
        response._collected = False
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        future.set_result(value)
        response._future = future
        return response


async def _call(factory: Callable[[], Awaitable[T]]) -> T:
    return await factory()


async def _wait(future: "asyncio.Future[T]") -> T:
    return await asyncio.shield(future)


class NamedActorClient:
    """A client of one named actor: finds it by name on first use, pickles as its name,
    and turns each method call into a :class:`Response` (Ray's failures translated)."""

    def __init__(self, key: str, namespace: str, handle: Any = None) -> None:
        self._key = key
        self.namespace = namespace
        self._actor = handle

    def _actor_name(self) -> str:
        raise NotImplementedError

    def _what(self) -> str:
        return self._actor_name()

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._key, self.namespace))

    def _handle(self) -> Any:
        if self._actor is None:
            import ray

            self._actor = ray.get_actor(self._actor_name(), namespace=self.namespace)
        return self._actor

    def _call(self, method: str, *args: Any) -> "Response[Any]":
        from .errors import remote_call

        return Response(lambda: remote_call(getattr(self._handle(), method), *args, what=self._what()))
