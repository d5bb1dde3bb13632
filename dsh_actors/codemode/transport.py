"""The reserved ``run_code`` transport and its dispatch bridge.

``run_code`` is built with ``define_tool`` (one required string parameter ``code``). Its
body runs the program in the code runtime with one binding per tool the calling scope
sees (never ``run_code`` itself) and bridges each binding call into the full pipeline:

1. a call after the run is over is refused (``… not dispatched``);
2. arguments arrive as the JSON text the program sent and are parsed when the call's turn
   comes, once to dispatch and again when the event is logged (rejections dispatch and log
   nothing);
3. calls queue in submission order and run one at a time, even under ``asyncio.gather``;
   a queued call whose turn comes after the run ended is abandoned;
4. each runs as ``<call_id>:code:<n>`` through the whole pipeline, as the calling
   agent, with the outer token as ``parent`` and the run's signal;
5. its additional context is deferred to the outer result; its text (non-text blocks
   as ``[<type> content]``) returns to the program, or raises there when it failed;
6. a ``tool/code-dispatch`` event is recorded (when the call has an agent) before the
   program sees the answer.

Settlement: whatever the program does, the run's signal aborts (``run_code settled``) —
an in-flight sub-call sees it — and the queue drains before ``run_code`` returns, so
every dispatch event lands inside the outer call.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Mapping

from ..core.define import define_tool
from ..core.errors import CodeRunFailedError, HarnessError
from ..core.signal import AbortController
from ..core.types import ToolDefinition, ToolExecutionResult, ToolRunContext, text_block
from .contract import CodeRuntime

__all__ = ["RUN_CODE", "CodeRuntimeMissingError", "build_run_code", "check_runtime", "flatten", "summary"]

RUN_CODE = "run_code"

DESCRIPTION = (
    "Execute a Python program against the available tools. Write the body of an async Python "
    "function: top-level `await` and `return` are allowed. Call tools as "
    "`await tools.name(arg=value)` (or `await tools[\"exotic-name\"]({...})`). Only what the program "
    "prints or returns comes back."
)

Dispatch = Callable[[dict[str, Any]], Awaitable[ToolExecutionResult]]
"""Runs one sub-call through the full pipeline; may carry ``close()`` for the run's end."""
RecordDispatch = Callable[[str, dict[str, Any]], Awaitable[None]]


class CodeRuntimeMissingError(HarnessError):
    """A Code Mode registry has no (Python) code runtime loaded."""

    code = "CODE_RUNTIME_MISSING"


def check_runtime(mode: str, runtime: CodeRuntime | None) -> CodeRuntime:
    """The runtime, or the actionable error every assembly and every run raises."""
    if runtime is None:
        raise CodeRuntimeMissingError(
            f'dsh-actors: mode "{mode}" requires a code runtime — pass code_runtime='
            f'make_runtime() (dsh_actors.codemode.runtime) or set tools mode to "native"'
        )
    language = getattr(runtime, "language", None)
    if language != "python":
        raise CodeRuntimeMissingError(
            f'dsh-actors: mode "{mode}" generates a Python SDK, but the loaded code runtime\'s language is "{language}"'
        )
    return runtime


def flatten(result: Mapping[str, Any]) -> str:
    """A sub-result as the program sees it: text blocks' text, others ``[<type> content]``."""
    parts = []
    for block in result.get("content", []):
        if isinstance(block, Mapping) and block.get("type") == "text":
            parts.append(str(block.get("text", "")))
        else:
            parts.append(f"[{block.get('type') if isinstance(block, Mapping) else 'unknown'} content]")
    return "\n".join(parts)


def summary(text: str, cwd: str | None = None) -> str:
    """The dispatch event's ``result_summary``: cwd made relative, cut to 200 characters."""
    if cwd and cwd != "/":
        text = text.replace(cwd, ".")
    return text if len(text) <= 200 else text[:200] + "…"


@dataclass(frozen=True, slots=True)
class _Run:
    """One run's shared state between the program's bindings."""

    controller: AbortController
    lock: asyncio.Lock
    counter: list[int]


NOT_JSON = "tool arguments must be JSON-serializable"
"""The start of every rejection of a binding call's arguments (reference notes §15.3); the
sandboxed backends raise the same texts inside the program."""


