"""Episode environments: one isolated place per episode on its node.

:mod:`.contract` says what an environment is (whatever backs it); :mod:`.native` builds them
behind the kernel's own walls (:class:`NativeBackend`), and :func:`connect` uses one from
any process of its node by its address.
"""

from .contract import (BOUNDS, EGRESS, CommandResult, CpuBoundError, DiskBoundError, EnvPathError, EnvSpec,
                       Environment, EnvironmentBackend, EnvironmentGoneError, EnvironmentLimitError,
                       EnvironmentStartError, EnvironmentUnavailableError, MemoryBoundError, ProcessBoundError,
                       WallBoundError, limit_error)
from .native import NativeBackend, NativeEnvironment, connect, reap

__all__ = ["BOUNDS", "CommandResult", "CpuBoundError", "DiskBoundError", "EGRESS", "EnvPathError", "EnvSpec",
           "Environment", "EnvironmentBackend", "EnvironmentGoneError", "EnvironmentLimitError",
           "EnvironmentStartError", "EnvironmentUnavailableError", "MemoryBoundError", "NativeBackend",
           "NativeEnvironment", "ProcessBoundError", "WallBoundError", "connect", "limit_error", "reap"]
