"""The error tree, and how any raised value becomes a model-facing error result.

Every error the package raises is a :class:`HarnessError` with a stable ``code``; this is
all of them (the core defines the first group; the others live where they are raised,
named by module; ``tests/core/test_errors.py`` checks that this tree lists every class
there is, with its code, and that each one pickles)::

    HarnessError                        HARNESS_ERROR
    ├── a call's outcome (an error result carries it):
    │   ├── ToolArgsError               INVALID_ARGS         (violations)
    │   ├── OutputSchemaError           UNSUPPORTED_SCHEMA   (violations)
    │   ├── ToolNotFoundError           UNKNOWN_TOOL         (tool_name)
    │   ├── CodeRunFailedError          CODE_RUN_FAILED
    │   ├── ToolTimeoutError            TOOL_TIMEOUT         (timeout_ms)
    │   ├── ExecutionCancelledError     CANCELLED            the call (or its body) was cancelled
    │   ├── ProcessControlError         PROCESS_CONTROL      tool or policy code raised KeyboardInterrupt,
    │   │                                                    SystemExit, GeneratorExit, … (contained)
    │   ├── MalformedDecisionError      MALFORMED_DECISION   (stage)
    │   ├── MalformedResultError        MALFORMED_RESULT
    │   ├── UnreachableVariantError     UNREACHABLE
    │   ├── InvalidExecutionInputError  INVALID_INPUT        core.pipeline.create
    │   ├── GuardError                  MALFORMED_GUARD      core.pipeline.guards
    │   ├── PresentationError           INVALID_VIEW         core.presentation
    │   └── McpError                    MCP_ERROR            runtime.mcp_adapter
    ├── the Ray runtime (runtime.errors):
    │   ├── WorkerCrashedError          WORKER_CRASHED       its executor or task died
    │   ├── AskLostError                ASK_LOST             a call asked of its caller's own flow
    │   │                                                    is no longer held (runtime.registry.asking)
    │   ├── ObjectLostError             OBJECT_LOST
    │   ├── PolicyUnavailableError      POLICY_UNAVAILABLE   a policy actor is gone
    │   ├── ScopeUnavailableError       SCOPE_UNAVAILABLE
    │   ├── RegistryUnavailableError    REGISTRY_UNAVAILABLE
    │   ├── ApprovalTimeoutError        APPROVAL_TIMEOUT     runtime.approval: nobody answered an ask in time
    │   ├── BreakerOpenError            BREAKER_OPEN         policies.breaker: its dependency keeps failing
    │   ├── FleetLimitConflictError     FLEET_LIMIT_CONFLICT runtime.limits: a group asked for with two caps
    │   ├── FleetLimitUnavailableError  FLEET_LIMIT_UNAVAILABLE runtime.limits: no limiter answers
    │   ├── PlacementError              PLACEMENT_FAILED     no node can run the body
    │   └── RayRuntimeError             RAY_ERROR            any other error from Ray
    ├── episode environments (envs.contract):
    │   ├── EnvironmentUnavailableError ENV_UNAVAILABLE      this host lacks a wall (infrastructure)
    │   ├── EnvironmentStartError       ENV_START_FAILED     (infrastructure)
    │   ├── EnvironmentGoneError        ENV_GONE             it ended or died (infrastructure)
    │   ├── EnvironmentLimitError       ENV_LIMIT            a bound stopped a command (envs.contract.limit_error):
    │   │   ├── MemoryBoundError        ENV_MEMORY
    │   │   ├── ProcessBoundError       ENV_PROCESSES
    │   │   ├── CpuBoundError           ENV_CPU
    │   │   ├── DiskBoundError          ENV_DISK
    │   │   └── WallBoundError          ENV_WALL
    │   └── EnvPathError                ENV_PATH             a path the file tools cannot use there
    ├── Code Mode:
    │   ├── CodeRuntimeMissingError     CODE_RUNTIME_MISSING codemode.transport
    │   └── SandboxUnavailableError     SANDBOX_UNAVAILABLE  codemode.isolation
    ├── session logs:
    │   ├── InvalidEventError           INVALID_EVENT        log.events (also a ValueError)
    │   ├── LogCorruptError             LOG_CORRUPT          log.frames
    │   ├── SessionLogWriteError        LOG_WRITE_FAILED     log.writer
    │   └── SessionHeldError            SESSION_HELD         log.writer (also a ValueError)
    ├── the agent and the batch job:
    │   ├── ModelError                  MODEL_ERROR          agent.model (stop)
    │   ├── ScorerError                 SCORER               agent.scoring
    │   ├── PromptAssemblyError         PROMPT_ASSEMBLY      prompt (also a ValueError)
    │   ├── WorkspaceError              WORKSPACE            tools.workspace
    │   ├── ToolFailedError             TOOL_FAILED          eval.episode_run
    │   ├── PluginError                 PLUGIN               eval.plugins
    │   ├── RunFolderError              RUN_FOLDER           eval.run_folder
    │   └── ExportError                 EXPORT               eval.export
    └── misuse, raised eagerly at registration/definition time (never during a call):
        ├── DefinitionError             INVALID_DEFINITION   (also a TypeError)
        ├── DuplicateToolError          DUPLICATE_TOOL       (also a ValueError)
        ├── ReservedNameError           RESERVED_NAME        (also a ValueError)
        └── RestrictionError            INVALID_RESTRICTION  (also a ValueError)

Outside the tree, as the specification has them: ``AbortError`` (core.signal, what an
aborted signal raises), ``FrozenValueError`` (a ``TypeError``: a frozen value was changed)
and ``NotLosslessJSONError`` (a ``ValueError``: not lossless JSON), both core.jsonvalue.
Private signals that never leave their module: ``Carried`` (core.boundary), ``ServerError``
(codemode.forkserver), ``ChannelError`` (codemode.channel), ``_Recorded`` (eval.replay).

Every class has a stable class-level ``code``; ``name`` is the concrete class name;
:meth:`HarnessError.info` is the ``{name, code}`` an error result carries. Every
error pickles with its fields, so it can cross a process boundary unchanged.

During a call nothing raises to the caller: :func:`error_result` turns any raised
value into ``{content: [{type: text, text: "Error: …"}], is_error: True, error?}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Sequence

from .jsonvalue import compact

__all__ = [
    "CodeRunFailedError",
    "DefinitionError",
    "DuplicateToolError",
    "ExecutionCancelledError",
    "HarnessError",
    "MalformedDecisionError",
    "MalformedResultError",
    "OutputSchemaError",
    "ProcessControlError",
    "ReservedNameError",
    "RestrictionError",
    "ToolArgsError",
    "ToolNotFoundError",
    "ToolTimeoutError",
    "UnreachableVariantError",
    "INFRA_CODES",
    "error_info",
    "error_message",
    "error_result",
    "outcome_of",
    "unreachable",
]

UNPRINTABLE = "<unprintable thrown value>"

INFRA_CODES = frozenset({
    "WORKER_CRASHED", "OBJECT_LOST", "SCOPE_UNAVAILABLE", "REGISTRY_UNAVAILABLE", "POLICY_UNAVAILABLE",
    "PLACEMENT_FAILED", "RAY_ERROR", "ENV_UNAVAILABLE", "ENV_START_FAILED", "ENV_GONE", "FLEET_LIMIT_UNAVAILABLE",
    "LOG_WRITE_FAILED", "APPROVAL_TIMEOUT", "TOOL_TIMEOUT", "MCP_ERROR", "BREAKER_OPEN",
})
"""A call's error codes that say its infrastructure failed, not the model (an executor,
scope, registry, environment, log or tool server lost; the job's deadline on a tool that
hung — a model's own slow command is ``ENV_WALL``; an ask nobody answered; a breaker open
on a failing dependency). A trainer masks an episode that met one; a breaker counts them."""


class HarnessError(Exception):
    """Base of every error the harness raises on purpose (and tools may raise).

    ``message`` is model-facing text; ``code`` is stable and machine-readable. Subclasses
    carry their class's code; ``HarnessError("disk full", "ENOSPC")`` carries its own.
    """

    code: str = "HARNESS_ERROR"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            if not isinstance(code, str) or not code:
                raise TypeError("a HarnessError code must be a non-empty str")
            self.code = code

    @property
    def name(self) -> str:
        """The concrete class name (``"HarnessError"`` for the base class)."""
        return type(self).__name__

    def info(self) -> dict[str, str]:
        """The structured ``{name, code}`` an error result carries."""
        return {"name": self.name, "code": self.code}

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuild from the fields, not from ``args``: subclasses take keyword fields.
        return (_rebuild, (type(self), self.__dict__.copy()))


def _rebuild(cls: type[HarnessError], state: dict[str, Any]) -> HarnessError:
    error = cls.__new__(cls)
    Exception.__init__(error, state.get("message", ""))
    error.__dict__.update(state)
    return error


class ToolArgsError(HarnessError):
    """Model-generated arguments do not match the tool's parameter schema."""

    code = "INVALID_ARGS"

    def __init__(self, violations: Sequence[str]) -> None:
        self.violations = list(violations)
        super().__init__("invalid arguments: " + "; ".join(self.violations))


