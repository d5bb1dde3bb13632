"""The agent loop: ask the model, run the tool calls it returns, until it answers.

Each turn the model sees the system prompt and the history derived from the agent's
session log (so the log is the one record: ``show`` and ``replay`` work on it). Its
answer is logged as an ``assistant/message`` with its tool calls; the calls run as one
agent step (parallel where the tools allow; one ``tool/result`` per call in call order,
then the step's buffered context). A tool call whose arguments are not JSON still runs
through the pipeline, which answers ``INVALID_ARGS`` — the model sees the error, the loop
goes on; an unknown tool gets ``UNKNOWN_TOOL`` the same way. The loop stops on a final
answer (a turn without tool calls), a cut-off or withheld one, a budget (turns, tokens,
wall time — a pending reply is cancelled when the wall budget runs out), an abort, a model
endpoint that failed after its retries, or one that answered something unusable.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ..core import telemetry
from ..core.errors import ToolArgsError
from ..core.signal import AbortSignal
from ..core.within import within
from ..log import derive_messages
from .model import ChatModel, ModelError, to_chat_tools

__all__ = ["AgentOutcome", "Budgets", "INVALID_CALL_CODES", "run_agent"]

INVALID_CALL_CODES = frozenset({"UNKNOWN_TOOL", "INVALID_ARGS"})
"""A call's codes that say the model called what is not there, or wrongly."""


@dataclass(frozen=True)
class Budgets:
    """When to stop an agent that has not answered: model turns, tokens (prompt and
    completion together), wall seconds (``None``: no limit)."""

    max_turns: int = 20
    max_tokens: int | None = None
    max_wall_s: float | None = None
    max_invalid_calls: int | None = 8
    """Invalid calls in a row (an unknown tool, arguments that do not fit) before the run
    stops ``invalid_calls``: a model that keeps calling what is not there is not working
    the task, and spends the fleet's turns."""


@dataclass
class AgentOutcome:
    """How an agent's run ended and what it cost."""

    stop: str = "final"
    """``final``; ``length`` (the answer was cut off) or ``content_filter`` (withheld by the
    endpoint), neither of them scored as a success; ``max_turns``, ``max_tokens``,
    ``max_wall`` (enforced while a reply is pending: the request is cancelled); ``aborted``;
    ``model_error`` (the endpoint failed after its retries) or ``malformed_reply`` (it
    answered something that is not a Chat Completions reply); ``invalid_calls`` (too many
    invalid calls in a row)."""
    final: str | None = None
    message: str = ""
    turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    model_s: float = 0.0
    tool_s: float = 0.0
    model_turns_s: list[float] = field(default_factory=list)
    """Each model turn's time, as the client measured it."""
    tool_steps_s: list[float] = field(default_factory=list)
    """Each agent step's time (its tool calls, parallel where they may be)."""
    tool_calls: int = 0
    tool_errors: Counter[str] = field(default_factory=Counter)


def _arguments(raw: str) -> tuple[Any, ToolArgsError | None]:
    """The model's arguments parsed, or its raw text and why it is not JSON (the call is then
    answered ``INVALID_ARGS`` without running, and the model is told what to fix)."""
    try:
        return (json.loads(raw) if raw.strip() else {}), None
    except ValueError as exc:
        return raw, ToolArgsError([f"the arguments are not valid JSON ({exc}); send them as one JSON object"])
    except RecursionError:
        return raw, ToolArgsError(["the arguments are nested too deeply to parse; send a flatter JSON object"])


def _task_messages(task: str | Sequence[str | Mapping[str, Any]]) -> list[str]:
    if isinstance(task, str):
        return [task]
    return [m if isinstance(m, str) else str(m["content"]) for m in task]


async def run_agent(scope: Any, session: Any, model: ChatModel, *, system: str,
                    tools: Sequence[Mapping[str, Any]], task: str | Sequence[str | Mapping[str, Any]],
                    budgets: Budgets = Budgets(), signal: AbortSignal | None = None,
                    on_result: Callable[[Mapping[str, Any], Any, float], None] | None = None) -> AgentOutcome:
    """Run one agent until it answers or a budget ends it (see the module docs).

    ``system`` and ``tools`` are the assembled prompt (:class:`~dsh_actors.prompt.SystemPrompt`
    gives both, mode-aware); ``task`` is the user's message(s); ``on_result(call, result,
    seconds)`` hears each tool call's outcome.
    """
    from ..runtime.step import agent_step  # the Ray runtime's step; imported when a loop runs

    agent = str(getattr(scope, "agent_id", "agent"))
    with telemetry.agent_span(agent, getattr(getattr(model, "config", None), "model", None)):
        return await _run(agent_step, scope, session, model, system, tools, task, budgets, signal, on_result)


