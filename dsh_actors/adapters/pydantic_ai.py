"""An agent's dsh tools as a pydantic-ai toolset (``pip install 'dsh-actors[pydantic-ai]'``).

::

    from pydantic_ai import Agent
    from dsh_actors.adapters.pydantic_ai import DshToolset

    agent = Agent(model, toolsets=[DshToolset(registry, "alice")])

Every call runs the registry's whole pipeline as ``alice``. A failed call reaches the model
as pydantic-ai shows a failed tool (``ToolFailed``; arguments the tool refused as
``ModelRetry``, so the model corrects them). A call policy answers ``ask`` becomes one of
pydantic-ai's deferred tool calls (``ApprovalRequired``): the run ends with
``DeferredToolRequests``, and the run resumed with ``DeferredToolResults(approvals=...)`` runs
it (approved) or tells the model it was denied. On Ray the call waits for that answer in this
process, its ask in the registry's approval queue (which the registry needs:
``registry.approvals()``; a denied call's ask is cancelled after ``ask_ttl_s``);
``framework_asks=False`` leaves asks to that queue's answerers instead. Cancelling the
run (or a tool timeout of pydantic-ai's) aborts the call's signal. A result's ``meta`` and
call id are the ``ToolReturn``'s metadata (``{"dsh": ...}``), not shown to the model.
"""

from __future__ import annotations

from typing import Any

from pydantic_ai import ToolReturn
from pydantic_ai.exceptions import ApprovalRequired, ModelRetry, ToolFailed
from pydantic_ai.tools import ToolDefinition as FrameworkDefinition
from pydantic_ai.toolsets import AbstractToolset, ToolsetTool
from pydantic_core import SchemaValidator, core_schema

from ..core.definitions import hints_of, object_schema, strict_schema
from ._calls import Asked, ToolCalls, kept

__all__ = ["DshToolset"]

_ARGS = SchemaValidator(core_schema.any_schema())  # the pipeline validates the arguments itself


class DshToolset(AbstractToolset[Any]):
    """``agent``'s visible tools in ``target`` (a registry or an agent's scope, in this process
    or on Ray) as a pydantic-ai toolset, listed afresh at each run step."""

    def __init__(self, target: Any, agent: str | None = None, *, id: str | None = None, max_retries: int = 1,
                 log: Any = None, framework_asks: bool = True, ask_ttl_s: float = 600.0) -> None:
        self.calls = ToolCalls(target, agent, log=log, framework_asks=framework_asks, ask_ttl_s=ask_ttl_s)
        self._id, self.max_retries = id, max_retries

    @property
    def id(self) -> str | None:
        return self._id

    async def get_tools(self, ctx: Any) -> dict[str, ToolsetTool[Any]]:
        return {d.name: ToolsetTool(
            toolset=self, max_retries=self.max_retries, args_validator=_ARGS,
            tool_def=FrameworkDefinition(name=d.name, description=d.description, parameters_json_schema=object_schema(d),
                                         strict=True if strict_schema(d) is not None else None,
                                         metadata={"dsh": hints_of(d)} if hints_of(d) else None))
            for d in await self.calls.definitions()}

    async def call_tool(self, name: str, tool_args: dict[str, Any], ctx: Any, tool: ToolsetTool[Any]) -> Any:
        outcome = await self.calls.call(name, tool_args, call_id=ctx.tool_call_id, approved=ctx.tool_call_approved)
        if isinstance(outcome, Asked):
            raise ApprovalRequired(metadata={"dsh": {"reason": outcome.reason}})
        if outcome.is_error:
            code = (outcome.error or {}).get("code")
            if code == "INVALID_ARGS":
                raise ModelRetry(outcome.text)
            raise ToolFailed(outcome.text)
        return ToolReturn(return_value=outcome.text, metadata=kept(outcome))
