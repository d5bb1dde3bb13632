"""An agent's dsh tools as OpenAI Agents SDK function tools (``pip install 'dsh-actors[openai-agents]'``).

::

    from agents import Agent, Runner
    from dsh_actors.adapters.openai_agents import dsh_tools

    agent = Agent(name="alice", tools=await dsh_tools(registry, "alice"))

Every call runs the registry's whole pipeline as ``alice``. A failed call's text is what the
model sees (the SDK's form for a failed tool); ``is_error``, the error (its code) and
``meta``, where a result has them, are the tool output's custom data (``{"dsh": ...}``). A call policy answers ``ask`` goes through the SDK's
tool approvals: the run stops with the call in ``result.interruptions``;
``state = result.to_state(); state.approve(item)`` (or ``reject``) and ``Runner.run(agent,
state)`` runs it or tells the model it was rejected. On Ray the call waits for that answer in
this process, its ask in the registry's approval queue (which the registry needs:
``registry.approvals()``; a rejected call's ask is cancelled after ``ask_ttl_s``).

How an ask is found before the SDK runs a tool: the SDK decides whether a call needs approval
(``needs_approval``) before it invokes it, and only the pipeline knows whether its policies
ask. So the call runs through the pipeline when the SDK asks that question: if a policy
asks, nothing ran and the answer is "needs approval"; otherwise the answer is "no", and the
invocation that follows returns the result already made. The tools are the visible set when
:func:`dsh_tools` was awaited (make them again after the agent's scope changes). Cancelling
the run aborts the call's signal.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from agents import FunctionTool

from ..core.definitions import object_schema, strict_schema
from ..core.types import ToolDefinition, ToolExecutionResult
from ._calls import Asked, ToolCalls, kept

__all__ = ["dsh_tools"]

KEPT = 1024
"""How many made-ahead results wait for their invocation at most (a run abandoned between
the approval question and the invocation leaves one behind)."""


async def dsh_tools(target: Any, agent: str | None = None, *, log: Any = None, sdk_approvals: bool = True,
                    ask_ttl_s: float = 600.0) -> list[FunctionTool]:
    """``agent``'s visible tools in ``target`` (a registry or an agent's scope, in this
    process or on Ray) as the SDK's function tools; ``log``: its session log, holding every
    call's result. ``sdk_approvals=False``: asks go to the registry's own approval seam (on
    Ray its approval queue, answered from any process), and the SDK is not asked whether
    each call needs approval (that question costs about 40 µs a call: benchmarks). In this
    process the question is asked only when the agent's policies may ask (its plan has a
    ``tools/pre-execute`` listener) as the registry stands when the tools are made: make them again
    after adding one (a call it asks about meanwhile does not run: the model is told approval
    is required)."""
    calls = ToolCalls(target, agent, log=log, framework_asks=sdk_approvals, ask_ttl_s=ask_ttl_s)
    made = _Made()
    asks = sdk_approvals and calls.may_ask()
    return [_function_tool(calls, made, d, asks) for d in await calls.definitions()]


class _Made:
    """Calls run ahead (when the SDK asked whether they need approval), by call id, and what
    the SDK keeps of a failed result or one with ``meta`` (its custom data)."""

    def __init__(self) -> None:
        self.ahead: dict[str, asyncio.Future[ToolExecutionResult | Asked]] = {}
        self.kept: dict[str, dict[str, Any]] = {}

    async def run_ahead(self, calls: ToolCalls, name: str, params: dict[str, Any], call_id: str) -> bool:
        """Run the call now; whether it needs the SDK's approval (a policy asked)."""
        made = self.ahead.get(call_id)
        if made is None:  # asked twice about one call, it still runs once
            made = self.ahead[call_id] = asyncio.get_running_loop().create_future()
            try:
                made.set_result(await calls.call(name, params, call_id=call_id))
            except BaseException:
                del self.ahead[call_id]
                made.cancel()
                raise
            self._bound(self.ahead)
        if isinstance(await made, Asked):
            self.ahead.pop(call_id, None)
            return True
        return False

    def keep(self, result: ToolExecutionResult) -> None:
        if result.is_error or result.meta is not None:
            self.kept[result.call_id] = kept(result)
            self._bound(self.kept)

    @staticmethod
    def _bound(store: dict[str, Any]) -> None:
        while len(store) > KEPT:
            store.pop(next(iter(store)))


def _function_tool(calls: ToolCalls, made: _Made, definition: ToolDefinition, asks: bool) -> FunctionTool:
    name = definition.name

    async def needs_approval(ctx: Any, params: dict[str, Any], call_id: str) -> bool:
        return await made.run_ahead(calls, name, params, call_id)

    async def invoke(ctx: Any, arguments: str) -> str:
        call_id = ctx.tool_call_id
        ahead = made.ahead.pop(call_id, None)
        if ahead is not None:
            outcome = await ahead
        else:  # approved through the SDK (it does not ask again), or no framework asks here
            approved = calls.framework_asks and ctx.is_tool_approved(name, call_id) is True
            outcome = await calls.call(name, json.loads(arguments or "{}"), call_id=call_id, approved=approved)
        if isinstance(outcome, Asked):  # not approved by the SDK's flow: nothing ran
            return f"Error: approval for tool \"{name}\" is required ({outcome.reason or 'asked by policy'})"
        made.keep(outcome)
        return outcome.text

    strict = strict_schema(definition)  # strict where every argument is required (the SDK's default)
    return FunctionTool(name=name, description=definition.description,
                        params_json_schema=strict if strict is not None else object_schema(definition),
                        on_invoke_tool=invoke, strict_json_schema=strict is not None,
                        needs_approval=needs_approval if asks else False,
                        custom_data_extractor=lambda data: made.kept.pop(data.tool_context.tool_call_id, None))