def _json_text(raw: Any) -> str:
    """A call's arguments as JSON text: the text the program sent (a sandboxed backend
    encodes them inside the program), or the value an in-process runtime passed, made JSON."""
    if isinstance(raw, str):
        return raw
    if callable(raw):
        raise TypeError(f"{NOT_JSON} (got a value JSON cannot represent)")
    try:
        return json.dumps(raw, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise TypeError(f"{NOT_JSON}: {exc}") from None


def _parsed(text: str) -> Any:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise TypeError(f"{NOT_JSON}: {exc}") from None
    if value is None:
        raise TypeError(f"{NOT_JSON} (call the tool with an arguments object, e.g. `{{}}`)")
    return value


def _present_call(args: Any) -> dict[str, Any]:
    return {"card": "generic", "title": args["code"], "kind": "execute", "raw_input": args["code"]}


def _present_result(args: Any, result: Mapping[str, Any]) -> dict[str, Any] | None:
    meta = result.get("meta")
    logs = meta.get("logs") if isinstance(meta, Mapping) else None
    if not isinstance(logs, list) or not all(isinstance(line, str) for line in logs):
        return None
    text = result["content"][0]["text"] if result.get("content") else ""
    return {"card": "generic", "content": [text_block(text)]} if text else {"card": "generic"}


def build_run_code(mode: str, runtime: Callable[[], Awaitable[CodeRuntime | None]], dispatch: Callable[[Any], Dispatch],
                   record: Callable[[], RecordDispatch | None] = lambda: None,
                   extras: Mapping[str, Any] | None = None) -> ToolDefinition:
    """The ``run_code`` definition for a registry in ``mode``.

    ``await runtime()`` gives the code runtime where the body runs (one being made for
    the first time may have to start processes: off the loop); ``dispatch(run_signal)``
    gives, per run, the function that runs one sub-call through the full pipeline (the
    Ray runtime routes it through a queue actor; the run's signal reaches it);
    ``record()`` gives the function that appends a ``tool/code-dispatch`` event for an
    agent (or ``None``). All are called in the process that runs the body.
    """

    async def execute(args: Any, ctx: ToolRunContext) -> Any:
        code_runtime = check_runtime(mode, await runtime())
        run = _Run(AbortController(), asyncio.Lock(), [0])
        outer = ctx.signal
        unfollow = outer.add_listener(run.controller.abort) if outer is not None else None
        names = sorted(n for n in ctx.visible if n != RUN_CODE)
        send, log = dispatch(run.controller.signal), record()
        bindings = {name: _binding(name, run, ctx, send, log) for name in names}
        try:
            # A runtime that raises (misuse, or a failure of its own) is not a program
            # outcome: the raised error is the call's, normalised by the pipeline as for
            # any body (reference notes §15.3: "Error: backend exploded", no error info; a
            # HarnessError keeps its own name and code).
            outcome = await code_runtime.run(args["code"], bindings, run.controller.signal)
        finally:
            run.controller.abort("run_code settled")
            if unfollow is not None:
                unfollow()
            async with run.lock:  # drain: every in-flight or queued sub-call has finished
                pass
            close = getattr(send, "close", None)
            if close is not None:
                await close()
        logs = list(outcome.logs)
        if outcome.error is not None:
            message = f"code run failed ({outcome.error.kind}): {outcome.error.message}"
            if logs:
                message += "\nCaptured output:\n" + "\n".join(logs)
            raise CodeRunFailedError(message)
        parts = ["\n".join(logs), outcome.value or ""]
        text = "\n".join(p for p in parts if p) or "(run_code completed with no output)"
        return {"content": [text_block(text)], "meta": {"logs": logs}}

    return define_tool(
        name=RUN_CODE,
        description=DESCRIPTION,
        parameters={"code": {"type": "string", "required": True,
                             "description": "The body of an async Python function."}},
        execute=execute,
        present_call=_present_call,
        present_result=_present_result,
        extras=extras,
    )


def _binding(name: str, run: _Run, ctx: ToolRunContext, send: Dispatch, log: RecordDispatch | None) -> Any:
    async def call(raw: Any) -> str:
        signal = run.controller.signal
        if signal.aborted:
            raise RuntimeError(f"run_code run is over ({signal.reason}); {name} not dispatched")
        async with run.lock:  # FIFO: one sub-call at a time, in submission order
            if signal.aborted:
                raise RuntimeError(f"run_code run is over ({signal.reason}); tool call abandoned")
            # Parsed only now: while a call waits its turn it holds the program's JSON text alone
            # (and the copy the log records is parsed again when it is written, not kept).
            text_of_args = _json_text(raw)
            dispatched = _parsed(text_of_args)
            run.counter[0] += 1
            sub_id = f"{ctx.call_id}:code:{run.counter[0]}"
            result = await send({"call_id": sub_id, "name": name, "arguments": dispatched, "agent": ctx.agent,
                                 "parent": ctx.token, "signal": signal})
            for context in result.get("additional_context") or []:
                ctx.defer_context(context)
            text = flatten(result)
            if ctx.agent is not None and log is not None:
                await log(ctx.agent, {
                    "type": "tool/code-dispatch", "parent_call_id": ctx.call_id, "sub_call_id": sub_id,
                    "name": name, "arguments": _parsed(text_of_args), "is_error": bool(result["is_error"]),
                    "result_summary": summary(text), **({"error": result["error"]} if result.get("error") else {}),
                })
        if signal.aborted:
            raise RuntimeError(f"run_code run is over ({signal.reason}); {name} result discarded")
        if result["is_error"]:
            raise RuntimeError(text)
        return text

    call.takes_json = True  # type: ignore[attr-defined]
    return call
