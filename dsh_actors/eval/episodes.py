"""Episode files: one agent's scripted model turns per line (JSON Lines).

An episode::

    {"id": "fix-typo", "agent": "agent-1",              # agent defaults to the id
     "mode": "native",                                   # native | code | both
     "policies": ["deny-destructive", "timeout"],        # named policies to load
     "scope": {"restrict": {"deny": ["bash"]},           # restrictions of this agent
               "guards": [{"tools": ["write_file"], "reason": "read-only agent"}],
               "shadows": [{"name": "read_file", "result": "stubbed"}]},  # canned variants
     "turns": [
       {"user": "Fix the typo in notes.txt",
        "calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]},
       {"code": "print(await tools.read_file(path='notes.txt'))"}   # a run_code call
     ]}

A line with a ``task`` (a string or a list of user messages) instead of ``turns`` puts a
model in the loop: ``{"id": "q1", "task": "What is 6*7? Answer with the number.",
"model": {"name": "gpt-x"}, "scorer": {"kind": "exact", "expected": "42"},
"limits": {"max_turns": 8}}`` (see :mod:`dsh_actors.agent`).

Each line is validated on its own — its JSON, its shape, its id and agent (names, never
paths), its policy names — so a bad line (not UTF-8, nested too deeply, an integer too
long to read, an unknown policy) is reported up front as ``<file>:<line>: <what is
wrong>`` and the other episodes still run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pydantic

from .heap import collector_paused

__all__ = ["Episode", "EpisodeError", "load_episodes", "repeated"]


class _Model(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)


class Call(_Model):
    """One native tool call of a scripted turn."""

    name: str
    """The tool's name, as the agent sees it (a shadow's name included)."""
    arguments: dict[str, Any] = pydantic.Field(default_factory=dict)
    """The call's arguments (a JSON object), checked against the tool's schema when it runs."""
    call_id: str | None = None
    """The call's id in the log; default ``<episode>:<turn>:<index>``."""


class Turn(_Model):
    """One scripted model turn: native calls, or one ``run_code`` program (not both)."""

    user: str | None = None
    """A user message logged before the turn's calls."""
    calls: list[Call] = pydantic.Field(default_factory=list)
    """Native calls, run as one agent step (parallel where the tools allow)."""
    code: str | None = None
    """A Code Mode program, run as one ``run_code`` call (the episode's mode must allow it)."""

    @pydantic.model_validator(mode="after")
    def _one_kind(self) -> "Turn":
        if self.code is not None and self.calls:
            raise ValueError("a turn has either calls or code, not both")
        if self.code is None and not self.calls and self.user is None:
            raise ValueError("a turn needs calls, code or a user message")
        return self


class Guard(_Model):
    """A guard of this agent's scope: calls to ``tools`` are refused with ``reason``."""

    tools: list[str]
    """The tool names it refuses (known tools or the episode's shadows)."""
    reason: str
    """What the agent is told when a call is refused."""


class Shadow(_Model):
    """A per-agent variant of a tool: for this agent, ``name`` answers with ``result``
    (an error result when ``is_error``) instead of running."""

    name: str = pydantic.Field(min_length=1)
    """The tool it shadows for this agent (or a new tool only this agent has)."""
    result: str
    """The text every call answers with."""
    is_error: bool = False
    """Answer as a failed call (``TOOL_FAILED``) instead."""
    description: str | None = None
    """What the agent's prompt says of the tool; default ``<name> (canned for this agent)``."""


class Scope(_Model):
    """What is this agent's alone: which tools it sees, what it may not call, its canned tools."""

    restrict: dict[Literal["allow", "deny"], list[str]] | None = None
    """``allow`` keeps only the tools named, ``deny`` hides them (``tools.restrict()``)."""
    guards: list[Guard] = pydantic.Field(default_factory=list)
    """Refusals by tool name, checked before a call runs."""
    shadows: list[Shadow] = pydantic.Field(default_factory=list)
    """Per-agent variants of tools, answering with a canned result."""


_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"


class ModelChoice(_Model):
    """An episode's model settings; anything left out comes from the job (``--model``,
    ``--base-url``)."""

    name: str | None = None
    """The model's name; default the job's ``--model``."""
    base_url: str | None = None
    """The Chat Completions endpoint (``http://host:8000/v1``); default the job's ``--base-url``."""
    temperature: float | None = None
    """Sampling temperature sent with each request; default the endpoint's."""
    seed: int | None = None
    """Sampling seed sent with each request."""
    token_ids: bool | None = None
    """Keep each turn's token ids and logprobs (the endpoint must send them, as vLLM and
    SGLang do when asked); default: the job's ``--token-ids``."""


