"""Adapters: an agent's dsh tools as another agent framework's own tools.

One module per framework, importable when that framework is installed (the extra of its
name): :mod:`.pydantic_ai` (``DshToolset``), :mod:`.openai_agents` (``dsh_tools``),
:mod:`.langgraph` (``dsh_tools``). Every call runs the registry's whole pipeline as the
agent; what they share is :mod:`._calls`.
"""

from ._calls import Asked, FrameworkApproval, ToolCalls, kept

__all__ = ["Asked", "FrameworkApproval", "ToolCalls", "kept"]
