"""This process's link to one registry: its actors' handles, re-resolved when seen dead.

Every client of a registry in a process (registries, scopes, plugins, calls, Code Mode
sub-calls) shares one :class:`RegistryLink` (its registry's owner in this process holds
it), so a handle found dead by one of them is replaced for all. A dead registry is resolved again by name (``connect`` made a
fresh one, which its owners register into again); a dead scope host is replaced by the
registry from its agents' journals; the signal hub is asked of the registry again.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import ray

from ..errors import DEAD_ACTORS, RegistryUnavailableError, ScopeUnavailableError, remote_call
from ..wire import host_index

__all__ = ["RegistryLink"]


def _dead(handle: Any) -> bool:
    return handle is None or handle._actor_id.hex() in DEAD_ACTORS


class RegistryLink:
    """Handles of one registry's actors, for this process (see the module docs).

    ``incarnation`` counts the registry actors this link has seen: whatever a client
    cached for an older one (plans, executors) no longer holds.
    """

    def __init__(self, name: str, namespace: str) -> None:
        self.name = name
        self.namespace = namespace
        self.incarnation = 0
        self._actor: Any = None
        self._scopes: dict[str, Any] = {}  # dedicated hosting: agent -> its host
        self._hosts: list[Any] | None = None  # shared hosting's hosts ([]: dedicated hosting)
        self._shared: bool | None = None  # whether the registry hosts scopes shared (asked once)
        self._hub: Any = None
        self._asking_hosts: tuple[int, Any] | None = None  # (incarnation, the scope_hosts call in flight)
        self._lock = threading.Lock()

    def adopt(self, handle: Any) -> None:
        """Use ``handle`` (just created or looked up by ``connect``) for the registry."""
        with self._lock:
            if handle is not None and (self._actor is None or self._actor._actor_id != handle._actor_id):
                self._switch(handle)

    def _switch(self, handle: Any) -> None:
        self._actor = handle
        self.incarnation += 1
        self._hub = None
        self._scopes.clear()
        self._hosts = None
        self._shared = None

    def _gone(self) -> RegistryUnavailableError:
        return RegistryUnavailableError(
            f'registry "{self.name}" is gone (killed or shut down); ToolRegistry.connect({self.name!r}) '
            "makes a fresh one, which its owners must register into again")

    def _found(self, actor: Any) -> Any:
        if _dead(actor):
            raise self._gone()
        with self._lock:
            if self._actor is None or self._actor._actor_id != actor._actor_id:
                self._switch(actor)
        return actor

    def actor(self) -> Any:
        """The registry actor's handle (blocking, for plain code: a dead one is looked up
        again by name); raises :class:`RegistryUnavailableError` when it is gone for good."""
        actor = self._actor
        if not _dead(actor):
            return actor
        try:
            return self._found(ray.get_actor(self.name, namespace=self.namespace))
        except ValueError:
            raise self._gone() from None

    async def actor_async(self) -> Any:
        """:meth:`actor` for async code: the name lookup (a blocking call to the cluster's
        control store) runs off the event loop."""
        actor = self._actor
        if not _dead(actor):
            return actor
        try:
            found = await asyncio.to_thread(ray.get_actor, self.name, namespace=self.namespace)
        except ValueError:
            raise self._gone() from None
        return self._found(found)

    async def call(self, method: str, *args: Any) -> Any:
        """Await one registry method; Ray's failures become ``REGISTRY_UNAVAILABLE`` & co."""
        return await remote_call(getattr(await self.actor_async(), method), *args,
                                 unavailable=RegistryUnavailableError, what="the registry")

    async def scope(self, agent: str) -> Any:
        """The host of ``agent``'s scope (made on first use; one seen dead is replaced).
        With shared hosting the agent is hashed onto the registry's hosts here, so a new
        scope costs no registry call."""
        hosts = self._hosts
        if hosts is None:
            hosts = await self._scope_hosts()
        if hosts:
            index = host_index(agent, len(hosts))
            if _dead(hosts[index]):
                hosts[index] = await self.call("ensure_scope", agent, hosts[index]._actor_id.hex())
            return hosts[index]
        handle = self._scopes.get(agent)
        if handle is None or _dead(handle):
            dead = None if handle is None else handle._actor_id.hex()
            handle = await self.call("ensure_scope", agent, dead)
            self._scopes[agent] = handle
        return handle

    @property
    def shares_hosts(self) -> bool:
        """Whether this registry's scopes are known to live in its shared hosts (no actor of
        their own: one whose host holds nothing for it has nothing to end)."""
        return bool(self._shared) or bool(self._hosts)

    async def hosts_shared(self) -> bool:
        """Whether the registry hosts its scopes shared (asked of it once; its hosts are
        made only when a scope first needs one)."""
        if self._shared is None:
            self._shared = (await self.call("config"))["scope_hosting"] == "shared"
        return self._shared

    async def _scope_hosts(self) -> list[Any]:
        """The registry's scope hosts, asked once however many scopes start at the same
        moment ([] with dedicated hosting); asked again after a registry change."""
        incarnation = self.incarnation
        found = self._asking_hosts
        if found is not None and found[0] == incarnation and found[1].get_loop() is asyncio.get_running_loop():
            asking = found
        else:
            asking = self._asking_hosts = (incarnation, asyncio.ensure_future(self.call("scope_hosts")))
        try:
            hosts = list(await asyncio.shield(asking[1]))
        finally:
            if self._asking_hosts is asking and asking[1].done():
                self._asking_hosts = None
        if self.incarnation == incarnation:
            self._hosts = hosts
        return hosts

    async def call_scope(self, agent: str, method: str, *args: Any, resend: bool = False) -> Any:
        """Await one method of ``agent``'s scope (every host method names the agent).

        ``resend``: the call runs nothing twice (a read, a plan, a dispose), so if its host
        turns out dead it goes once more, to the host that replaces it from the journal."""
        for last_try in (not resend, True):
            handle = await self.scope(agent)
            try:
                return await remote_call(getattr(handle, method), agent, *args, unavailable=ScopeUnavailableError,
                                         what=f"the scope of agent {agent!r}")
            except ScopeUnavailableError:
                if last_try or not _dead(handle):
                    raise
        raise AssertionError("unreachable")

    def forget_scope(self, agent: str) -> None:
        self._scopes.pop(agent, None)

    async def signal_hub(self) -> Any:
        if self._hub is None:
            self._hub = await self.call("signal_hub")
        return self._hub