class OutputSchemaError(HarnessError):
    """A structured-output schema uses something outside the supported subset."""

    code = "UNSUPPORTED_SCHEMA"

    def __init__(self, violations: Sequence[str]) -> None:
        self.violations = list(violations)
        super().__init__("unsupported output schema: " + "; ".join(self.violations))


class ToolNotFoundError(HarnessError):
    """No tool of that name is visible to the caller."""

    code = "UNKNOWN_TOOL"

    def __init__(self, tool_name: str) -> None:
        self.tool_name = tool_name
        super().__init__(f'unknown tool "{tool_name}"')


class ExecutionCancelledError(HarnessError):
    """The call was cancelled before it produced a result (its caller cancelled it, its
    task was cancelled, or its body raised ``CancelledError`` of its own)."""

    code = "CANCELLED"


class ProcessControlError(HarnessError):
    """Tool or policy code raised a ``BaseException`` that is not an ``Exception``
    (``KeyboardInterrupt``, ``SystemExit``, ``GeneratorExit``, …). In a process that runs
    every agent's calls such a value must never propagate: the call fails with this code
    and the process goes on serving."""

    code = "PROCESS_CONTROL"

    def __init__(self, origin: str, raised: str) -> None:
        self.origin = origin
        self.raised = raised
        super().__init__(f"{origin} raised {raised}, which a tool or policy must not raise; the call failed "
                         "(the process serving it goes on)")


