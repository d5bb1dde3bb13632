"""Episode runners, the driver's side: the job's episodes run in runner actors on every node
(:mod:`.runner`), not in the driver. :class:`RunnerFleet` makes
runners on the alive nodes (a number per node from its CPUs), streams
episodes to them in chunks with a bounded number in flight per runner, and hands back each
report (and each live card) as it arrives. An episode is offered first to a runner on the
node that hosts its agent's scope; a runner with nothing of its own takes others' work.

Faults: a runner that dies (killed, or its node removed) costs no episode. What it had
not reported runs again, once, on another runner (the report says so in ``reran``); a
second death fails the episode with that reason. A dead runner is replaced: on its node
while that is alive, else on the alive node with the fewest runners. Nothing a runner does raises in the
driver: every episode ends in exactly one report.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import math
import random
import uuid
from typing import Any, AsyncGenerator, Iterable

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ..core.errors import error_message
from ..core.within import within
from ..runtime.client import ToolRegistry
from ..runtime.errors import ACTOR_GONE, RAY_ERROR
from ..runtime.traces import flush_actors
from ..runtime.wire import host_index
from .episode_run import JobFiles, conclude, started_report
from .reports import EpisodeReport
from .runner import RUNNER_OPTIONS, EpisodeRunner, Work, default_runners_per_node

__all__ = ["RUNNER_LOST", "RUNNER_PREFIX", "RunnerFleet", "retry_pause_s"]

log = logging.getLogger("dsh_actors.eval")


RUNNER_PREFIX = "dsh-runner:"
"""Runners are named ``dsh-runner:<job>:<id>`` (``ray list actors``, ``ray.util.list_named_actors``)."""

CHUNK = 64
"""Episodes sent to a runner in one streaming call, at most."""

RUNNER_LOST = "RUNNER_LOST"
"""What an episode failed by when no runner could finish it (termination ``runner_lost``)."""

RETRY_FIRST_S, RETRY_MAX_S = 1.0, 30.0
"""An episode the infrastructure ended runs again after a pause: ``RETRY_FIRST_S`` before
its second attempt, twice as long before each later one, at most ``RETRY_MAX_S``, each
jittered down by up to half (so a dependency down for a stretch gets time to come back,
and the episodes it failed together do not all come back at once)."""


def retry_pause_s(attempt: int) -> float:
    """How long the episode whose attempt ``attempt`` the infrastructure ended waits."""
    return min(RETRY_MAX_S, RETRY_FIRST_S * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)


def _unreported(runner: _Runner, batch: list[Work]) -> list[Work]:
    """The works of ``batch`` ``runner`` still holds (not a later attempt of one of them,
    handed to it since under the same id), taken from it."""
    return [runner.held.pop(w.episode.id) for w in batch if runner.held.get(w.episode.id) is w]


class _Runner:
    """The driver's view of one runner: its handle, node, and the episodes it holds."""

    def __init__(self, handle: Any, node: str, slots: int) -> None:
        self.handle = handle
        self.node = node
        self.slots = slots
        self.held: dict[str, Work] = {}
        self.alive = True


