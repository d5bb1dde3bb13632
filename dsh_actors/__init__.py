"""dsh-actors: the tool registry and execution pipeline of an LLM agent harness, on Ray.

What a user needs, in one namespace: defining tools, the decisions listeners return,
the registries (on Ray: :class:`ToolRegistry`; in one process: :class:`InMemoryRegistry`),
the values a call carries, the errors worth catching, and the specification's schema
helpers (:func:`validate_args`, :func:`schema_spec_to_json_schema`,
:func:`assert_supported_output_schema`, :func:`validate_structured_value`). Everything else stays
importable from its module (the pipeline's stages from :mod:`dsh_actors.core.pipeline`,
JSON rules from :mod:`dsh_actors.core.jsonvalue`, every error from
:mod:`dsh_actors.core.errors` and :mod:`dsh_actors.runtime.errors`).
"""

from .core.decisions import accept, allow, ask, block, deny
from .core.define import define_tool, tool
from .core.errors import (
    CodeRunFailedError,
    DefinitionError,
    DuplicateToolError,
    HarnessError,
    OutputSchemaError,
    ReservedNameError,
    RestrictionError,
    ToolArgsError,
    ToolNotFoundError,
    ToolTimeoutError,
    error_result,
)
from .core.output_schema import assert_supported_output_schema, validate_structured_value
from .core.progress import progress_to
from .core.schema import schema_spec_to_json_schema, validate_args
from .core.signal import AbortController, AbortError, AbortSignal
from .core.types import (
    ToolDefinition,
    ToolExecution,
    ToolExecutionInput,
    ToolExecutionResult,
    ToolRunContext,
    text_block,
)
from .inmemory import InMemoryRegistry

__version__ = "0.1.0"

# The Ray layer is re-exported lazily: importing the pure API does not start Ray's import.
_RUNTIME = (
    "CONTINUE", "AgentScope", "Disposer", "Plugin", "RegistryUnavailableError", "Response",
    "ScopeUnavailableError", "ToolRegistry", "actor_listener", "agent_step",
)
_LAZY = {"CodeRuntimeConfig": "dsh_actors.codemode.runtime", "SessionLog": "dsh_actors.runtime.session.client"}


def __getattr__(name: str) -> object:
    import importlib

    if name in _RUNTIME:
        return getattr(importlib.import_module("dsh_actors.runtime"), name)
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'dsh_actors' has no attribute {name!r}")


__all__ = [
    "AbortController",
    "AbortError",
    "AbortSignal",
    "AgentScope",
    "CONTINUE",
    "CodeRunFailedError",
    "CodeRuntimeConfig",
    "DefinitionError",
    "Disposer",
    "DuplicateToolError",
    "HarnessError",
    "InMemoryRegistry",
    "OutputSchemaError",
    "Plugin",
    "RegistryUnavailableError",
    "ReservedNameError",
    "Response",
    "RestrictionError",
    "ScopeUnavailableError",
    "SessionLog",
    "ToolArgsError",
    "ToolDefinition",
    "ToolExecution",
    "ToolExecutionInput",
    "ToolExecutionResult",
    "ToolNotFoundError",
    "ToolRegistry",
    "ToolRunContext",
    "ToolTimeoutError",
    "accept",
    "actor_listener",
    "agent_step",
    "allow",
    "ask",
    "assert_supported_output_schema",
    "block",
    "define_tool",
    "deny",
    "error_result",
    "progress_to",
    "schema_spec_to_json_schema",
    "text_block",
    "tool",
    "validate_args",
    "validate_structured_value",
]
