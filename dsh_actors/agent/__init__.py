"""A model in the loop: an agent loop over OpenAI-compatible Chat Completions models.

:class:`~.model.ChatModel` talks to the model; :func:`~.loop.run_agent` runs one agent
(its scope, its session log) until a final answer, a budget, or an abort;
:mod:`~.scoring` judges the final answer.
"""

from .loop import AgentOutcome, Budgets, run_agent
from .model import ChatModel, ModelConfig, ModelTurn
from .scoring import ScorerError, score

__all__ = ["AgentOutcome", "Budgets", "ChatModel", "ModelConfig", "ModelTurn", "ScorerError", "run_agent", "score"]
