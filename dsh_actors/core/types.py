"""The value types of one tool call: definition, input, execution, run context, result.

* :class:`ToolDefinition` — a frozen snapshot: schema fields, callbacks captured once,
  policy metadata (``timeout_ms``) that never reaches the model.
* :class:`ToolExecutionInput` — what a caller supplies (``call_id``, ``name``,
  ``arguments``, ``agent``, ``parent``, ``signal``).
* :class:`ExecutionToken` — the opaque identity the pipeline mints for each call.
* :class:`ToolExecution` — the pipeline-owned call: identity read-only, only ``signal``
  replaceable (by ``tools/execute`` wrappers), and frozen before final observation.
* :class:`ToolRunContext` — what a tool body receives: the execution plus
  ``defer_context``.
* :class:`ToolExecutionResult` — the outcome: a read-only ``dict`` (so it is JSON and
  msgpack as it stands) with attribute access for its fields.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from collections.abc import Mapping
from typing import Any, Awaitable, Callable, NotRequired, TypedDict, Union

from . import jsonvalue
from .jsonvalue import FrozenDict, FrozenValueError
from .signal import AbortSignal

__all__ = [
    "ContentBlock",
    "ExecutionToken",
    "HookContext",
    "ToolDefinition",
    "ToolExecution",
    "ToolExecutionInput",
    "ToolExecutionResult",
    "ToolRunContext",
    "ToolSchema",
    "text_block",
]


class ContentBlock(TypedDict, total=False):
    """A model-facing content block; at least ``{"type": "text", "text": ...}``. Open set."""

    type: str
    text: str


class HookContext(TypedDict):
    """Context a listener or tool attaches for the model, appended after the step's results."""

    content: Any
    source: Mapping[str, Any]
    envelope: NotRequired[str]
    meta: NotRequired[Any]


class ToolSchema(TypedDict):
    """The only three fields of a tool that ever reach the model."""

    name: str
    description: str
    parameters: dict[str, Any]


def text_block(text: str) -> dict[str, str]:
    """``{"type": "text", "text": text}``."""
    return {"type": "text", "text": text}


ExecuteFn = Callable[[Any, "ToolRunContext"], Union[Awaitable[Any], Any]]
PresentCallFn = Callable[[Any], Any]
PresentResultFn = Callable[[Any, Mapping[str, Any]], Any]


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class ToolDefinition:
    """A registered tool: a frozen snapshot.

    Build one with :func:`dsh_actors.define_tool` (validated arguments) or directly
    for a raw JSON-Schema tool (an MCP server's), which validates its own input.
    """

    name: str
    """Wire name the model calls."""
    description: str
    """Model-facing description."""
    parameters: Mapping[str, Any]
    """JSON Schema of the arguments object (deep-frozen)."""
    execute: ExecuteFn
    """``execute(args, ctx)`` → content blocks, or ``{"content": [...], "meta": ...}``."""
    timeout_ms: float | None = None
    """Cooperative time budget, enforced by the timeout policy; never sent to the model."""
    present_call: PresentCallFn | None = None
    """Pure ``(args) -> call view | None`` for UIs."""
    present_result: PresentResultFn | None = None
    """Pure ``(args, {content, is_error, meta?}) -> result view | None`` for UIs."""
    is_concurrency_safe: Callable[[Any], Any] | None = None
    """Pure, synchronous ``(args) -> bool``: may this call run alongside others of its step?
    Read by :func:`~dsh_actors.core.registry.execution_mode`; never sent to the model."""
    extras: Mapping[str, Any] = field(default_factory=FrozenDict)
    """Runtime placement options (Ray resources and the like); never sent to the model."""

    def schema(self) -> ToolSchema:
        """The model-facing projection, with a fresh mutable copy of ``parameters``."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": jsonvalue.thaw(self.parameters),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolExecutionInput:
    """A caller's description of one call. ``arguments`` must be lossless JSON."""

    call_id: str
    name: str
    arguments: Any
    agent: str | None = None
    """The calling agent's id; scoped policies and views key on it."""
    parent: "ExecutionToken | None" = None
    """Token of an enclosing execution (Code Mode sub-calls)."""
    signal: AbortSignal | None = None