async def _run(agent_step: Any, scope: Any, session: Any, model: ChatModel, system: str,
               tools: Sequence[Mapping[str, Any]], task: str | Sequence[str | Mapping[str, Any]], budgets: Budgets,
               signal: AbortSignal | None,
               on_result: Callable[[Mapping[str, Any], Any, float], None] | None) -> AgentOutcome:
    outcome = AgentOutcome()
    invalid_in_a_row = 0
    started = time.monotonic()
    events: list[Any] = []  # the session log as read so far (only new events are fetched each turn)
    # What the model is given is logged once, before the task: trainers read the run from the log.
    await session.append_many([{"type": "system/prompt", "content": system, "tools": to_chat_tools(tools)},
                               *({"type": "user/message", "content": text} for text in _task_messages(task))])
    while True:
        if signal is not None and signal.aborted:
            outcome.stop, outcome.message = "aborted", str(signal.reason)
            return outcome
        if outcome.turns >= budgets.max_turns:
            outcome.stop = "max_turns"
            return outcome
        if budgets.max_tokens is not None and outcome.prompt_tokens + outcome.completion_tokens >= budgets.max_tokens:
            outcome.stop = "max_tokens"
            return outcome
        if budgets.max_wall_s is not None and time.monotonic() - started >= budgets.max_wall_s:
            outcome.stop = "max_wall"
            return outcome
        # What was logged since the last turn: this loop's own appends come from memory, the
        # writer is asked only for what other processes logged in between (asks, sub-calls).
        events += await session.known_events(len(events))
        history = derive_messages(events)
        left = None if budgets.max_wall_s is None else budgets.max_wall_s - (time.monotonic() - started)
        try:
            turn = await within(model.complete(system, history, tools), left)
        except ModelError as exc:
            outcome.stop, outcome.message = exc.stop, str(exc)
            return outcome
        except asyncio.TimeoutError:  # the wall budget ran out while the reply was pending
            outcome.stop = "max_wall"
            outcome.message = (f"no reply from the model within the episode's wall budget "
                               f"({budgets.max_wall_s:g} s); the request was cancelled")
            return outcome
        outcome.turns += 1
        outcome.prompt_tokens += turn.prompt_tokens
        outcome.completion_tokens += turn.completion_tokens
        outcome.model_s += turn.seconds
        outcome.model_turns_s.append(turn.seconds)
        calls, refused = [], {}
        for c in turn.tool_calls:
            arguments, refusal = _arguments(c.arguments)
            calls.append({"call_id": c.id, "name": c.name, "arguments": arguments})
            if refusal is not None:
                refused[c.id] = refusal
        await session.append({"type": "assistant/message", "content": turn.content,
                              **({"tool_calls": calls} if calls else {}),
                              **({"tokens": turn.tokens.to_event()} if turn.tokens is not None else {})})
        if turn.finish_reason in ("length", "content_filter"):
            outcome.stop, outcome.final = turn.finish_reason, turn.content  # kept, never scored as an answer
            outcome.message = ("the answer was cut off at the completion token limit" if turn.finish_reason == "length"
                               else "the endpoint withheld the answer (content filter)")
            return outcome
        if not calls:
            outcome.stop, outcome.final = "final", turn.content
            return outcome

        def seen(call: Mapping[str, Any], result: Any, seconds: float) -> None:
            nonlocal invalid_in_a_row
            outcome.tool_calls += 1
            code = result.error["code"] if result.is_error and result.error is not None else None
            if code is not None:
                outcome.tool_errors[code] += 1
            invalid_in_a_row = invalid_in_a_row + 1 if code in INVALID_CALL_CODES else 0
            if on_result is not None:
                on_result(call, result, seconds)

        step_started = time.perf_counter()
        await agent_step(scope, session, calls, on_result=seen, refused=refused)
        step_s = time.perf_counter() - step_started
        outcome.tool_s += step_s
        outcome.tool_steps_s.append(step_s)
        if budgets.max_invalid_calls is not None and invalid_in_a_row >= budgets.max_invalid_calls:
            outcome.stop = "invalid_calls"
            outcome.message = (f"{invalid_in_a_row} invalid calls in a row (unknown tools, arguments that do not "
                               "fit): the run was stopped")
            return outcome
