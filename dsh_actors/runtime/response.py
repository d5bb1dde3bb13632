"""A response you can ``await`` or block on (Ray Serve's ``DeploymentResponse``).

Every client call returns a :class:`Response`. In async code (including async actors)
``await response``; in a plain driver or a threaded actor ``response.result(timeout_s=…)``.
Calling ``.result()`` from inside a running event loop would deadlock it, so it refuses
and says to ``await``. Blocking calls run the same coroutine on one background event
loop per process, so there is a single implementation of every operation.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any, Awaitable, Callable, Generator, Generic, TypeVar

__all__ = ["NamedActorClient", "Response"]

T = TypeVar("T")

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


class Response(Generic[T]):
    """The eventual value of one client call: ``await`` it or call :meth:`result`.

    The work starts when the response is first awaited or resolved (lazily), and runs
    once: awaiting it again returns the same value.
    """

    __slots__ = ("_factory", "_future", "_on_cancel", "_lock")

    def __init__(self, factory: Callable[[], Awaitable[T]], *, on_cancel: Callable[[], None] | None = None) -> None:
        self._factory = factory
        self._future: concurrent.futures.Future[T] | asyncio.Future[T] | None = None
        self._on_cancel = on_cancel
        self._lock = threading.Lock()

    def __await__(self) -> Generator[Any, None, T]:
        return self._await().__await__()

    async def _await(self) -> T:
        with self._lock:
            future = self._future
            if future is None:
                # First awaiter runs the work in its own task (no extra Task on the hot path);
                # later awaiters wait on the shared future.
                future = self._future = asyncio.get_running_loop().create_future()
                owner = True
            else:
                owner = False
        if isinstance(future, concurrent.futures.Future):
            return await asyncio.wrap_future(future)
        if not owner:
            return await future
        try:
            value = await self._factory()
        except BaseException as exc:
            if not future.done():
                if isinstance(exc, asyncio.CancelledError):
                    future.cancel()
                else:
                    future.set_exception(exc)
                    future.exception()  # mark retrieved: the owner re-raises it
            raise
        future.set_result(value)
        return value

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
        with self._lock:
            if self._future is None:
                self._future = asyncio.run_coroutine_threadsafe(_call(self._factory), background_loop())
            future = self._future
        if isinstance(future, asyncio.Future):
            raise RuntimeError("this response is being awaited on an event loop; await it there")
        try:
            return future.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(f"no response within {timeout_s}s (the call may still be running)") from None

    def cancel(self) -> None:
        """Ask for the underlying work to stop (an execution's task is cancelled)."""
        if self._on_cancel is not None:
            self._on_cancel()

    @classmethod
    def of(cls, value: T) -> "Response[T]":
        """A response that is already complete."""
        async def ready() -> T:
            return value
        return cls(ready)


async def _call(factory: Callable[[], Awaitable[T]]) -> T:
    return await factory()


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
