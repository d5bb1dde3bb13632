"""The model client: OpenAI-compatible Chat Completions with tool calls.

Built on the official ``openai`` package: it speaks the protocol every serving stack
users run exposes (vLLM, SGLang, llama.cpp, DeepSeek, OpenRouter), retries 429 and 5xx
answers with backoff (honouring ``Retry-After``), and times requests out — none of which
is worth writing again over a bare HTTP client. This module adds what a batch needs: a
concurrency limit shared by the job, token and time accounting per turn, and the
translation between the session log's messages and the protocol's.

Two choices keep the client's own CPU small, since a batch job runs hundreds of agent
loops in one process (measured: 2,000 requests at 200 at once against a local server,
CPU per request in the client): the package's aiohttp transport, and the request sent
through the client's documented ``post`` for requests it does not model — the body is
already plain JSON, and the typed ``create`` walks every message and tool schema again on
every request. Retries, timeouts, errors and the parsed ``ChatCompletion`` are the
package's either way. 6.1–6.8 ms per request with ``create`` on the default transport,
1.85 ms this way.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import pydantic

from ..core import telemetry
from ..core.errors import HarnessError

__all__ = ["ChatModel", "ModelConfig", "ModelError", "ModelTurn", "RawToolCall", "TurnTokens", "content_text", "to_chat_messages",
           "turn_tokens"]


class ModelError(HarnessError):
    """The model endpoint failed (after its retries) or answered something unusable.
    ``stop`` says which: ``model_error`` (HTTP errors, connection failures, timeouts) or
    ``malformed_reply`` (not a Chat Completions answer: HTML, truncated JSON, no choices)."""

    code = "MODEL_ERROR"

    def __init__(self, message: str, stop: str = "model_error") -> None:
        super().__init__(message)
        self.stop = stop

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.stop))


class ModelConfig(pydantic.BaseModel):
    """Where the model is and how to ask it. The key is read from the environment
    variable ``api_key_env`` (never from an episode file); a local server needs none."""

    model_config = pydantic.ConfigDict(extra="forbid", frozen=True)

    model: str
    base_url: str = "https://api.openai.com/v1"
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float | None = None
    seed: int | None = None
    max_retries: int = pydantic.Field(default=4, ge=0)
    timeout_s: float = pydantic.Field(default=120.0, gt=0)
    concurrency: int = pydantic.Field(default=64, ge=1)
    """Requests in flight at once across everything that shares this client (one job)."""
    breaker_threshold: int = pydantic.Field(default=5, ge=1)
    """Requests in a row that fail after their retries before the endpoint's breaker opens
    (every request then fails at once, ``model_error``, until a probe succeeds)."""
    breaker_pause_s: float = pydantic.Field(default=30.0, gt=0)
    """How long the breaker stays open before it lets one request through as a probe."""
    token_ids: bool = False
    """Ask for each turn's token ids and logprobs (vLLM's ``return_token_ids``, SGLang's
    ``return_token_ids`` / ``return_prompt_token_ids`` / ``return_meta_info``, and the
    standard ``logprobs``) and keep them exactly as sent: nothing is re-tokenized."""


@dataclass(frozen=True)
class RawToolCall:
    """A tool call as the model wrote it: ``arguments`` is the raw text it sent."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class TurnTokens:
    """A turn's tokens as the endpoint sent them; ``missing`` says why there are none."""

    prompt_ids: list[int] | None = None
    completion_ids: list[int] | None = None
    logprobs: list[float] | None = None
    missing: str | None = None

    def to_event(self) -> dict[str, Any]:
        """As the ``tokens`` field of the turn's ``assistant/message`` event."""
        if self.missing is not None:
            return {"missing": self.missing}
        return {"prompt_ids": self.prompt_ids, "completion_ids": self.completion_ids, "logprobs": self.logprobs}


def _int_list(value: Any) -> list[int] | None:
    if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return list(value)
    return None


def _meta_output(choice: Any) -> tuple[list[int] | None, list[float] | None]:
    """SGLang's ``meta_info.output_token_logprobs`` (``[logprob, id, text]`` per token)."""
    meta = getattr(choice, "meta_info", None)
    entries = meta.get("output_token_logprobs") if isinstance(meta, dict) else None
    if not isinstance(entries, list) or not entries or not all(
            isinstance(e, list) and len(e) >= 2 and isinstance(e[0], (int, float)) for e in entries):
        return None, None
    return _int_list([e[1] for e in entries]), [float(e[0]) for e in entries]