class CodeRunFailedError(HarnessError):
    """A Code Mode program failed; the message carries its captured output."""

    code = "CODE_RUN_FAILED"


class ToolTimeoutError(HarnessError):
    """A tool call ran past its deadline."""

    code = "TOOL_TIMEOUT"

    def __init__(self, timeout_ms: float) -> None:
        self.timeout_ms = timeout_ms
        super().__init__(f"tool call timed out after {_ms(timeout_ms)}ms")


class MalformedDecisionError(HarnessError):
    """A listener returned something outside its decision union; the call fails closed."""

    code = "MALFORMED_DECISION"

    def __init__(self, stage: str, problem: str) -> None:
        self.stage = stage
        self.problem = problem
        super().__init__(f"{stage} listener returned a malformed decision: {problem}")


class MalformedResultError(HarnessError):
    """A tool or a tools/execute wrapper produced a result of the wrong shape."""

    code = "MALFORMED_RESULT"


class UnreachableVariantError(HarnessError):
    """A closed union met a value outside it (a non-conforming stand-in)."""

    code = "UNREACHABLE"


class DefinitionError(HarnessError, TypeError):
    """A tool definition is malformed (raised when defining or registering it)."""

    code = "INVALID_DEFINITION"


class DuplicateToolError(HarnessError, ValueError):
    """A tool of that name is already registered in the same layer."""

    code = "DUPLICATE_TOOL"


class ReservedNameError(HarnessError, ValueError):
    """A reserved name (such as ``run_code``) was registered, shadowed or filtered."""

    code = "RESERVED_NAME"


class RestrictionError(HarnessError, ValueError):
    """A restriction is empty, unscoped, or names tools the registry does not know."""

    code = "INVALID_RESTRICTION"


def _ms(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def unreachable(context: str, value: Any) -> UnreachableVariantError:
    """The error a closed union raises for a value outside it."""
    try:
        shown = compact(value)
    except Exception:
        shown = repr(value)
    return UnreachableVariantError(f"unreachable variant in {context}: {shown}")


def error_message(thrown: object) -> str:
    """The model-facing message of any raised value; never raises."""
    kind = type(thrown)  # never ``isinstance``: it reads ``__class__``, which may raise
    try:
        if issubclass(kind, HarnessError):
            return str(thrown.message)  # type: ignore[attr-defined]
        if issubclass(kind, BaseException):
            return str(thrown)
        message = getattr(thrown, "message", None)
        if isinstance(message, str):
            return message
        return str(thrown)
    except Exception:
        return UNPRINTABLE


def error_info(thrown: object) -> dict[str, str] | None:
    """``{name, code}`` for a :class:`HarnessError`, else ``None``; never raises."""
    try:
        if issubclass(type(thrown), HarnessError):
            info = thrown.info()  # type: ignore[attr-defined]
            if isinstance(info.get("name"), str) and isinstance(info.get("code"), str):
                return {"name": info["name"], "code": info["code"]}
    except Exception:
        pass
    return None


def outcome_of(result: Any) -> tuple[str, str]:
    """How a call ended, from its result (a mapping or a logged ``tool/result`` event):
    ``("ok", "")``, ``("error", code)`` for a failure with a harness code, or
    ``("denied", "")`` for a policy's denial or block (an error result with no code)."""
    if not result.get("is_error"):
        return "ok", ""
    error = result.get("error")
    code = error.get("code") if isinstance(error, Mapping) else None
    return ("error", str(code)) if code else ("denied", "")


def error_result(thrown: object) -> dict[str, Any]:
    """The normalised error result for any raised value (no ``call_id``; the pipeline adds it)."""
    result: dict[str, Any] = {
        "content": [{"type": "text", "text": "Error: " + error_message(thrown)}],
        "is_error": True,
    }
    info = error_info(thrown)
    if info is not None:
        result["error"] = info
    return result
