"""Everything one call needs, resolved up front: the plan the pipeline runs against.

A plan is a snapshot of what the calling scope sees when the call starts: its visible
tools, its listener chains (scope-filtered, in order), its guards (global, then the
agent's) and the approval seam. The pipeline reads nothing else, so a registry change
during the call can never mix two views inside it, and the same plan can be shipped to
another process and run there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Literal, Mapping, Protocol

from ..jsonvalue import FrozenDict
from ..signal import AbortSignal
from ..types import ToolDefinition

__all__ = ["ApprovalOutcome", "ApprovalRequest", "ApprovalSeam", "ExecutionPlan", "PlanResolver"]

ApprovalOutcome = Literal["allowed-once", "rejected", "cancelled", "unavailable"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ApprovalRequest:
    """What the approval seam is asked for an ``ask`` decision."""

    agent: str
    tool_name: str
    call_id: str
    reason: str | None = None
    signal: AbortSignal | None = None


class ApprovalSeam(Protocol):
    """Answers ``ask`` decisions: allowed-once, rejected, cancelled or unavailable."""

    def request(self, request: ApprovalRequest) -> Awaitable[str] | str: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionPlan:
    """One scope's resolved view, as the pipeline consumes it."""

    tools: Mapping[str, ToolDefinition] = field(default_factory=FrozenDict)
    """Visible tools by name (the scope's shadows applied, restrictions applied)."""
    pre_execute: tuple[Callable[..., Any], ...] = ()
    execute: tuple[Callable[..., Any], ...] = ()
    post_execute: tuple[Callable[..., Any], ...] = ()
    result: tuple[Callable[..., Any], ...] = ()
    """``tools/result`` observers: synchronous, failures contained and logged."""
    guards: tuple[Callable[..., Any], ...] = ()
    """Global guards in registration order, then the agent's."""
    approval: ApprovalSeam | None = None
    reserved: Mapping[str, ToolDefinition] = field(default_factory=FrozenDict)
    """Reserved transports (Code Mode's ``run_code``): also in ``tools``, always last, and
    never masked by a restriction."""
    known_names: tuple[str, ...] = ()
    """Every global name, then the scope's own names: restrictions not applied (what an
    unknown-tool hint may name), reserved transports not included."""


PlanResolver = Callable[[str | None], ExecutionPlan]
"""Gives the plan for a calling agent (``None``: a call with no agent)."""