def turn_tokens(response: Any, choice: Any) -> TurnTokens:
    """The token ids and logprobs of one reply, where vLLM or SGLang put them: the prompt's
    ids as ``prompt_token_ids`` on the reply (vLLM) or the choice (SGLang), the
    completion's as the choice's ``token_ids``, the logprobs from the standard
    ``logprobs`` content — or, failing those, from SGLang's
    ``meta_info.output_token_logprobs``. Ids that are not all there come back as
    ``missing`` with the reason."""
    prompt = _int_list(getattr(response, "prompt_token_ids", None)) or _int_list(
        getattr(choice, "prompt_token_ids", None))
    completion = _int_list(getattr(choice, "token_ids", None))
    content = getattr(getattr(choice, "logprobs", None), "content", None) or []
    logprobs = [float(getattr(entry, "logprob", 0.0)) for entry in content] or None
    meta_ids, meta_logprobs = _meta_output(choice)
    if completion is None:
        completion = meta_ids
    if logprobs is None and meta_ids is not None and meta_ids == completion:
        logprobs = meta_logprobs
    if prompt is None or completion is None:
        absent = [name for name, value in (("prompt_token_ids", prompt), ("token_ids", completion)) if value is None]
        return TurnTokens(missing=f"the endpoint sent no {' or '.join(absent)} (it may not support "
                                  "return_token_ids); nothing was re-tokenized")
    if logprobs is not None and len(logprobs) != len(completion):
        logprobs = None  # not one per completion token: kept out rather than misaligned
    return TurnTokens(prompt, completion, logprobs)


@dataclass(frozen=True)
class ModelTurn:
    """One model answer: its text, its tool calls, what it cost."""

    content: str
    tool_calls: list[RawToolCall] = field(default_factory=list)
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    finish_reason: str | None = None
    """As the endpoint said: ``stop``, ``tool_calls``, ``length`` (cut off), ``content_filter``…"""
    tokens: TurnTokens | None = None
    """With ``token_ids`` asked for: the turn's ids and logprobs, or why there are none."""


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or its text blocks joined by lines."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, Mapping) and b.get("type") == "text")
    return ""


