"""Stage 1 — create the execution: read the caller's input once, mint a token, freeze args.

Fields are read exactly once, in the order call_id, name, agent, parent, signal,
arguments. Arguments that are not lossless JSON (or whose reading raises) do not stop
creation: the execution gets ``arguments=None`` and the call goes straight to the final
stage with an error result — no policy, no dispatch, but observers still hear it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import HarnessError, error_result
from ..jsonvalue import NotLosslessJSONError, snapshot
from ..signal import AbortSignal
from ..types import ExecutionToken, ToolExecution

__all__ = ["InvalidExecutionInputError", "create_execution"]

_FIELDS = ("call_id", "name", "agent", "parent", "signal", "arguments")


class InvalidExecutionInputError(HarnessError):
    """The caller's call description was unusable (its arguments, or its identity fields)."""

    code = "INVALID_INPUT"


def _reader(source: Any) -> Any:
    if isinstance(source, Mapping):
        return lambda key: source[key] if key in source else None
    return lambda key: getattr(source, key, None)


def _problem(call_id: Any, name: Any, agent: Any, parent: Any, signal: Any) -> str | None:
    if not isinstance(call_id, str):
        return "call_id must be a str"
    if not isinstance(name, str):
        return "name must be a str"
    if agent is not None and not isinstance(agent, str):
        return "agent must be an agent id (str) or None"
    if parent is not None and not isinstance(parent, ExecutionToken):
        return "parent must be an ExecutionToken of an enclosing execution, or None"
    if signal is not None and not isinstance(signal, AbortSignal):
        return "signal must be an AbortSignal or None"
    return None


def create_execution(source: Any, token: ExecutionToken | None = None) -> tuple[ToolExecution, dict[str, Any] | None]:
    """Build the execution; the second item is a final error result when creation failed.

    ``token`` lets the runtime mint the identity before the call crosses a process (so it
    can finish a call whose worker died); callers never choose it.
    """
    read = _reader(source)
    values: dict[str, Any] = {}
    for key in _FIELDS:
        try:
            values[key] = read(key)
        except Exception as exc:  # a getter that raises: its error becomes the result
            values.setdefault("arguments", None)
            return _failed(values, token), error_result(exc)
    problem = _problem(values["call_id"], values["name"], values["agent"], values["parent"], values["signal"])
    if problem is not None:
        return _failed(values, token), error_result(
            InvalidExecutionInputError(f"invalid tool execution input: {problem}"))
    try:
        arguments = snapshot(values["arguments"], path="arguments")
    except NotLosslessJSONError:
        return _failed(values, token), error_result(
            InvalidExecutionInputError("tool execution arguments must be losslessly JSON-serializable")
        )
    return (
        ToolExecution(
            call_id=values["call_id"], name=values["name"], arguments=arguments,
            agent=values["agent"], parent=values["parent"], signal=values["signal"], token=token,
        ),
        None,
    )


def _failed(values: dict[str, Any], token: ExecutionToken | None) -> ToolExecution:
    """An execution for the error path: usable identity fields kept, arguments absent."""
    def kept(key: str, kind: type) -> Any:
        value = values.get(key)
        return value if isinstance(value, kind) else None

    return ToolExecution(
        call_id=kept("call_id", str) or "",
        name=kept("name", str) or "",
        arguments=None,
        agent=kept("agent", str),
        parent=kept("parent", ExecutionToken),
        signal=kept("signal", AbortSignal),
        token=token,
    )
