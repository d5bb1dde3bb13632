"""Tools and policies shared by the runtime tests (pickled by value into workers)."""

import os
import time

import pytest
import ray

from dsh_actors import accept, block, define_tool, deny, text_block
from dsh_actors.runtime import CONTINUE, Continue

from ..behaviours import echo  # noqa: F401 - the runtime tests' echo tool is the behaviour table's


def where_am_i(name="where", **extra):
    """A tool that answers with the node and process it ran in."""
    def body(args, ctx):
        context = ray.get_runtime_context()
        return [text_block(f"{context.get_node_id()} {os.getpid()}")]
    return define_tool(name=name, description="report placement", parameters={}, execute=body, **extra)


@ray.remote(num_cpus=0)
class Tapes:
    """Every recorder's items, in one actor for the whole session (an actor is a process:
    about a second of CPU to start, and the suite made dozens of recorders)."""

    def __init__(self):
        self.tapes = {}

    def add(self, key, item):
        self.tapes.setdefault(key, []).append(item)

    def all(self, key):
        return list(self.tapes.get(key, ()))


class _TapeMethod:
    def __init__(self, tapes, name, key):
        self._call, self._key = getattr(tapes, name), key

    def remote(self, *args):
        return self._call.remote(self._key, *args)


class Recorder:
    """Collects what observers and tool bodies report, used like an actor handle:
    ``recorder = Recorder.remote()``, ``recorder.add.remote(item)``,
    ``ray.get(recorder.all.remote())``. Each recorder is a tape of its own on the session's
    :class:`Tapes` actor; adds from one process arrive in order, as to an actor of its own."""

    _NAME = "dsh-test-tapes"

    def __init__(self, tapes, key):
        self._tapes, self._key = tapes, key
        self.add = _TapeMethod(tapes, "add", key)
        self.all = _TapeMethod(tapes, "all", key)

    @classmethod
    def remote(cls):
        # Detached: a named actor is still collected once no handle is left, and a test's
        # get_if_exists could be handed one the last test's dropped handles were taking down.
        # (It ends with the session's cluster.)
        tapes = Tapes.options(name=cls._NAME, namespace="dsh-tests", get_if_exists=True,
                              lifetime="detached").remote()
        return cls(tapes, os.urandom(8).hex())

    def __reduce__(self):  # travels as its actor handle and key
        return (Recorder, (self._tapes, self._key))


@ray.remote(num_cpus=0)
class Policy:
    """The scenario's policies as a policy actor (shared state: a call counter)."""

    def __init__(self, recorder=None):
        self.recorder = recorder
        self.seen = 0

    def gate(self, execution):
        self.seen += 1
        if execution.name == "secret":
            return deny("secrets are off limits")
        return CONTINUE

    def gate_around(self, execution):
        return Continue(after="gate_after")

    def gate_after(self, execution, decision):
        return None

    def redact(self, execution, result):
        if "password" in result.text:
            return block("output withheld: it contained a secret")
        return CONTINUE

    def stamp(self, execution):
        return Continue(after="stamp_after")

    def stamp_after(self, execution, result):
        return result.evolve(content=[text_block(result.text + " [stamped]")])

    def no_writes(self, execution):
        return "writes are disabled" if execution.name == "write" else None

    def observe(self, execution, result):
        self.recorder.add.remote((execution.call_id, result.is_error))

    def count(self):
        return self.seen

    def hang(self, execution):
        import time
        time.sleep(60)
        return CONTINUE

    def explode(self, execution):
        raise ValueError("policy exploded")


def plain_policies(recorder):
    """The same scenario's policies as plain callables."""

    async def gate(execution, call_next):
        if execution.name == "secret":
            return deny("secrets are off limits")
        return await call_next()

    async def redact(execution, result, call_next):
        if "password" in result.text:
            return block("output withheld: it contained a secret")
        return await call_next()

    async def stamp(execution, call_next):
        result = await call_next()
        return result.evolve(content=[text_block(result.text + " [stamped]")])

    def no_writes(execution):
        return "writes are disabled" if execution.name == "write" else None

    def observe(execution, result):
        recorder.add.remote((execution.call_id, result.is_error))

    return {"gate": gate, "redact": redact, "stamp": stamp, "no_writes": no_writes, "observe": observe}


def accept_all(execution, result, call_next):
    return accept()


def gate_fn(execution, call_next):
    """One gate for both homes: a plain listener, or the body of a policy actor method."""
    if execution.name == "secret":
        return deny("secrets are off limits")
    return call_next()


def redact_fn(execution, result, call_next):
    if "password" in result.text:
        return block("output withheld: it contained a secret")
    return call_next()


@ray.remote(num_cpus=0)
class SharedPolicy:
    """The same functions as actor methods: call_next there hands on."""

    def gate(self, execution, call_next):
        return gate_fn(execution, call_next)

    def redact(self, execution, result, call_next):
        return redact_fn(execution, result, call_next)


def hanging_registry(registry):
    """Register ``hangs`` (reports its process id, then waits ten minutes), ``echo`` and a
    ``tools/result`` observer on ``registry``; returns the recorders ``(started, observed)``."""
    import asyncio

    started, observed = Recorder.remote(), Recorder.remote()

    async def hangs(args, ctx):
        started.add.remote(os.getpid())
        await asyncio.sleep(600)
        return [text_block("never")]

    registry.register(define_tool(name="hangs", description="waits", parameters={}, execute=hangs)).result(120)
    registry.register(echo()).result(120)
    registry.on("tools/result", call_ids_into(observed)).result(120)
    return started, observed


