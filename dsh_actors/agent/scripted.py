"""A scripted Chat Completions server on loopback, for tests, benchmarks and offline runs.

It speaks enough of the protocol for :class:`~.model.ChatModel` (through the real
``openai`` client): ``POST /v1/chat/completions`` answers the next scripted reply — a
final answer, tool calls (their arguments sent as given, malformed ones included), or an
HTTP status such as 429 — and records each request. ``script`` is a list (replies in
order, shared by every conversation) or a function of the request's JSON;
:func:`by_task` makes one that gives each conversation its own replies, by its task. It
never contacts anything: it binds 127.0.0.1 only.

As a program, for offline runs of the agent loop::

    python -m dsh_actors.agent.scripted --script dsh_actors/examples/tasks-script.json --port 8011

serves a script file — a JSON object mapping each task (a conversation's first user
message) to its replies in turn order, each ``{"content", "tool_calls": [{"name",
"arguments"}], "finish_reason", "token_ids", "prompt_token_ids", "logprobs"}`` (all
optional) — until it is interrupted.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import threading
from typing import Any, Callable, Mapping, Sequence

from aiohttp import web

__all__ = ["ScriptedServer", "by_task", "load_script", "reply"]

Reply = Mapping[str, Any]


def reply(content: str = "", *tool_calls: tuple[str, Any], status: int = 200, delay_s: float = 0.0,
          finish_reason: str | None = None, raw: str | None = None,
          content_type: str = "application/json", token_ids: list[int] | None = None,
          prompt_token_ids: list[int] | None = None, logprobs: list[float] | None = None) -> dict[str, Any]:
    """A scripted reply: ``content``, tool calls as ``(name, arguments)`` (a mapping is
    sent as JSON, a string as it is), or an HTTP ``status`` other than 200.
    ``finish_reason`` overrides the usual one (``length``: a cut-off answer); ``raw`` is a
    body sent as it is with status 200 and ``content_type`` (an HTML page, truncated JSON).
    ``token_ids``, ``prompt_token_ids``, ``logprobs``: sent as vLLM sends them when the
    request asks ``return_token_ids`` (and ``logprobs``)."""
    return {"content": content, "status": status, "delay_s": delay_s, "finish_reason": finish_reason,
            "raw": raw, "content_type": content_type, "token_ids": token_ids,
            "prompt_token_ids": prompt_token_ids, "logprobs": logprobs,
            "tool_calls": [{"name": n, "arguments": a if isinstance(a, str) else json.dumps(a)} for n, a in tool_calls]}


def by_task(script: Mapping[str, Sequence[Reply]]) -> Callable[[dict[str, Any]], Reply]:
    """A script that answers each conversation by its task (its first user message): turn
    ``n`` gets ``script[task][n]`` (the last reply again past the end). A task with no
    replies is answered so: the reply names it."""
    def respond(request: dict[str, Any]) -> Reply:
        messages = request.get("messages") or []
        task = next((m.get("content") for m in messages if m.get("role") == "user"), None)
        replies = script.get(task) if isinstance(task, str) else None
        if not replies:
            return reply(f"(the script has no replies for the task {task!r})")
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        return replies[min(turn, len(replies) - 1)]
    return respond


_REPLY_KEYS = {"content", "tool_calls", "finish_reason", "token_ids", "prompt_token_ids", "logprobs", "delay_s"}


def load_script(path: str) -> dict[str, list[Reply]]:
    """A script file (see the module) as :func:`by_task` takes it; ``ValueError`` saying
    what is wrong and where."""
    with open(path, encoding="utf-8") as source:
        data = json.load(source)
    if not isinstance(data, dict) or not all(isinstance(v, list) and v for v in data.values()):
        raise ValueError(f"{path}: a script is a JSON object mapping each task to a non-empty list of replies")
    script: dict[str, list[Reply]] = {}
    for task, replies in data.items():
        script[task] = []
        for n, turn in enumerate(replies):
            extra = sorted(set(turn) - _REPLY_KEYS) if isinstance(turn, dict) else None
            if extra is None or extra:
                raise ValueError(f"{path}: task {task!r} reply {n}: a reply is an object with only "
                                 f"{', '.join(sorted(_REPLY_KEYS))}" + (f"; got {extra}" if extra else ""))
            calls = [(c["name"], c.get("arguments", {})) for c in turn.get("tool_calls", [])]
            script[task].append(reply(turn.get("content", ""), *calls, **{
                k: turn[k] for k in ("finish_reason", "token_ids", "prompt_token_ids", "logprobs", "delay_s")
                if k in turn}))
    return script


class ScriptedServer:
    """``with ScriptedServer(script) as server:`` — ``server.base_url`` is the endpoint.

    ``speaks`` is whose token-id fields it answers with: ``"vllm"`` (``return_token_ids``
    gives ``prompt_token_ids`` on the reply and ``token_ids`` on the choice) or
    ``"sglang"`` (``return_token_ids`` gives the choice's ``token_ids``,
    ``return_prompt_token_ids`` its ``prompt_token_ids``, and ``return_meta_info`` its
    ``meta_info.output_token_logprobs`` as ``[logprob, id, text]`` triples)."""

    def __init__(self, script: Sequence[Reply] | Callable[[dict[str, Any]], Reply], *,
                 speaks: str = "vllm", port: int = 0) -> None:
        if speaks not in ("vllm", "sglang"):
            raise ValueError(f"speaks must be 'vllm' or 'sglang', not {speaks!r}")
        self.speaks = speaks
        self._script = script if callable(script) else list(script)
        self.requests: list[dict[str, Any]] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._runner: web.AppRunner | None = None
        self._failed: OSError | None = None
        self.port = port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _next(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(request)
            if callable(self._script):
                return self._script(request)
            if not self._script:
                return reply("(the script is over)")
            return self._script.pop(0)

    async def _completions(self, http: web.Request) -> web.Response:
        body = await http.json()
        answer = self._next(body)
        if answer.get("delay_s"):
            await asyncio.sleep(answer["delay_s"])
        if answer.get("raw") is not None:
            return web.Response(text=answer["raw"], content_type=answer.get("content_type", "application/json"))
        if answer.get("status", 200) != 200:
            return web.json_response({"error": {"message": "scripted error", "type": "scripted"}},
                                     status=answer["status"], headers={"Retry-After": "0"})
        calls = [{"id": f"call_{next(self._ids)}", "type": "function",
                  "function": {"name": c["name"], "arguments": c["arguments"]}} for c in answer.get("tool_calls", [])]
        message: dict[str, Any] = {"role": "assistant", "content": answer.get("content") or None}
        if calls:
            message["tool_calls"] = calls
        prompt = sum(len(str(m.get("content") or "")) for m in body.get("messages", [])) // 4 + 1
        completion = len(answer.get("content") or "") // 4 + 1 + 10 * len(calls)
        choice: dict[str, Any] = {"index": 0, "message": message,
                                  "finish_reason": answer.get("finish_reason") or ("tool_calls" if calls else "stop")}
        reply_body: dict[str, Any] = {
            "id": f"chatcmpl-{next(self._ids)}", "object": "chat.completion", "created": 0,
            "model": body.get("model", "scripted"), "choices": [choice],
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        }
        if self.speaks == "vllm" and body.get("return_token_ids") and answer.get("token_ids") is not None:
            reply_body["prompt_token_ids"] = answer.get("prompt_token_ids")
            choice["token_ids"] = answer["token_ids"]
        if self.speaks == "sglang" and answer.get("token_ids") is not None:
            if body.get("return_token_ids"):
                choice["token_ids"] = answer["token_ids"]
            if body.get("return_prompt_token_ids"):
                choice["prompt_token_ids"] = answer.get("prompt_token_ids")
            if body.get("return_meta_info") and answer.get("logprobs") is not None:
                choice["meta_info"] = {"output_token_logprobs": [
                    [lp, token, f"t{i}"] for i, (lp, token) in enumerate(zip(answer["logprobs"], answer["token_ids"]))]}
            answer = {**answer, "logprobs": None}  # SGLang's are in meta_info here
        if body.get("logprobs") and answer.get("logprobs") is not None:
            choice["logprobs"] = {"content": [{"token": f"t{i}", "logprob": value, "bytes": None, "top_logprobs": []}
                                              for i, value in enumerate(answer["logprobs"])]}
        return web.json_response(reply_body)

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._completions)
        # On exit, a reply still being delayed is cut short, not waited for (aiohttp waits 60 s).
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        try:
            self._loop.run_until_complete(site.start())
        except OSError as exc:
            self._failed = exc
            self._started.set()
            return
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._started.set()
        self._loop.run_forever()

    def __enter__(self) -> "ScriptedServer":
        self._thread = threading.Thread(target=self._serve, name="scripted-chat", daemon=True)
        self._thread.start()
        if not self._started.wait(30):
            raise RuntimeError("the scripted server did not start")
        if self._failed is not None:
            raise OSError(f"the scripted server cannot listen on 127.0.0.1:{self.port}: {self._failed}")
        return self

    def __exit__(self, *_: object) -> None:
        async def stop() -> None:
            if self._runner is not None:
                await self._runner.cleanup()
        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(30)
        self._loop.close()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m dsh_actors.agent.scripted --script FILE [--port N] [--speaks vllm|sglang]``."""
    import argparse
    import signal

    parser = argparse.ArgumentParser(prog="python -m dsh_actors.agent.scripted",
                                     description="A scripted Chat Completions endpoint on 127.0.0.1.")
    parser.add_argument("--script", required=True, help="a JSON file mapping each task to its replies")
    parser.add_argument("--port", type=int, default=8011)
    parser.add_argument("--speaks", choices=("vllm", "sglang"), default="vllm",
                        help="whose token-id fields to answer with (default vllm)")
    args = parser.parse_args(argv)
    try:
        script = load_script(args.script)
    except (OSError, ValueError) as exc:
        print(f"scripted: {exc}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        with ScriptedServer(by_task(script), speaks=args.speaks, port=args.port) as server:
            print(f"serving {server.base_url} ({len(script)} tasks)", flush=True)
            try:
                stop.wait()
            except KeyboardInterrupt:
                pass
    except OSError as exc:
        print(f"scripted: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