class ExecutionToken:
    """An opaque call identity: equality and hashing only; pickles with its identity."""

    __slots__ = ("__id",)
    __id: bytes

    def __init__(self) -> None:
        object.__setattr__(self, "_ExecutionToken__id", os.urandom(16))

    def __setattr__(self, name: str, value: Any) -> None:
        raise FrozenValueError("an ExecutionToken is immutable")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExecutionToken) and other.__id == self.__id

    def __hash__(self) -> int:
        return hash(self.__id)

    def __repr__(self) -> str:
        return "<ExecutionToken>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (token_from_bytes, (token_to_bytes(self),))


def token_to_bytes(token: ExecutionToken) -> bytes:
    """A token's wire form (what :func:`token_from_bytes` rebuilds it from)."""
    return token._ExecutionToken__id  # type: ignore[attr-defined,no-any-return]


def token_from_bytes(raw: bytes) -> ExecutionToken:
    """Rebuild a token from its wire form (the runtime ships tokens inside msgpack)."""
    token = ExecutionToken.__new__(ExecutionToken)
    object.__setattr__(token, "_ExecutionToken__id", raw)
    return token


class ToolExecution:
    """The pipeline-owned call.

    ``token``, ``call_id``, ``name``, ``arguments`` (deep-frozen; ``None`` only when
    the caller's arguments were not lossless JSON), ``agent`` and ``parent`` are
    read-only. ``signal`` is the one operational slot: a ``tools/execute`` wrapper may
    set, replace or delete it before ``await call_next()`` and restore it after. The
    pipeline freezes the execution before ``tools/result`` observers see it.
    """

    __slots__ = ("_token", "_call_id", "_name", "_arguments", "_agent", "_parent", "_signal", "_frozen",
                 "_definition")
    _token: ExecutionToken
    _call_id: str
    _name: str
    _arguments: Any
    _agent: str | None
    _parent: ExecutionToken | None
    _signal: AbortSignal | None
    _frozen: bool
    _definition: Any

    def __init__(
        self,
        *,
        call_id: str,
        name: str,
        arguments: Any,
        agent: str | None = None,
        parent: ExecutionToken | None = None,
        signal: AbortSignal | None = None,
        token: ExecutionToken | None = None,
    ) -> None:
        setter = object.__setattr__
        setter(self, "_token", token if token is not None else ExecutionToken())
        setter(self, "_call_id", call_id)
        setter(self, "_name", name)
        setter(self, "_arguments", arguments)
        setter(self, "_agent", agent)
        setter(self, "_parent", parent)
        setter(self, "_signal", signal)
        setter(self, "_frozen", False)
        setter(self, "_definition", None)

    token = property(lambda self: self._token, doc="The registry-minted identity of this call.")
    call_id = property(lambda self: self._call_id, doc="The caller's call id.")
    name = property(lambda self: self._name, doc="The tool name as called.")
    arguments = property(lambda self: self._arguments, doc="Deep-frozen arguments.")
    agent = property(lambda self: self._agent, doc="The calling agent's id, if any.")
    parent = property(lambda self: self._parent, doc="An enclosing execution's token, if any.")

    @property
    def signal(self) -> AbortSignal | None:
        """The abort signal the tool body sees (wrappers may replace it)."""
        return self._signal

    @signal.setter
    def signal(self, value: AbortSignal | None) -> None:
        if self._frozen:
            raise FrozenValueError("this execution is frozen; its signal can no longer change")
        object.__setattr__(self, "_signal", value)

    @signal.deleter
    def signal(self) -> None:
        self.signal = None

    @property
    def definition(self) -> "ToolDefinition | None":
        """The frozen definition this call resolves to in the caller's view (``None`` for
        an unknown tool) — what policies such as the timeout wrapper read. Process-local:
        it does not travel when the execution is pickled."""
        return self._definition

    def _resolve(self, definition: "ToolDefinition | None") -> None:
        object.__setattr__(self, "_definition", definition)

    @property
    def frozen(self) -> bool:
        """``True`` once the pipeline has frozen the execution (before observers run)."""
        return self._frozen

    def freeze(self) -> None:
        """Freeze the execution; the signal slot stops accepting changes."""
        object.__setattr__(self, "_frozen", True)

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "signal":
            ToolExecution.signal.__set__(self, value)  # type: ignore[attr-defined]
            return
        raise FrozenValueError(
            f"ToolExecution.{name} is read-only: call identity is protected; "
            "only `signal` may change (in a tools/execute wrapper)"
        )

    def __delattr__(self, name: str) -> None:
        if name == "signal":
            self.signal = None
            return
        raise FrozenValueError(f"ToolExecution.{name} cannot be deleted")

    def __reduce__(self) -> tuple[Any, ...]:
        # Signals are process-local; an execution crossing a process carries identity only.
        return (_rebuild_execution, (self._token, self._call_id, self._name, self._arguments,
                                     self._agent, self._parent, self._frozen))

    def __repr__(self) -> str:
        return f"<ToolExecution {self._name!r} call_id={self._call_id!r} agent={self._agent!r}>"


