"""Episode environments: one isolated place per episode on its node (see :mod:`.contract`)."""

from .contract import (BOUNDS, EGRESS, CommandResult, CpuBoundError, DiskBoundError, EnvPathError, EnvSpec,
                       Environment, EnvironmentBackend, EnvironmentGoneError, EnvironmentLimitError,
                       EnvironmentStartError, EnvironmentUnavailableError, MemoryBoundError, ProcessBoundError,
                       WallBoundError, limit_error)

__all__ = ["BOUNDS", "CommandResult", "CpuBoundError", "DiskBoundError", "EGRESS", "EnvPathError", "EnvSpec",
           "Environment", "EnvironmentBackend", "EnvironmentGoneError", "EnvironmentLimitError",
           "EnvironmentStartError", "EnvironmentUnavailableError", "MemoryBoundError", "ProcessBoundError",
           "WallBoundError", "limit_error"]