def to_chat_messages(system: str, messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The session log's model-facing history (``derive_messages``) as Chat Completions
    messages, after the system prompt."""
    chat: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for message in messages:
        role = message["role"]
        if role == "assistant":
            entry: dict[str, Any] = {"role": "assistant", "content": content_text(message.get("content")) or None}
            if message.get("tool_calls"):
                entry["tool_calls"] = [{
                    "id": call["call_id"], "type": "function",
                    "function": {"name": call["name"], "arguments": call["arguments"] if isinstance(
                        call["arguments"], str) else json.dumps(call["arguments"], ensure_ascii=False)},
                } for call in message["tool_calls"]]
            chat.append(entry)
        elif role == "tool":
            chat.append({"role": "tool", "tool_call_id": message["call_id"], "content": content_text(message["content"])})
        else:
            chat.append({"role": "user", "content": content_text(message.get("content"))})
    return chat


def to_chat_tools(schemas: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {"name": s["name"], "description": s["description"],
                                              "parameters": s["parameters"]}} for s in schemas]


class ChatModel:
    """A Chat Completions client for one model, shared by a job's episodes."""

    def __init__(self, config: ModelConfig) -> None:
        import openai  # imported here: only model-driven episodes need it

        from openai.types.chat import ChatCompletion

        self.config = config
        self._client = openai.AsyncOpenAI(
            base_url=config.base_url, api_key=os.environ.get(config.api_key_env) or "unused",
            max_retries=config.max_retries, timeout=config.timeout_s, http_client=openai.DefaultAioHttpClient())
        self._completion = ChatCompletion
        self._errors = (openai.APIError,)
        self._gate: asyncio.Semaphore | None = None
        from ..policies.breaker import Breaker

        self.breaker = Breaker(f"endpoint {config.base_url}", config.breaker_threshold, config.breaker_pause_s)

    async def complete(self, system: str, messages: Sequence[Mapping[str, Any]],
                       tools: Sequence[Mapping[str, Any]]) -> ModelTurn:
        """Ask the model for its next turn; :class:`ModelError` once its retries are spent.
        Each request is a ``chat {model}`` span and is counted (``dsh_model_*`` metrics)."""
        from ..runtime import metrics

        model = self.config.model
        started = time.perf_counter()
        if not self.breaker.admit():
            raise ModelError(f"the model endpoint {self.config.base_url} failed {self.breaker.failures} requests in a "
                             "row after their retries: its breaker is open, and requests fail at once until a probe "
                             f"after {self.config.breaker_pause_s:g} s succeeds")
        with telemetry.chat_span(model, self.config.base_url) as span:
            try:
                turn = await self._complete(system, messages, tools)
            except ModelError as exc:
                telemetry.record_chat(span, error=exc.stop)
                metrics.count("dsh_model_requests", model, exc.stop)
                self.breaker.failed() if exc.stop == "model_error" else self.breaker.succeeded()
                raise
            except asyncio.CancelledError:
                telemetry.record_chat(span, error="cancelled")
                metrics.count("dsh_model_requests", model, "cancelled")
                self.breaker.abandoned()
                raise
            self.breaker.succeeded()
            telemetry.record_chat(span, prompt_tokens=turn.prompt_tokens, completion_tokens=turn.completion_tokens,
                                  finish_reason=turn.finish_reason)
        metrics.count("dsh_model_requests", model, "ok")
        metrics.count("dsh_model_tokens", model, "prompt", value=turn.prompt_tokens)
        metrics.count("dsh_model_tokens", model, "completion", value=turn.completion_tokens)
        metrics.observe("dsh_model_request_ms", (time.perf_counter() - started) * 1000, model)
        return turn

    async def _complete(self, system: str, messages: Sequence[Mapping[str, Any]],
                        tools: Sequence[Mapping[str, Any]]) -> ModelTurn:
        if self._gate is None:
            self._gate = asyncio.Semaphore(self.config.concurrency)
        body: dict[str, Any] = {"model": self.config.model, "messages": to_chat_messages(system, messages)}
        if self.config.temperature is not None:
            body["temperature"] = self.config.temperature
        if self.config.seed is not None:
            body["seed"] = self.config.seed
        if tools:
            body["tools"] = to_chat_tools(tools)
        if self.config.token_ids:  # vLLM reads the first two, SGLang all four; each ignores the rest
            body["logprobs"] = True
            body["return_token_ids"] = True
            body["return_prompt_token_ids"] = True
            body["return_meta_info"] = True
        async with self._gate:
            started = time.perf_counter()
            try:
                response = await self._client.post("/chat/completions", cast_to=self._completion, body=body)
            except self._errors as exc:
                raise ModelError(f"the model endpoint {self.config.base_url} failed: {exc}") from None
            except ValueError as exc:  # a body that is not JSON (truncated, or another format)
                raise ModelError(f"the model endpoint {self.config.base_url} sent a reply that is not valid JSON "
                                 f"({exc}); is the base URL a Chat Completions endpoint (…/v1)?",
                                 "malformed_reply") from None
            seconds = time.perf_counter() - started
        where = f"the model endpoint {self.config.base_url}"
        if not isinstance(response, self._completion):  # e.g. an HTML page served with status 200
            shown = str(response).strip().replace("\n", " ")
            raise ModelError(f"{where} answered with something that is not a Chat Completions reply "
                             f"({shown[:80]!r}{'…' if len(shown) > 80 else ''}); is the base URL right (…/v1)?",
                             "malformed_reply")
        if not response.choices or getattr(response.choices[0], "message", None) is None:
            raise ModelError(f"{where} answered with no choices (or a choice without a message)", "malformed_reply")
        message = response.choices[0].message
        calls = []
        for call in message.tool_calls or []:
            function = getattr(call, "function", None)  # custom (non-function) tool calls are not ours
            if function is not None:
                calls.append(RawToolCall(call.id, function.name, function.arguments or ""))
        usage = response.usage
        choice = response.choices[0]
        return ModelTurn(message.content or "", calls, getattr(usage, "prompt_tokens", 0) or 0,
                         getattr(usage, "completion_tokens", 0) or 0, seconds,
                         getattr(choice, "finish_reason", None),
                         turn_tokens(response, choice) if self.config.token_ids else None)

    async def close(self) -> None:
        await self._client.close()
