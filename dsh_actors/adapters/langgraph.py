"""An agent's dsh tools as LangChain tools for LangGraph (``pip install 'dsh-actors[langgraph]'``).

::

    from langgraph.prebuilt import ToolNode
    from dsh_actors.adapters.langgraph import dsh_tools

    tools = await dsh_tools(registry, "alice")      # BaseTool each: bind them, give them a ToolNode

Every call runs the registry's whole pipeline as ``alice``. A failed call becomes the
``ToolMessage`` LangChain shows a model for a failed tool (``status="error"``, its text); a
result's call id and ``meta`` are the message's ``artifact`` (``{"dsh": ...}``).
A call policy answers ``ask`` is put to the graph's human through LangGraph's ``interrupt``
(the graph needs a checkpointer): the interrupt's value is ``{"dsh_ask": {"tool", "args",
"call_id", "reason"}}``, and ``Command(resume=True)`` (or ``{"type": "approve"}``, as
LangChain's human-in-the-loop middleware answers) runs the call as the node runs again;
anything else rejects it. On Ray the call waits for that answer in this process, its ask in
the registry's approval queue (which the registry needs: ``registry.approvals()``);
``framework_asks=False`` leaves asks to that queue's answerers instead. The tools are the visible set when :func:`dsh_tools`
was awaited. Cancelling the graph's task aborts the call's signal. Prefer a ``ToolNode`` that
runs each call as its own task (``create_react_agent(..., version="v2")``): several asks in
one node are matched to their answers by their order.
"""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from langchain_core.tools import BaseTool, ToolException
from langgraph.types import interrupt
from pydantic import ConfigDict

from ..core.definitions import object_schema
from ..core.types import ToolDefinition
from ._calls import Asked, ToolCalls, kept

__all__ = ["DshTool", "dsh_tools"]


async def dsh_tools(target: Any, agent: str | None = None, *, log: Any = None,
                    framework_asks: bool = True) -> list[DshTool]:
    """``agent``'s visible tools in ``target`` (a registry or an agent's scope, in this
    process or on Ray) as LangChain tools; ``log``: its session log, holding every call's
    result."""
    calls = ToolCalls(target, agent, log=log, framework_asks=framework_asks)
    return [DshTool.of(calls, d) for d in await calls.definitions()]


def _approves(answer: Any) -> bool:
    return answer is True or (isinstance(answer, dict) and answer.get("type") in ("approve", "accept"))


class DshTool(BaseTool):
    """One dsh tool as LangChain runs a tool (asynchronously; ``invoke`` from a thread with
    no event loop runs it on one of its own)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)
    calls: ToolCalls
    handle_tool_error: bool = True
    response_format: Literal["content", "content_and_artifact"] = "content_and_artifact"

    @classmethod
    def of(cls, calls: ToolCalls, definition: ToolDefinition) -> DshTool:
        return cls(name=definition.name, description=definition.description, args_schema=object_schema(definition),
                   calls=calls)

    def _to_args_and_kwargs(self, tool_input: Any, tool_call_id: str | None) -> tuple[tuple[Any, ...], dict[str, Any]]:
        # The arguments as the model gave them (the pipeline validates them) and the call's id.
        return (), {"arguments": tool_input if isinstance(tool_input, dict) else {}, "call_id": tool_call_id}

    def _run(self, arguments: dict[str, Any], call_id: str | None) -> tuple[str, dict[str, Any]]:
        return asyncio.run(self._arun(arguments, call_id))

    async def _arun(self, arguments: dict[str, Any], call_id: str | None) -> tuple[str, dict[str, Any]]:
        outcome = await self.calls.call(self.name, arguments, call_id=call_id)
        if isinstance(outcome, Asked):
            answer = interrupt({"dsh_ask": {"tool": self.name, "args": arguments, "call_id": call_id,
                                            "reason": outcome.reason}})
            if not _approves(answer):
                await self.calls.reject(call_id or "")
                raise ToolException(f'Error: approval for tool "{self.name}" was rejected')
            outcome = await self.calls.call(self.name, arguments, call_id=call_id, approved=True)
            if isinstance(outcome, Asked):  # not reached: an approved call is allowed once
                raise ToolException(f'Error: approval for tool "{self.name}" was not given')
        if outcome.is_error:
            raise ToolException(outcome.text)
        return outcome.text, kept(outcome)