class RunnerFleet:
    """The runners of one job and the stream of its episodes through them.

    ``runners_per_node``: a number, or ``None`` for :func:`default_runners_per_node` of
    each node's CPUs. ``in_flight``: the episodes running at once over the whole fleet
    (shared evenly between runners). ``options``: Ray actor options for the runners (e.g.
    ``num_cpus``, ``runtime_env``). ``name``: the job's, in each runner's actor name.
    ``place_by_scope``: offer an episode first to a runner on the node hosting its agent's
    scope (the hosts are then made at the start; a job whose agents change nothing in their
    scopes needs no host, and none is made)."""

    def __init__(self, registries: dict[str, ToolRegistry], files: JobFiles, *, name: str = "job",
                 in_flight: int = 256, runners_per_node: int | None = None, live: bool = False, ship_logs: bool = True,
                 options: dict[str, Any] | None = None, place_by_scope: bool = True) -> None:
        if runners_per_node is not None and runners_per_node < 1:
            raise ValueError(f"runners_per_node must be at least 1; got {runners_per_node}")
        self._registries = registries
        self._files = files
        self._name = name
        self._in_flight = max(1, in_flight)
        self._per_node = runners_per_node
        self._live = live
        self._ship_logs = ship_logs
        self._place_by_scope = place_by_scope
        self._options = {**RUNNER_OPTIONS, **(options or {})}
        self._runners: list[_Runner] = []
        self._made: list[Any] = []  # every runner handle made (close() kills them all)
        self._replacing = 0  # replacements being made
        self._spares = 0
        self._home: dict[str, str] = {}  # agent -> the node that hosts its scope
        self._queues: dict[str | None, collections.deque[Work]] = collections.defaultdict(collections.deque)
        self._changed = asyncio.Condition()
        self._out: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._outstanding = 0
        self._drivers: set[asyncio.Task[None]] = set()

    @property
    def runners(self) -> list[tuple[Any, str]]:
        """The live runners and their nodes."""
        return [(r.handle, r.node) for r in self._runners if r.alive]

    async def start(self, episodes: int | None = None) -> None:
        """Make the runners over the alive nodes and learn where each agent's scope lives.
        A job of fewer ``episodes`` than the fleet has runners gets one runner per episode,
        spread over the nodes first (a runner is a process: about a second of CPU to start)."""
        nodes = [n for n in await asyncio.to_thread(ray.nodes) if n.get("Alive")]
        wanted = [(n["NodeID"], self._per_node or default_runners_per_node(n.get("Resources", {}).get("CPU", 0)))
                  for n in nodes]
        places = [node for rank in range(max((count for _, count in wanted), default=0))
                  for node, count in wanted if rank < count]  # round-robin over the nodes
        if episodes is not None:
            places = places[:max(1, episodes)]
        if not places:
            raise RuntimeError("no episode runner started: the cluster has no alive node")
        total = len(places)
        self._spares = total  # replacements allowed over the job (a runner killed again and again stops here)
        self._slots = max(1, math.ceil(self._in_flight / total))
        self._core_args = (self._registries, self._files, total, self._live, self._ship_logs, self._name)
        made = [self._make(node) for node in places]
        ready = await asyncio.gather(*(handle.ready.remote() for handle in made), return_exceptions=True)
        self._runners = [_Runner(h, n, self._slots) for h, n in zip(made, ready) if isinstance(n, str)]
        died = [(handle, node) for handle, node, answer in zip(made, places, ready) if isinstance(answer, ACTOR_GONE)]
        for handle, answer in zip(made, ready):
            if not isinstance(answer, str):
                ray.kill(handle, no_restart=True)  # never started: it must not start later, unfed
        if not self._runners and len(died) < len(made):  # one could not start at all: say why
            failure = next(a for a in ready if not isinstance(a, (str, *ACTOR_GONE)))
            raise RuntimeError(f"no episode runner started: {failure}")
        for handle, node in died:  # killed before it answered: replaced like one lost later
            if self._spares > 0:
                self._spares -= 1
                self._replacing += 1
                task = asyncio.ensure_future(self._replace(_Runner(handle, node, self._slots)))
                self._drivers.add(task)
                task.add_done_callback(self._drivers.discard)
        for registry in self._registries.values():
            hosts = await registry._link.call("scope_host_nodes", self._place_by_scope)
            if hosts:
                self._host_nodes = hosts
                break
        else:
            self._host_nodes = []

    def _make(self, node: str) -> Any:
        # Pinned: with soft affinity Ray may put a runner that reserves nothing on whichever
        # node it likes (seen: every runner on the head), and the episodes would follow it.
        strategy = NodeAffinitySchedulingStrategy(node, soft=False)
        name = f"{RUNNER_PREFIX}{self._name}:{uuid.uuid4().hex[:8]}"  # named: an operator can find (and kill) it
        handle = EpisodeRunner.options(scheduling_strategy=strategy, name=name, **self._options).remote(*self._core_args)
        self._made.append(handle)
        return handle

    def _home_of(self, agent: str) -> str | None:
        if not self._host_nodes:
            return None
        node = self._host_nodes[host_index(agent, len(self._host_nodes))]
        return node if any(r.alive and r.node == node for r in self._runners) else None

    async def stream(self, works: Iterable[Work]) -> AsyncGenerator[list[dict[str, Any]], None]:
        """Run ``works``; yield lists of ``{"card": …}`` and ``{"report": …, "log": …}`` as
        they come (what arrived together), exactly one report per work."""
        for work in works:
            self._queues[self._home_of(work.episode.agent_id)].append(work)
            self._outstanding += 1
        for runner in self._runners:
            self._drive(runner)
        self._if_none_left()  # every runner died before the first episode, and none is coming
        while self._outstanding or not self._out.empty():
            items = [await self._out.get()]
            while not self._out.empty():
                items.append(self._out.get_nowait())
            self._outstanding -= sum(1 for item in items if "report" in item)
            yield items

    def _drive(self, runner: _Runner) -> None:
        task = asyncio.ensure_future(self._feed(runner))
        self._drivers.add(task)
        task.add_done_callback(self._drivers.discard)

    def _queued(self) -> int:
        return sum(len(q) for q in self._queues.values())

    def _take(self, node: str, count: int) -> list[Work]:
        """Up to ``count`` works: the node's own first, then those with no home, then the
        longest other queue's (a runner with nothing of its own helps the others)."""
        taken: list[Work] = []
        for queue in sorted((q for key, q in self._queues.items() if q),
                            key=lambda q: (q is not self._queues.get(node), q is not self._queues.get(None), -len(q))):
            while queue and len(taken) < count:
                taken.append(queue.popleft())
            if len(taken) == count:
                break
        return taken

    def _fair_share(self, runner: _Runner) -> int:
        """How many more works ``runner`` may take now: its part of everything not yet
        reported, shared evenly over the alive runners — so a job smaller than the fleet's
        slots is spread over every runner, not taken whole by the first one to ask."""
        alive = [r for r in self._runners if r.alive]
        unreported = self._queued() + sum(len(r.held) for r in alive)
        return -(-unreported // max(1, len(alive))) - len(runner.held)

    async def _feed(self, runner: _Runner) -> None:
        """Keep ``runner`` busy: send it chunks while it has free slots, until the job ends."""
        while runner.alive and self._outstanding:
            free = runner.slots - len(runner.held)
            queued = self._queued()
            share = self._fair_share(runner)
            # Refill once a quarter of its slots is free (or what is left fits): one long
            # episode must not keep the rest of a chunk's slots idle.
            if queued and share > 0 and free >= min(CHUNK, queued, share, max(1, runner.slots // 4)):
                batch = self._take(runner.node, min(free, CHUNK, share))
                for work in batch:
                    runner.held[work.episode.id] = work
                task = asyncio.ensure_future(self._send(runner, batch))
                self._drivers.add(task)
                task.add_done_callback(self._drivers.discard)
                continue
            async with self._changed:
                await self._changed.wait()

    async def _send(self, runner: _Runner, batch: list[Work]) -> None:
        """One streaming call: each report as it comes; on the runner's death, what it held
        runs again elsewhere."""
        try:
            async for ref in runner.handle.run.options(num_returns="streaming").remote(batch):
                freed = False
                for item in await ref:
                    if "report" in item:
                        work = runner.held.pop(item["report"]["id"], None)
                        if work is None:
                            continue  # not ours any more (never happens: one report per work)
                        freed = True
                        item = self._retried(work, item)
                    self._out.put_nowait(item)
                if freed:  # its slots are free: the runner's feeder sends more
                    async with self._changed:
                        self._changed.notify_all()
        except ACTOR_GONE as exc:
            await self._lost(runner, exc)
        except RAY_ERROR as exc:
            if await self._answers(runner):  # the runner's own code failed the call: its episodes fail, coded
                self._fail(_unreported(runner, batch), f"its runner failed: {error_message(exc)}", code=None)
            else:  # e.g. a report lost with its node's object store: the runner went with it
                await self._lost(runner, exc)
        finally:
            if runner.alive and any(runner.held.get(w.episode.id) is w for w in batch):
                self._fail(_unreported(runner, batch), "its runner ended the call without reporting it", code=None)
            async with self._changed:
                self._changed.notify_all()

    @staticmethod
    async def _answers(runner: _Runner) -> bool:
        try:
            await within(asyncio.wrap_future(runner.handle.ready.remote().future()), 30)
            return True
        except (asyncio.TimeoutError, RAY_ERROR):
            return False

    async def _lost(self, runner: _Runner, exc: BaseException) -> None:
        if runner.alive:
            runner.alive = False
            # Fenced first: one only unreachable must not go on beside its episodes' reruns.
            ray.kill(runner.handle, no_restart=True)
            if self._spares > 0:
                self._spares -= 1
                self._replacing += 1
                task = asyncio.ensure_future(self._replace(runner))
                self._drivers.add(task)
                task.add_done_callback(self._drivers.discard)
        works, runner.held = list(runner.held.values()), {}
        why = f"its runner on node {runner.node[:12]} died ({error_message(exc).splitlines()[0][:200]})"
        # Its episodes' calls, runs and asks still going on the executors stop before any of
        # them runs again: a rerun never shares its workspace with its dead attempt's work.
        await self._abort([w.episode.agent_id for w in works], why)
        again = [w for w in works if not any(e.get("runner_lost") for e in w.earlier)]
        self._fail([w for w in works if w not in again], f"{why}, and had died once already")
        # At the front, in their order: what was started first runs first.
        for work in reversed(again):
            self._queues[self._home_of(work.episode.agent_id)].appendleft(dataclasses.replace(
                work, attempt=work.attempt + 1, reran=why,
                earlier=(*work.earlier, {"attempt": work.attempt, "runner_lost": True, "message": why})))
        self._if_none_left()

    async def _abort(self, agents: list[str], why: str) -> None:
        if not agents:
            return
        aborted = await asyncio.gather(*(registry.abort_agents(agents, why) for registry in self._registries.values()),
                                       return_exceptions=True)
        failed = [a for a in aborted if isinstance(a, BaseException)]
        if failed:  # the registry is gone: so are its executors, and the calls with them
            log.warning("could not abort the calls of %s: %s", agents, error_message(failed[0]))

    def _retried(self, work: Work, item: dict[str, Any]) -> dict[str, Any]:
        """``item`` as the job hears it: the report of an attempt the infrastructure ended,
        with retries left, is superseded (its log kept numbered) and the episode runs again
        from scratch — a fresh workspace and environment, the same id."""
        report = EpisodeReport.from_json(item["report"])
        if not work.retried_after(report):
            return item
        earlier = {"attempt": work.attempt, "termination": report.termination, "message": report.message,
                   **({"log": item["log_name"]} if "log_name" in item else {})}
        again = dataclasses.replace(work, attempt=work.attempt + 1, retries_left=work.retries_left - 1,
                                    reran=f"its attempt {work.attempt} ended on infrastructure "
                                          f"({report.termination['reason'] if report.termination else '?'})",
                                    earlier=(*work.earlier, earlier))
        task = asyncio.ensure_future(self._queue_later(again, retry_pause_s(work.attempt)))
        self._drivers.add(task)
        task.add_done_callback(self._drivers.discard)
        return {"superseded": item["report"], "log": item["log"], **({"log_name": item["log_name"]}
                                                                         if "log_name" in item else {})}

    async def _queue_later(self, work: Work, pause_s: float) -> None:
        await asyncio.sleep(pause_s)
        self._queues[self._home_of(work.episode.agent_id)].append(work)
        self._if_none_left()  # every runner died meanwhile: it fails, it does not wait for ever
        async with self._changed:
            self._changed.notify_all()

    def _if_none_left(self) -> None:
        """No runner alive and none coming: what is still queued can never run; fail it
        (the job must end, not wait for a runner that will not come)."""
        if self._replacing or any(r.alive for r in self._runners):
            return
        for queue in self._queues.values():
            self._fail(list(queue), "no episode runner is left to run it (every runner died and the job's "
                                    "replacements are used up)")
            queue.clear()

    async def _replace(self, dead: _Runner) -> None:
        try:
            alive = {n["NodeID"] for n in await asyncio.to_thread(ray.nodes) if n.get("Alive")}
            if not alive:
                return
            counts = collections.Counter(r.node for r in self._runners if r.alive and r.node in alive)
            # Its own node when that is still there; else the alive node with the fewest runners.
            node = dead.node if dead.node in alive else min(alive, key=lambda n: (counts[n], n))
            handle = self._make(node)
            try:
                node = await within(asyncio.wrap_future(handle.ready.remote().future()), 120)
            except (asyncio.TimeoutError, RAY_ERROR):
                ray.kill(handle, no_restart=True)
                return
            runner = _Runner(handle, node, self._slots)
            self._runners.append(runner)
            if self._outstanding:
                self._drive(runner)
        except Exception:  # noqa: BLE001 - a replacement that could not be made is one runner fewer
            pass
        finally:
            self._replacing -= 1
            self._if_none_left()
            async with self._changed:
                self._changed.notify_all()

    def _fail(self, works: list[Work], message: str, code: str | None = RUNNER_LOST) -> None:
        """Report ``works`` failed with ``message``: by default their runners are lost
        (infrastructure); ``code=None`` for a failure of the harness's own."""
        for work in works:
            report = started_report(work.episode, None, work.attempt, work.model.model if work.model else None)
            report.status, report.message, report.reran = "failed", message, work.reran
            conclude(report, code)
            self._out.put_nowait({"report": report.to_json(), "log": None})

    async def close(self) -> None:
        """End the runners: each closes its model clients (for up to 10 s) and flushes its
        spans (:func:`~dsh_actors.runtime.traces.flush_actors`), then every runner made is
        killed, whatever happens to this coroutine meanwhile."""
        for task in list(self._drivers):
            task.cancel()
        try:
            alive = [r.handle for r in self._runners if r.alive]
            try:
                await within(asyncio.gather(*(h.close.remote() for h in alive), return_exceptions=True), 10)
            except TimeoutError:
                pass
            await flush_actors(alive)  # a killed process's batch dies with it
        finally:  # (a cancel goes on up, once every runner is killed)
            for handle in self._made:
                ray.kill(handle, no_restart=True)