def _rebuild_execution(token: ExecutionToken, call_id: str, name: str, arguments: Any,
                       agent: str | None, parent: ExecutionToken | None, frozen: bool) -> ToolExecution:
    execution = ToolExecution(call_id=call_id, name=name, arguments=arguments, agent=agent,
                              parent=parent, token=token)
    if frozen:
        execution.freeze()
    return execution


class ToolRunContext:
    """What a tool body receives: the execution's fields plus :meth:`defer_context`."""

    __slots__ = ("execution", "_deferred", "visible")

    def __init__(self, execution: ToolExecution, deferred: list[Any],
                 visible: Mapping[str, "ToolDefinition"] | None = None) -> None:
        self.execution = execution
        self._deferred = deferred
        self.visible: Mapping[str, ToolDefinition] = visible if visible is not None else FrozenDict()
        """The tools the calling scope sees (Code Mode binds these)."""

    token = property(lambda self: self.execution.token)
    call_id = property(lambda self: self.execution.call_id)
    name = property(lambda self: self.execution.name)
    arguments = property(lambda self: self.execution.arguments)
    agent = property(lambda self: self.execution.agent)
    parent = property(lambda self: self.execution.parent)
    signal = property(lambda self: self.execution.signal, doc="The signal current at dispatch.")

    def defer_context(self, context: HookContext) -> None:
        """Attach context for the model; it leads the result's ``additional_context``.

        Raises ``MalformedDecisionError`` for a context without ``content`` and ``source``.
        """
        from .decisions import parse_hook_contexts

        parse_hook_contexts([context], "deferred context", f'tool "{self.execution.name}"')
        self._deferred.append(context)

    def report_progress(self, progress: float, total: float | None = None, message: str | None = None) -> bool:
        """Tell the caller how far this call is (``progress`` of ``total``, if known, and a
        ``message``): whoever sent the call with a progress sink set hears it (an MCP client
        that asked for progress, through the gateway), wherever the body runs — in the
        caller's process, an executor actor or a Ray task of its own (see :mod:`.progress`).
        Whether anyone listens; a body carries on the same either way."""
        from .progress import report_progress

        return report_progress(progress, total, message)


class ToolExecutionResult(FrozenDict):
    """The outcome of one call: a read-only ``dict`` with attribute access.

    Keys: ``call_id``, ``content`` (list of blocks), ``is_error`` and, when present,
    ``error`` (``{name, code}``), ``additional_context`` (list) and ``meta`` (JSON).
    Compare it with plain dicts, ``json.dumps`` it, pickle it.
    """

    __slots__ = ()

    call_id = property(lambda self: self.get("call_id"))
    content = property(lambda self: self["content"])
    is_error = property(lambda self: self["is_error"])
    error = property(lambda self: self.get("error"))
    additional_context = property(lambda self: self.get("additional_context"))
    meta = property(lambda self: self.get("meta"))

    @property
    def text(self) -> str:
        """The text blocks of ``content`` joined by newlines (non-text blocks skipped)."""
        return "\n".join(
            block["text"] for block in self["content"]
            if isinstance(block, Mapping) and block.get("type") == "text"
            and isinstance(block.get("text"), str)
        )

    def evolve(self, **changes: Any) -> "ToolExecutionResult":
        """A copy with ``changes`` applied; passing ``...`` as a value removes that key."""
        data = dict(self)
        for key, value in changes.items():
            if value is ...:
                data.pop(key, None)
            else:
                data[key] = value
        return ToolExecutionResult(data)

    def __reduce__(self) -> tuple[Any, ...]:
        return (ToolExecutionResult, (dict(self),))

    def __repr__(self) -> str:
        return f"ToolExecutionResult({dict.__repr__(self)})"


jsonvalue.register_frozen_mapping(ToolExecutionResult)