class Limits(_Model):
    """An episode's budgets: model turns, tokens, wall seconds."""

    max_turns: int = pydantic.Field(default=20, ge=1)
    """Model turns before the run stops (``max_turns``)."""
    max_tokens: int | None = pydantic.Field(default=None, ge=1)
    """Prompt plus completion tokens before the run stops (``max_tokens``)."""
    max_wall_s: float | None = pydantic.Field(default=None, gt=0)
    """Seconds before the run stops (``max_wall``), enforced while a reply is pending."""
    max_invalid_calls: int = pydantic.Field(default=8, ge=1)
    """Invalid calls in a row (unknown tools, bad arguments) before the run stops
    (``invalid_calls``: the model's failure)."""
    tool_timeout_s: float | None = pydantic.Field(default=None, gt=0)
    """Each tool call's deadline in this episode (a tool's own ``timeout_ms`` wins);
    default: the job's ``--tool-timeout``."""


class EnvironmentChoice(_Model):
    """The episode's environment: what its tools' commands may reach and use (every bound
    is over the episode's whole life; past one, the command stopped answers its code)."""

    egress: Literal["none", "loopback"] | list[str] = "none"
    """``none`` (no network), ``loopback`` (its own loopback alone), or the ``host:port``
    destinations it may reach (enforced by the kernel, not by a pattern)."""
    memory_mb: int = pydantic.Field(default=2048, ge=16)
    """Memory its processes may hold at once (``ENV_MEMORY`` past it)."""
    processes: int = pydantic.Field(default=256, ge=4)
    """Processes and threads at once (``ENV_PROCESSES``)."""
    cpu_s: float = pydantic.Field(default=3600.0, gt=0)
    """CPU seconds of its processes, all together (``ENV_CPU``)."""
    disk_mb: int = pydantic.Field(default=2048, ge=1)
    """Bytes written into its workspace (``ENV_DISK``)."""

    def spec(self, workspace: str, hidden: tuple[str, ...]) -> Any:
        from ..envs import EnvSpec

        egress = self.egress if isinstance(self.egress, str) else tuple(self.egress)
        return EnvSpec(workspace=workspace, egress=egress, memory_mb=self.memory_mb, processes=self.processes,
                       cpu_s=self.cpu_s, disk_mb=self.disk_mb, hidden=hidden)


class Episode(_Model):
    """One line of an episode file: one agent, its scope and policies, and either scripted
    turns or a task for a model."""

    id: str = pydantic.Field(pattern=_NAME)
    """A name (letters, digits, ``.``, ``_``, ``-``), never a path: it names the episode's files."""
    agent: str | None = pydantic.Field(default=None, pattern=_NAME)
    """The agent's id (a name like ``id``); default the episode's id. Unique in a job."""
    mode: Literal["native", "code", "both"] = "native"
    """Which tools the agent sees: native ones, only ``run_code`` (Code Mode), or both."""
    policies: list[str] = pydantic.Field(default_factory=list)
    """Named policies loaded for this agent, in order (see Policies)."""
    scope: Scope = pydantic.Field(default_factory=Scope)  # a factory: a default instance is deep-copied per line
    """The agent's restrictions, guards and shadows."""
    turns: list[Turn] = pydantic.Field(default_factory=list)
    """Scripted turns; or, with a model in the loop, ``task`` (and ``model``, ``scorer``)."""
    task: str | list[str] | None = None
    """The user's message(s) to a model in the loop (instead of ``turns``)."""
    system: str | None = None
    """The task section of the system prompt; default the job's (a short agent brief)."""
    model: ModelChoice | None = None
    """This episode's model settings (with ``task`` only)."""
    scorer: dict[str, Any] | None = None
    """How the final answer is judged (with ``task`` only; see Scorers)."""
    limits: Limits = pydantic.Field(default_factory=Limits)
    """The run's budgets and its tool calls' deadline."""
    environment: EnvironmentChoice = pydantic.Field(default_factory=EnvironmentChoice)
    """Its environment's egress and bounds (the job's ``--environments native``)."""
    repeat: int | None = pydantic.Field(default=None, ge=1, le=1000)
    """How many times to run it (default: the job's ``--repeat``, else once); each run is an
    episode of its own, ``<id>.r<k>`` as agent ``<agent>.r<k>``, and the summary gives pass@k
    and pass^k of the task."""

    @property
    def changes_scope(self) -> bool:
        """Whether the agent's scope gets anything of its own (restrictions, guards,
        shadows, policies): then it lives on a scope host."""
        scope = self.scope
        return bool(self.policies or scope.restrict is not None or scope.guards or scope.shadows)

    @pydantic.model_validator(mode="after")
    def _scripted_or_model(self) -> "Episode":
        if bool(self.turns) == (self.task is not None):
            raise ValueError("an episode has either scripted turns or a task for a model, one of the two")
        if self.task is None and (self.model is not None or self.scorer is not None):
            raise ValueError("model and scorer belong to an episode with a task")
        return self

    @pydantic.field_validator("scorer")
    @classmethod
    def _usable_scorer(cls, spec: dict[str, Any] | None) -> dict[str, Any] | None:
        if spec is not None:
            from ..agent.scoring import ScorerError, check_scorer

            try:
                check_scorer(spec)
            except ScorerError as exc:
                raise ValueError(str(exc)) from None
        return spec

    @pydantic.field_validator("policies")
    @classmethod
    def _known_policies(cls, names: list[str]) -> list[str]:
        from .policies import check_policy_names

        check_policy_names(names)
        return names

    _source: tuple[str, int] | None = pydantic.PrivateAttr(default=None)
    _line: bytes | None = pydantic.PrivateAttr(default=None)  # the JSON text it was read from
    _run: int | None = pydantic.PrivateAttr(default=None)  # which run of its task, when repeated

    @property
    def task_id(self) -> str | None:
        """The id of the episode this is a run of (``None`` when it is not repeated)."""
        return self.id.rsplit(".r", 1)[0] if self._run is not None else None

    def run(self, k: int) -> "Episode":
        """Its ``k``-th run, as an episode of its own (``<id>.r<k>``, agent ``<agent>.r<k>``)."""
        copy = self.model_copy(update={"id": f"{self.id}.r{k}", "agent": f"{self.agent_id}.r{k}"})
        copy._source, copy._line, copy._run = self._source, self._line, k
        return copy

    @property
    def source(self) -> tuple[str, int]:
        """Where the episode was read: (file, line)."""
        return self._source or ("", 0)

    def __reduce_ex__(self, protocol: Any) -> Any:
        # Read from a file, an episode travels (to its runner) as the line it was read from,
        # validated again where it lands: a fifth of the CPU of pickling the model, paid by
        # the one driver that feeds every runner.
        if self._line is None:
            return super().__reduce_ex__(protocol)
        return _episode_from_line, (self._line, self._source, self._run)

    @property
    def agent_id(self) -> str:
        return self.agent or self.id

    def unknown_tools(self, known: set[str]) -> list[str]:
        """The tool names its scope restricts or guards that ``known`` does not have
        (shadows may add new names)."""
        named = {n for names in (self.scope.restrict or {}).values() for n in names}
        named |= {n for guard in self.scope.guards for n in guard.tools}
        return sorted(named - known - {s.name for s in self.scope.shadows})


