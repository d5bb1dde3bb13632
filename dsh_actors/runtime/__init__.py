"""The Ray layer: registry actor, agent scope actors, executions as tasks, policy actors.

It places the pure semantics of :mod:`dsh_actors.core` onto actors and tasks and
translates Ray's failures into results with stable codes at one boundary.
"""

from .client import AgentScope, Plugin, ToolRegistry
from .disposer import Disposer
from .envhost import AgentEnvironments, agent_environment, end_environment, start_environment
from .errors import (
    ExecutionCancelledError,
    ObjectLostError,
    PlacementError,
    PolicyUnavailableError,
    RayRuntimeError,
    RegistryUnavailableError,
    ScopeUnavailableError,
    WorkerCrashedError,
)
from .limits import fleet_limit
from .local import ensure_ray
from .policy import CONTINUE, ActorListener, Continue, actor_listener
from .response import Response
from .step import agent_step

__all__ = [
    "CONTINUE",
    "ActorListener",
    "AgentEnvironments",
    "AgentScope",
    "Continue",
    "Disposer",
    "ExecutionCancelledError",
    "ObjectLostError",
    "PlacementError",
    "Plugin",
    "PolicyUnavailableError",
    "RayRuntimeError",
    "RegistryUnavailableError",
    "Response",
    "ScopeUnavailableError",
    "ToolRegistry",
    "WorkerCrashedError",
    "actor_listener",
    "agent_environment",
    "agent_step",
    "end_environment",
    "ensure_ray",
    "fleet_limit",
    "start_environment",
]