def call_ids_into(recorder):
    """A ``tools/result`` observer that adds each result's call id to ``recorder``. It
    returns nothing: observers are synchronous, and a Ray ref returned would be awaitable."""

    def observe(execution, result):
        recorder.add.remote(result["call_id"])

    return observe


class WhenMarked:
    """A thread that waits until ``folder`` holds ``count`` entries (calls have run), then
    does ``action()`` once; ``done`` is the wall-clock time it did (``None`` if it never did)."""

    def __init__(self, folder, count, action, within_s=60):
        import threading

        self.done = None
        self._thread = threading.Thread(target=self._run, args=(folder, count, action, within_s))
        self._thread.start()

    def _run(self, folder, count, action, within_s):
        import time
        from pathlib import Path

        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline and len(list(Path(folder).iterdir())) < count:
            time.sleep(0.05)
        action()
        self.done = time.time()

    def join(self):
        self._thread.join()
        return self.done


def process_alive(pid):
    """Whether ``pid`` is a live process, read from /proc (gone, or a zombie left for its
    parent, is not): asked from outside, not of the process or of Ray."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def pid_of(handle, timeout_s=60):
    """The id of actor ``handle``'s process (asked of the actor itself; one that Ray is
    restarting is asked again until its next process answers, within ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return ray.get(handle.__ray_call__.remote(lambda self: os.getpid()),
                           timeout=max(1.0, deadline - time.monotonic()))
        except ray.exceptions.ActorUnavailableError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


def kill_and_wait(handle, within_s=60):
    """``ray.kill(handle)``, returning once its process is gone: ``ray.kill`` returns while
    the actor can still take calls, so a call made right after it may be answered."""
    pid = pid_of(handle, within_s)
    ray.kill(handle)
    wait_gone([pid], within_s)


def wait_gone(pids, within_s=60.0):
    """Until none of ``pids`` is a live process (see :func:`process_alive`); an
    ``AssertionError`` if one still runs ``within_s`` later."""
    deadline = time.monotonic() + within_s
    for pid in pids:
        while process_alive(pid):
            if time.monotonic() > deadline:
                raise AssertionError(f"process {pid} still runs {within_s} s on")
            time.sleep(0.01)


# --- registries: a test's own, or one borrowed from its module ---------------------------

ONE_SCOPE_HOST = {"scope_hosting": "shared", "scope_hosts": 1}
"""``connect`` options for the registries of tests that are not about hosting: every agent's
scope on one host (a host per agent is a process, about a second of CPU, per test)."""

shares_one_host_registry = pytest.mark.shares_registry(**ONE_SCOPE_HOST)
"""The mark of a module whose tests borrow one registry with :data:`ONE_SCOPE_HOST`."""

_counter = iter(range(10**6))
T = 60


def fresh_registry(executors=1, **options):
    from dsh_actors.runtime import ToolRegistry

    return ToolRegistry.connect(f"test-{os.getpid()}-{next(_counter)}", executors=executors, **options)


class ModuleRegistries:
    """The registries a module's tests borrow, one per set of ``connect`` options."""

    def __init__(self):
        self._made = {}

    def lend(self, test, **options):
        """A client of the module's registry made with ``options``, for ``test`` alone: its
        global registrations are under an owner of its own."""
        from dsh_actors.runtime import ToolRegistry

        key = tuple(sorted(options.items()))
        if key not in self._made:
            self._made[key] = fresh_registry(**options)
        shared = self._made[key]
        client = ToolRegistry(shared.name, shared.namespace, shared._handle(), shared.mode)
        client._owner = f"test:{test}"
        return client

    def give_back(self, client):
        """Undo what a test left in a borrowed registry: its global registrations, every
        scope (a test's scopes are the only ones: the one before gave its own back), the
        approval queue; then check it is as it was lent (nothing visible, no scope). One
        that is not is ended (the next test gets a fresh one) and the test fails."""
        handle = client._handle()
        ray.get(handle.dispose_owner.remote(client._owner), timeout=T)
        for agent in ray.get(handle.scopes.remote(), timeout=T):
            client.scope(agent).close().result(T)
        client.unmount_approvals().result(T)
        left = [d.name for d in client.visible().result(T)], ray.get(handle.scopes.remote(), timeout=T)
        if left != ([], []):
            for key, shared in list(self._made.items()):
                if shared.name == client.name:
                    del self._made[key]
                    shared.shutdown()
            raise AssertionError(f"{left} outlived the test that borrowed its module's registry: "
                                 "dispose what it made, or mark it own_registry")

    def shutdown(self):
        for shared in self._made.values():
            shared.shutdown()


def registry_for(request, **options):
    """The registry of the test of ``request``, made with ``options``: borrowed from its
    module (and given back after) when the module is marked ``shares_registry`` and the
    test not ``own_registry``; else its own. The marker's keywords are ``connect`` options of
    the module's borrowed registries (a test's own registry has only ``options``). Use with
    ``yield from``."""
    shares = request.node.get_closest_marker("shares_registry")
    if shares and not request.node.get_closest_marker("own_registry"):
        lent = request.getfixturevalue("module_registries")
        client = lent.lend(request.node.nodeid, **{**shares.kwargs, **options})
        yield client
        lent.give_back(client)
        return
    reg = fresh_registry(**options)
    yield reg
    reg.shutdown()