@dataclass(frozen=True)
class EpisodeError:
    """A line that is not a valid episode."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


def _describe(error: pydantic.ValidationError) -> str:
    parts = []
    for item in error.errors(include_url=False):
        where = ".".join(str(p) for p in item["loc"]) or "episode"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def _episode_from_line(line: bytes, source: tuple[str, int] | None, run: int | None = None) -> Episode:
    """An episode sent as the line it was read from (validated as :func:`load_episodes` did),
    or its ``run``-th run."""
    episode = Episode.model_validate(json.loads(line))
    episode._source, episode._line = source, line
    return episode.run(run) if run is not None else episode


def repeated(episodes: list[Episode], repeat: int = 1) -> list[Episode]:
    """``episodes`` with each one run as many times as it says (its ``repeat``, else
    ``repeat``): one run stays as it is, more become episodes of their own, in order."""
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"repeat is a whole number of runs, at least 1; got {repeat!r}")
    out: list[Episode] = []
    for episode in episodes:
        times = episode.repeat or repeat
        out += [episode] if times == 1 else [episode.run(k) for k in range(1, times + 1)]
    return out


def load_episodes(paths: list[str | Path]) -> tuple[list[Episode], list[EpisodeError]]:
    """Every valid episode in ``paths`` (JSON Lines; blank lines and ``#`` lines skipped),
    and an error for each line that is not one. Ids must be unique across files."""
    episodes: list[Episode] = []
    errors: list[EpisodeError] = []
    ids: set[str] = set()
    agents: set[str] = set()
    with collector_paused():  # every episode is kept: a collection would only walk them
        for path in paths:
            path = Path(path)
            try:
                lines = path.read_bytes().split(b"\n")
            except OSError as exc:
                errors.append(EpisodeError(str(path), 0, f"cannot read the file: {exc.strerror or exc}"))
                continue
            for number, raw in enumerate(lines, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    errors.append(EpisodeError(str(path), number, f"not UTF-8 (byte {exc.start + 1} of the line)"))
                    continue
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                try:
                    data = json.loads(line)
                except json.JSONDecodeError as exc:
                    errors.append(EpisodeError(str(path), number, f"invalid JSON: {exc.msg} (column {exc.colno})"))
                    continue
                except RecursionError:
                    errors.append(EpisodeError(str(path), number, "invalid JSON: nested too deeply"))
                    continue
                except ValueError as exc:  # e.g. an integer longer than Python converts (4,300 digits)
                    errors.append(EpisodeError(str(path), number, f"invalid JSON: {exc}"))
                    continue
                try:
                    episode = Episode.model_validate(data)
                except pydantic.ValidationError as exc:
                    errors.append(EpisodeError(str(path), number, _describe(exc)))
                    continue
                except RecursionError:
                    errors.append(EpisodeError(str(path), number, "the episode is nested too deeply"))
                    continue
                episode._source, episode._line = (str(path), number), raw
                if episode.id in ids or episode.agent_id in agents:
                    errors.append(EpisodeError(str(path), number, f'episode id or agent "{episode.id}" is used twice'))
                    continue
                ids.add(episode.id)
                agents.add(episode.agent_id)
                episodes.append(episode)
    return episodes, errors
