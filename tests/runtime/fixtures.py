"""Tools and policies shared by the runtime tests (pickled by value into workers)."""

import os

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
class Recorder:
    """Collects what observers and tool bodies report."""

    def __init__(self):
        self.items = []

    def add(self, item):
        self.items.append(item)

    def all(self):
        return list(self.items)


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
    registry.on("tools/result", lambda e, r: observed.add.remote(r["call_id"])).result(120)
    return started, observed


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
