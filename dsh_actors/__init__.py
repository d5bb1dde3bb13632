"""dsh-actors: the tool registry and execution pipeline of an LLM agent harness, on Ray.

The public surface. The pure semantics live in :mod:`dsh_actors.core` (no Ray); the
Ray runtime places them on actors and tasks.
"""

from .core.decisions import accept, allow, ask, block, deny, parse_post_decision, parse_pre_decision
from .core.define import define_tool, tool
from .core.errors import (
    CodeRunFailedError,
    DefinitionError,
    DuplicateToolError,
    HarnessError,
    MalformedDecisionError,
    MalformedResultError,
    OutputSchemaError,
    ReservedNameError,
    RestrictionError,
    ToolArgsError,
    ToolNotFoundError,
    ToolTimeoutError,
    UnreachableVariantError,
    error_info,
    error_message,
    error_result,
)
from .core.jsonvalue import (
    FrozenDict,
    FrozenList,
    FrozenValueError,
    NotLosslessJSONError,
    check_lossless,
    detach,
    is_lossless,
    snapshot,
    thaw,
)
from .core.output_schema import assert_supported_output_schema, validate_structured_value
from .core.pipeline import (
    ApprovalRequest,
    ApprovalSeam,
    ExecutionPlan,
    GuardError,
    InvalidExecutionInputError,
    Step,
    dispatch,
    execute,
    finalize,
    finish,
    prepare,
    run_chain,
)
from .core.presentation import PresentationError, validate_call_view, validate_result_view
from .core.registry import (
    AgentScopeView,
    Disposer,
    InMemoryRegistry,
    Plugin,
    RegistryState,
    ToolRestriction,
    snapshot_definition,
)
from .core.schema import SchemaProp, SchemaSpec, schema_spec_to_json_schema, validate_args
from .core.signal import AbortController, AbortError, AbortSignal, TimeoutReason, any_signal, deadline_signal
from .core.types import (
    ContentBlock,
    ExecutionToken,
    HookContext,
    ToolDefinition,
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolRunContext,
    ToolSchema,
    text_block,
)

__version__ = "0.1.0"

# The Ray layer is re-exported lazily: importing the pure API does not start Ray's import.
_RUNTIME = (
    "CONTINUE", "ActorListener", "AgentScope", "Continue", "ExecutionCancelledError",
    "ObjectLostError", "PlacementError", "PolicyUnavailableError", "RayRuntimeError",
    "RegistryUnavailableError", "Response", "ScopeUnavailableError", "ToolRegistry",
    "WorkerCrashedError", "actor_listener", "ensure_ray",
)


def __getattr__(name: str) -> object:
    if name in _RUNTIME:
        from . import runtime

        return getattr(runtime, name)
    raise AttributeError(f"module 'dsh_actors' has no attribute {name!r}")

__all__ = [
    "AbortController",
    "AbortError",
    "AbortSignal",
    "ActorListener",
    "AgentScope",
    "AgentScopeView",
    "ApprovalRequest",
    "ApprovalSeam",
    "CONTINUE",
    "CodeRunFailedError",
    "ContentBlock",
    "Continue",
    "DefinitionError",
    "Disposer",
    "DuplicateToolError",
    "ExecutionCancelledError",
    "ExecutionPlan",
    "ExecutionToken",
    "FrozenDict",
    "FrozenList",
    "FrozenValueError",
    "GuardError",
    "HarnessError",
    "HookContext",
    "InMemoryRegistry",
    "InvalidExecutionInputError",
    "MalformedDecisionError",
    "MalformedResultError",
    "NotLosslessJSONError",
    "ObjectLostError",
    "OutputSchemaError",
    "PlacementError",
    "Plugin",
    "PolicyUnavailableError",
    "PresentationError",
    "RayRuntimeError",
    "RegistryState",
    "RegistryUnavailableError",
    "ReservedNameError",
    "Response",
    "RestrictionError",
    "SchemaProp",
    "SchemaSpec",
    "ScopeUnavailableError",
    "Step",
    "TimeoutReason",
    "ToolArgsError",
    "ToolDefinition",
    "ToolExecution",
    "ToolExecutionInput",
    "ToolExecutionResult",
    "ToolNotFoundError",
    "ToolRegistry",
    "ToolRestriction",
    "ToolRunContext",
    "ToolSchema",
    "ToolTimeoutError",
    "UnreachableVariantError",
    "WorkerCrashedError",
    "accept",
    "actor_listener",
    "allow",
    "any_signal",
    "ask",
    "assert_supported_output_schema",
    "block",
    "check_lossless",
    "deadline_signal",
    "define_tool",
    "deny",
    "detach",
    "dispatch",
    "ensure_ray",
    "error_info",
    "error_message",
    "error_result",
    "execute",
    "finalize",
    "finish",
    "is_lossless",
    "parse_post_decision",
    "parse_pre_decision",
    "prepare",
    "run_chain",
    "schema_spec_to_json_schema",
    "snapshot",
    "snapshot_definition",
    "text_block",
    "thaw",
    "tool",
    "validate_args",
    "validate_call_view",
    "validate_result_view",
    "validate_structured_value",
]
