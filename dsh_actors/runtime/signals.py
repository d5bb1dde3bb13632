"""Abort signals across processes: a caller's abort reaches the tool body wherever it runs.

A caller passes an ordinary :class:`~dsh_actors.core.signal.AbortSignal`. When the call
leaves the process, the client gives the signal an id; if it aborts, the client tells the
registry's *signal hub* (a small async actor owned by the registry actor, whose ``abort``
runs in its own concurrency group, so a hub busy with waiters never delays an abort). The executor (and a body task, for a body with Ray options) builds a local signal for
the same id and keeps one ``wait`` call open on the hub while the pipeline runs; when it
returns, the local signal aborts with the caller's reason — first reason wins, as
everywhere. The tool body sees ``ctx.signal.aborted`` / ``reason`` / ``await ctx.signal``
/ ``raise_if_aborted()`` as it would in one process.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any, Callable, Iterator

import ray

from ..core.signal import AbortController, AbortSignal
from .backoff import WHILE_RESTARTING
from .errors import ACTOR_GONE, died_for_good

__all__ = ["HUB_OPTIONS", "HubRef", "SignalHub", "SignalHubService", "link_remote_signal", "portable_reason", "publish_signal", "send_signal", "signal_of"]

_KEEP_S = 600.0  # an aborted id is remembered this long for a late watcher


# Restarted by Ray if its process dies: the waits open on it fail and are re-opened, and
# aborts are re-sent until a live hub takes them (see _retrying and RemoteSignal).
HUB_OPTIONS = {"num_cpus": 0, "max_restarts": -1, "max_task_retries": 0}
"""Options of a signal hub actor (applied where the registry starts it)."""


class SignalHubService:
    """Holds abort reasons by signal id and wakes the tasks waiting on them.

    ``abort`` runs in its own concurrency group — its own thread and event loop — so it
    wakes waiters with ``call_soon_threadsafe`` on the waiter's loop.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._reasons: dict[str, tuple[Any, float]] = {}
        self._waiters: dict[str, list[tuple[asyncio.AbstractEventLoop, asyncio.Event]]] = {}

    @ray.method(concurrency_group="abort")
    def abort(self, signal_id: str, reason: Any) -> bool:
        """Abort ``signal_id`` (first reason wins); ``False`` if it was already aborted."""
        with self._lock:
            if signal_id in self._reasons:
                return False
            now = time.monotonic()
            self._reasons[signal_id] = (reason, now)
            waiters = self._waiters.pop(signal_id, [])
            for old in [k for k, (_, at) in self._reasons.items() if now - at > _KEEP_S]:
                del self._reasons[old]
        for loop, event in waiters:
            loop.call_soon_threadsafe(event.set)
        return True

    async def wait(self, signal_id: str) -> Any:
        """Return the abort reason once ``signal_id`` aborts (cancelled when the call ends)."""
        loop, event = asyncio.get_running_loop(), asyncio.Event()
        with self._lock:
            if signal_id in self._reasons:
                return self._reasons[signal_id][0]
            self._waiters.setdefault(signal_id, []).append((loop, event))
        try:
            await event.wait()
            with self._lock:
                return self._reasons[signal_id][0]
        finally:
            with self._lock:
                remaining = [w for w in self._waiters.get(signal_id, []) if w[1] is not event]
                if remaining:
                    self._waiters[signal_id] = remaining
                else:
                    self._waiters.pop(signal_id, None)


class HubRef:
    """The registry's signal hub as its users hold it: a handle that, once seen dead for
    good (``ray.kill``), is exchanged for the successor the registry starts. (A hub whose
    process died is restarted by Ray under the same handle.) Pickles as the registry's
    name and the handle, so executors and body tasks receive it."""

    __slots__ = ("registry", "namespace", "handle", "_lock")

    def __init__(self, registry: str, namespace: str, handle: Any) -> None:
        self.registry, self.namespace, self.handle = registry, namespace, handle
        self._lock = threading.Lock()

    def __reduce__(self) -> tuple[Any, ...]:
        return (HubRef, (self.registry, self.namespace, self.handle))

    def died(self, seen: Any) -> None:
        """``seen`` (the handle a call just failed on) is dead for good: ask the registry
        for the live hub (blocking: called from timer threads, never an event loop)."""
        with self._lock:
            if seen is not self.handle:
                return  # already exchanged
            try:
                registry = ray.get_actor(self.registry, namespace=self.namespace)
                # a future, not ray.get: this may be a thread of an async actor's process
                fresh: HubRef = registry.signal_hub.remote(seen._actor_id.hex()).future().result(30)
            except Exception:
                return  # the registry is gone too: nothing left to deliver to
            self.handle = fresh.handle


def publish_signal(signal: AbortSignal, hub: HubRef) -> tuple[str, Callable[[], None]]:
    """Give ``signal`` an id on ``hub``; its abort is forwarded there. Returns the id and a
    remover for when the call is over."""
    signal_id = uuid.uuid4().hex
    remove = signal.add_listener(
        lambda reason: _retrying(hub, lambda h: h.abort.remote(signal_id, portable_reason(reason)), lambda _: None))
    return signal_id, remove


