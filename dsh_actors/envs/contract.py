"""What an episode environment is, whatever walls back it.

An *environment* is one episode's isolated place on its node: its workspace (the only
writable place besides a private ``/tmp``), the host's system visible read-only minus every
way out, processes of its own that end with it, bounds on what it may use. The native
tools (``bash``, ``read_file``, ``write_file``, ``edit_file``) and plugin tools that ask for
it run *inside* it; the executor that runs the call only asks.

Three pieces, each small:

- :class:`EnvSpec`: what an environment is made with (its workspace, template, egress,
  bounds, more host paths to hide);
- :class:`Environment`: one started environment, as any process on its node may use it —
  run a command, read or write a file (paths inside its workspace), end it;
- :class:`EnvironmentBackend`: what starts them (the native walls of
  :mod:`dsh_actors.envs.native`; a container runtime could be another).

Every failure is a :class:`~dsh_actors.core.errors.HarnessError` with a stable code; those
marked ``infra`` say the model did nothing wrong (the environment could not start, or died).
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from ..core.errors import HarnessError

__all__ = ["BOUNDS", "CommandResult", "CpuBoundError", "DiskBoundError", "EGRESS", "EnvSpec", "Environment",
           "EnvironmentBackend", "EnvironmentGoneError", "EnvironmentLimitError", "EnvironmentStartError",
           "EnvironmentUnavailableError", "EnvPathError", "MemoryBoundError", "ProcessBoundError", "WallBoundError",
           "limit_error"]

EGRESS = ("none", "loopback")
"""Egress choices by name: ``none`` (no network at all), ``loopback`` (its own loopback
only). A tuple of ``"host:port"`` strings allows exactly those destinations."""

BOUNDS = ("memory", "processes", "cpu", "disk", "wall")
"""What can stop a command, each its own code (``ENV_MEMORY``…)."""


@dataclasses.dataclass(frozen=True)
class EnvSpec:
    """How one environment is made. Sizes are per environment, over its whole life."""

    workspace: str
    """The host path of the episode's workspace folder (it exists; what the tools see)."""
    egress: str | tuple[str, ...] = "none"
    """``none``, ``loopback``, or the ``host:port`` destinations it may reach."""
    memory_mb: int = 2048
    """Memory its processes may hold at once (files in its ``/tmp`` count)."""
    processes: int = 256
    """Processes (and threads) it may have at once."""
    cpu_s: float = 3600.0
    """CPU seconds its processes may use over its life."""
    disk_mb: int = 2048
    """Bytes its processes may write into its workspace, all files together."""
    tmp_mb: int = 512
    """The size of its private ``/tmp``."""
    hidden: tuple[str, ...] = ()
    """More host paths it must not see (the job's output folder, other workspaces' parent)."""
    env: tuple[tuple[str, str], ...] = ()
    """Environment variables its commands get (beside a minimal ``PATH``, ``HOME``, ``LANG``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.workspace, str) or not self.workspace.startswith("/"):
            raise ValueError(f"an environment's workspace is an absolute path; got {self.workspace!r}")
        if isinstance(self.egress, str):
            if self.egress not in EGRESS:
                raise ValueError(f"egress is one of {EGRESS} or a tuple of 'host:port'; got {self.egress!r}")
        elif not all(isinstance(d, str) and d.rpartition(":")[2].isdigit() and d.rpartition(":")[0]
                     for d in self.egress):
            raise ValueError(f"egress destinations are 'host:port' strings; got {self.egress!r}")
        for name in ("memory_mb", "processes", "disk_mb", "tmp_mb"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} is a whole number, at least 1; got {value!r}")
        if isinstance(self.cpu_s, bool) or not isinstance(self.cpu_s, (int, float)) or not self.cpu_s > 0:
            raise ValueError(f"cpu_s is a positive number of seconds; got {self.cpu_s!r}")


@dataclasses.dataclass(frozen=True)
class CommandResult:
    """How one command ended: its exit status (``None`` when a signal or a bound ended it),
    its output (stdout and stderr interleaved, cut to the asked size) and, when a bound
    stopped it, which (one of :data:`BOUNDS`)."""

    exit_code: int | None
    output: bytes
    truncated: bool = False
    signal: int | None = None
    bound: str | None = None


class Environment(Protocol):
    """One started environment, from any process on its node (see the module docs)."""

    id: str

    async def run(self, command: str, *, timeout_s: float, cwd: str | None = None,
                  max_output: int = 65536) -> CommandResult:
        """``bash -c command`` inside it, in ``cwd`` (a path inside the workspace; default
        its root). Past ``timeout_s`` every process the command started is killed and the
        result says ``bound="wall"``. Cancelling the awaiting task kills them too."""

    async def read_file(self, path: str, *, limit: int | None = None) -> bytes:
        """The bytes of ``path`` (relative to the workspace, or absolute inside it), read
        inside the environment (a link that leads out of it leads nowhere); at most
        ``limit`` bytes. :class:`EnvPathError` when it is not a readable file there."""

    async def write_file(self, path: str, data: bytes) -> None:
        """Write ``path`` inside the environment's workspace (its folders made); counts
        against ``disk_mb``. :class:`EnvPathError` when it cannot be written there."""

    async def end(self) -> None:
        """End it: every process inside killed (whatever it did to stay), its mounts and
        cgroups released. Ending twice is fine; later calls fail ``ENV_GONE``."""


class EnvironmentBackend(Protocol):
    """What starts environments on this node."""

    async def start(self, env_id: str, spec: EnvSpec) -> Environment:
        """A new environment ``env_id`` (unique on this node) made from ``spec``."""

    async def close(self) -> None:
        """End every environment it started, and itself."""


class EnvironmentUnavailableError(HarnessError):
    """This host cannot provide an environment's walls (the message says which is missing
    and how to opt out explicitly). Infrastructure: the model did nothing wrong."""

    code = "ENV_UNAVAILABLE"
    infra = True


class EnvironmentStartError(HarnessError):
    """An environment could not start (its node's parent died, a mount failed…).
    Infrastructure: the model did nothing wrong."""

    code = "ENV_START_FAILED"
    infra = True


class EnvironmentGoneError(HarnessError):
    """The environment ended (or died) before the request: infrastructure, unless the
    episode ended it itself. ``unsent``: the request certainly never reached it (no
    connection, no such environment there), so it may go to one that took its place; a
    request lost on its way or while it ran may have run, and is not sent again."""

    code = "ENV_GONE"
    infra = True

    def __init__(self, message: str, code: str | None = None, *, unsent: bool = False) -> None:
        super().__init__(message, code)
        self.unsent = unsent


class EnvironmentLimitError(HarnessError):
    """A command was stopped by one of its environment's bounds (the model's doing); each
    bound has its class and code (:func:`limit_error` picks it)."""

    code = "ENV_LIMIT"
    bound = ""


class MemoryBoundError(EnvironmentLimitError):
    code, bound = "ENV_MEMORY", "memory"


class ProcessBoundError(EnvironmentLimitError):
    code, bound = "ENV_PROCESSES", "processes"


class CpuBoundError(EnvironmentLimitError):
    code, bound = "ENV_CPU", "cpu"


class DiskBoundError(EnvironmentLimitError):
    code, bound = "ENV_DISK", "disk"


class WallBoundError(EnvironmentLimitError):
    code, bound = "ENV_WALL", "wall"


_BOUND_ERRORS = {cls.bound: cls for cls in (MemoryBoundError, ProcessBoundError, CpuBoundError, DiskBoundError,
                                           WallBoundError)}


def limit_error(bound: str, message: str) -> EnvironmentLimitError:
    """The error of a command stopped by ``bound`` (one of :data:`BOUNDS`)."""
    return _BOUND_ERRORS[bound](message)


class EnvPathError(HarnessError):
    """A path the file tools were given is not usable inside the environment (outside its
    workspace, missing, not a regular file, too large)."""

    code = "ENV_PATH"