def _retrying(hub: HubRef, send: Callable[[Any], Any], done: Callable[[Any], object],
              stopped: Callable[[], bool] = lambda: False, pauses: Iterator[float | None] | None = None) -> None:
    """Send a call to the hub; while the hub is dead or restarting, send it again (a short
    timer each time, never blocking the caller), then hand the answer to ``done``."""
    handle = hub.handle
    left = pauses if pauses is not None else WHILE_RESTARTING.pauses()

    def arrived(future: Any) -> None:
        try:
            value = future.result()
        except ACTOR_GONE as exc:
            dead = died_for_good(exc)
            pause = next(left)
            if pause is not None and not stopped():
                def again() -> None:
                    if not ray.is_initialized():  # the connection ended: never start a new Ray
                        return
                    if dead:
                        hub.died(handle)
                    _retrying(hub, send, done, stopped, left)
                timer = threading.Timer(pause, again)
                timer.daemon = True
                timer.start()
            return
        except Exception:
            return  # cancelled (the call ended first) or a real failure: nothing to deliver
        done(value)

    try:
        send(handle).future().add_done_callback(arrived)
    except Exception:
        pass


def portable_reason(reason: Any) -> Any:
    """Reasons cross processes: keep picklable ones, else their text."""
    try:
        ray.cloudpickle.dumps(reason)
        return reason
    except Exception:
        return str(reason)


class RemoteSignal(AbortSignal):
    """A signal mirroring one on the hub. It starts waiting on the hub only when first
    looked at (``aborted``, ``reason``, a listener, ``await``): most tool bodies never
    read their signal, and an open wait is one more actor call per call."""

    __slots__ = ("_hub", "_signal_id", "_ref", "_linked", "_stopped")

    def __init__(self, hub: HubRef, signal_id: str) -> None:
        super().__init__()
        self._hub = hub
        self._signal_id = signal_id
        self._ref: Any = None
        self._linked = False
        self._stopped = False

    def _link(self) -> None:
        if self._linked:
            return
        self._linked = True

        def send(handle: Any) -> Any:
            self._ref = handle.wait.remote(self._signal_id)
            return self._ref

        _retrying(self._hub, send, self._abort, stopped=lambda: self._stopped)

    @property
    def aborted(self) -> bool:
        self._link()
        return self._aborted

    @property
    def reason(self) -> Any:
        self._link()
        return self._reason

    def add_listener(self, callback: Callable[[Any], object]) -> Callable[[], None]:
        self._link()
        return super().add_listener(callback)

    def raise_if_aborted(self) -> None:
        self._link()
        super().raise_if_aborted()

    async def wait(self) -> Any:
        self._link()
        return await super().wait()

    def cancelled(self, reason: Any) -> None:
        """The call was cancelled where it runs: abort here too, so a body still running (a
        plain one, in a thread the cancellation cannot stop) sees it, whether or not the
        caller's abort ever arrives."""
        self._abort(reason)

    def stop(self) -> None:
        """The call is over: end the wait on the hub (if one was opened)."""
        self._stopped = True
        if self._ref is not None:
            try:
                ray.cancel(self._ref)
            except Exception:
                pass


def link_remote_signal(hub: HubRef, signal_id: str) -> tuple[AbortSignal, Callable[[], None]]:
    """Inside an executor or a body task: a local signal that aborts when ``signal_id`` does,
    and the function that releases it when the call is over."""
    signal = RemoteSignal(hub, signal_id)
    return signal, signal.stop


def send_signal(signal: AbortSignal, hub: HubRef) -> tuple[str | None, bytes | None, Callable[[], None] | None]:
    """How ``signal`` travels with a call's envelope (the sending twin of :func:`signal_of`):
    ``(signal_id, aborted, release)`` — an already-aborted signal carries its pickled
    reason, a live one an id on ``hub`` and the function to call when the call is over."""
    if signal.aborted:
        return None, ray.cloudpickle.dumps(portable_reason(signal.reason)), None
    signal_id, release = publish_signal(signal, hub)
    return signal_id, None, release


def signal_of(call: Any, hub: Any) -> tuple[AbortSignal | None, Callable[[], None] | None]:
    """The signal of an unpacked call envelope (:class:`~.wire.Envelope`) on this side (and
    what releases it): already aborted, linked to the caller's through the signal hub, or none."""
    if call.aborted is not None:
        controller = AbortController()
        controller.abort(ray.cloudpickle.loads(call.aborted))
        return controller.signal, None
    if call.signal is not None:
        return link_remote_signal(hub, call.signal)
    return None, None


SignalHub = ray.remote(concurrency_groups={"abort": 2})(SignalHubService)  # type: ignore[call-overload]
"""The signal hub actor class (``abort`` runs in a concurrency group of its own: never behind a wait)."""
