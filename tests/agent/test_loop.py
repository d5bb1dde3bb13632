"""A model in the loop: episodes with a task run an agent loop against a real HTTP server on
loopback speaking Chat Completions, through the real openai client."""

import asyncio
import json

import pytest

from dsh_actors.agent import ModelConfig
from dsh_actors.agent.scripted import ScriptedServer, reply
from dsh_actors.eval.job import DEFAULT_SYSTEM, run_eval
from dsh_actors.eval.show import show_log
from dsh_actors.eval.replay import replay_logs
from dsh_actors.log import read_records

T = 240

SCRIPTS = {
    "What is 6*7? Answer with the number.": [
        reply("Let me look.", ("read_file", {"path": "notes.txt"}), ("read_file", '{"path": '), ("teleport", {})),
        reply("42", delay_s=0.3),
    ],
    "Loop forever.": [reply("", ("read_file", {"path": "notes.txt"}))] * 5,
    "Say ok.": [reply(status=429), reply("ok")],
}


def respond(request):
    """Each conversation gets its own script, by its task (its first user message)."""
    task = next(m["content"] for m in request["messages"] if m["role"] == "user")
    script = SCRIPTS[task]
    turn = sum(1 for m in request["messages"] if m["role"] == "assistant")
    if task == "Say ok.":  # the first request is refused (429); the client retries
        respond.calls[task] = respond.calls.get(task, 0) + 1
        return script[0] if respond.calls[task] == 1 else script[1]
    return script[min(turn, len(script) - 1)]


respond.calls = {}


@pytest.mark.timeout(T)
def test_task_episodes_run_the_agent_loop_score_and_log_every_turn(ray_cluster, tmp_path):
    episodes = tmp_path / "tasks.jsonl"
    episodes.write_text("\n".join(json.dumps(e) for e in [
        {"id": "answers", "task": "What is 6*7? Answer with the number.", "policies": ["deny-destructive"],
         "scorer": {"kind": "exact", "expected": "42"}},
        {"id": "loops", "task": "Loop forever.", "limits": {"max_turns": 2}, "scorer": {"kind": "regex", "pattern": "."}},
        {"id": "polite", "agent": "polite-agent", "task": "Say ok.", "scorer": {"kind": "exact", "expected": "ok"}},
        {"id": "no-model-needed", "turns": [{"calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]}]},
    ]))
    with ScriptedServer(respond) as server:
        config = ModelConfig(model="scripted-7b", base_url=server.base_url, max_retries=3, temperature=0.0)
        summary = asyncio.run(run_eval([episodes], tmp_path / "out", progress=None, model=config))
    per = {e["id"]: e for e in summary["per_episode"]}
    assert summary["episodes_failed"] == 0, summary["per_episode"]
    assert per["answers"]["stop"] == "final" and per["answers"]["final"] == "42" and per["answers"]["success"] is True
    assert per["answers"]["turns"] == 2 and per["answers"]["calls"] == 3
    assert per["answers"]["errors"] == {"INVALID_ARGS": 1, "UNKNOWN_TOOL": 1}  # the model saw both, the loop went on
    assert per["loops"]["stop"] == "max_turns" and per["loops"]["turns"] == 2 and per["loops"]["success"] is False
    assert per["polite"]["final"] == "ok" and per["polite"]["success"] is True
    assert "stop" not in per["no-model-needed"]  # a scripted episode in the same job
    model = summary["model"]
    assert model["episodes"] == 3 and model["success_rate"] == round(2 / 3, 4) and model["turns"] == 5
    assert model["tokens"]["prompt"] > 0 and model["tokens"]["completion"] > 0
    assert model["model_s"] > 0 and model["tool_s"] > 0 and model["stops"] == {"final": 2, "max_turns": 1}
    # Per turn and per step: 5 model turns (the slowest waited 300 ms at the server), 3 steps.
    assert model["model_turn_ms"]["max"] >= 300 and model["model_turn_ms"]["p50"] < model["model_turn_ms"]["max"]
    assert 0 < model["tool_step_ms"]["p50"] <= model["tool_step_ms"]["max"]
    assert len(per["answers"]["model_turn_ms"]) == 2 and len(per["loops"]["tool_step_ms"]) == 2
    assert "| a model turn |" in (tmp_path / "out" / "summary.md").read_text()
    # The second request of "answers" carries the tool results, matched to the calls' ids.
    answers = [r for r in server.requests if r["messages"][1]["content"].startswith("What is 6*7")]
    assert len(answers) == 2
    assert {t["function"]["name"] for t in answers[0]["tools"]} == {"bash", "read_file", "write_file", "edit_file"}
    assert answers[0]["messages"][0] == {"role": "system", "content": DEFAULT_SYSTEM}
    ids = [c["id"] for c in next(m for m in answers[1]["messages"] if m["role"] == "assistant")["tool_calls"]]
    tool_messages = [m for m in answers[1]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ids and len(ids) == 3
    assert ("the arguments are not valid JSON (Expecting value: line 1 column 10 (char 9)); send them as one JSON "
            "object") in tool_messages[1]["content"] and "unknown tool" in tool_messages[2]["content"]
    torn = next(c for c in next(m for m in answers[1]["messages"] if m["role"] == "assistant")["tool_calls"]
                if c["id"] == ids[1])
    assert torn["function"]["arguments"] == '{"path": '  # sent back to the model exactly as it wrote it
    assert answers[0]["model"] == "scripted-7b" and answers[0]["temperature"] == 0.0
    # The log is the record: show renders it, replay runs it as the episode's agent.
    log = tmp_path / "out" / "logs" / "answers.log"
    kinds = [e["type"] for e in read_records(log)]
    assert kinds[:4] == ["turn/start", "system/prompt", "user/message", "assistant/message"]
    assert kinds.count("tool/result") == 3
    given = next(e for e in read_records(log) if e["type"] == "system/prompt")
    assert given["content"] == answers[0]["messages"][0]["content"] and given["tools"] == answers[0]["tools"]
    shown, damage = show_log(log)
    assert "» user: What is 6*7?" in shown and damage is None
    assert f"· system prompt: {len(DEFAULT_SYSTEM):,} characters, 4 tool(s) offered" in shown
    assert replay_logs([tmp_path / "out" / "logs" / "polite.log"], ["deny-destructive"]) == []


@pytest.mark.timeout(T)
def test_a_task_without_a_model_is_reported_up_front(ray_cluster, tmp_path):
    episodes = tmp_path / "tasks.jsonl"
    episodes.write_text(json.dumps({"id": "orphan", "task": "Hello?"}) + "\n")
    summary = asyncio.run(run_eval([episodes], tmp_path / "out", progress=None))
    assert summary["invalid"] == [f"{episodes}:1: a task needs a model: give the episode a model name, or run with "
                                  "--model (and --base-url for anything but OpenAI's API)"]
    assert summary["per_episode"] == []


SLOW_S = 120
"""How long the slow reply takes: longer than the whole run of a loaded machine, so a run
that ends before it did not wait for it."""

STOPS = {
    "Cut off.": [reply("The answer is 4", finish_reason="length")],
    "Filtered.": [reply("", finish_reason="content_filter")],
    "HTML.": [reply(raw="<html><body>Welcome to nginx!</body></html>", content_type="text/html")],
    "Torn.": [reply(raw='{"id": "x", "choices": [{"message": ')],
    "Slow.": [reply("late", delay_s=SLOW_S)],
    "Fine.": [reply("4")],
    "Unavailable.": [reply(status=503)],
    "Flail.": [reply("", ("teleport", {}), ("read_file", {"nope": 1}))],
}


def respond_stop(request):
    task = next(m["content"] for m in request["messages"] if m["role"] == "user")
    return STOPS[task][0]


@pytest.mark.timeout(T)
def test_every_way_a_turn_ends_has_its_stop_and_only_a_final_answer_is_scored(ray_cluster, tmp_path):
    import time

    expected = {"kind": "regex", "pattern": "4"}
    episodes = tmp_path / "stops.jsonl"
    episodes.write_text("\n".join(json.dumps({"id": task.rstrip(".").lower().replace(" ", "-"), "task": task,
                                              "scorer": expected,
                                              "limits": {"max_wall_s": 2, "max_invalid_calls": 4}})
                                  for task in STOPS))
    with ScriptedServer(respond_stop) as server:
        config = ModelConfig(model="scripted-7b", base_url=server.base_url, max_retries=0)
        started = time.monotonic()
        summary = asyncio.run(run_eval([episodes], tmp_path / "out", progress=None, model=config,
                                       environments="host"))
        took = time.monotonic() - started
    per = {e["id"]: e for e in summary["per_episode"]}
    assert per["cut-off"]["stop"] == "length" and per["cut-off"]["success"] is False  # "4" is there, not scored
    assert "cut off" in per["cut-off"]["message"] and per["cut-off"]["status"] == "ok"
    assert per["filtered"]["stop"] == "content_filter" and per["filtered"]["success"] is False
    for torn in ("html", "torn"):
        assert per[torn]["stop"] == "malformed_reply" and per[torn]["status"] == "failed", per[torn]
        assert server.base_url in per[torn]["message"] and "object has no attribute" not in per[torn]["message"]
    assert "Welcome to nginx" in per["html"]["message"] and "not valid JSON" in per["torn"]["message"]
    assert per["slow"]["stop"] == "max_wall" and "wall budget (2 s)" in per["slow"]["message"]
    assert took < SLOW_S  # the slow reply was cancelled at the 2 s budget, not waited for
    assert per["fine"]["stop"] == "final" and per["fine"]["success"] is True
    assert per["flail"]["stop"] == "invalid_calls" and per["flail"]["turns"] == 2  # 2 bad calls a turn, 4 in a row
    # Whose end it was: only the endpoint's failure after its retries is the infrastructure's.
    assert {e: per[e]["termination"] for e in per} == {
        "cut-off": {"reason": "length", "infra": False}, "filtered": {"reason": "content_filter", "infra": False},
        "html": {"reason": "malformed_reply", "infra": False}, "torn": {"reason": "malformed_reply", "infra": False},
        "slow": {"reason": "max_wall", "infra": False}, "fine": {"reason": "final", "infra": False},
        "unavailable": {"reason": "endpoint_unavailable", "infra": True},
        "flail": {"reason": "invalid_calls", "infra": False}}
    assert summary["episodes_infra"] == 1 and summary["terminations"]["malformed_reply"] == 2
    model = summary["model"]
    assert model["episodes"] == 8 and model["scored"] == 8 and model["success_rate"] == round(1 / 8, 4)
    assert model["stops"] == {"length": 1, "content_filter": 1, "malformed_reply": 2, "max_wall": 1, "final": 1,
                              "model_error": 1, "invalid_calls": 1}
    shown, _ = show_log(tmp_path / "out" / "logs" / "cut-off.log")
    assert "« assistant: The answer is 4" in shown  # show renders the model's turns


def respond_tokens(request):
    turn = sum(1 for m in request["messages"] if m["role"] == "assistant")
    if turn == 0:
        return reply("", ("read_file", {"path": "notes.txt"}), token_ids=[101, 102], prompt_token_ids=[1, 2, 3],
                     logprobs=[-0.5, -0.25])
    return reply("done")  # this endpoint sends no ids on the second turn


@pytest.mark.timeout(T)
def test_token_ids_round_trip_from_the_endpoint_into_the_log_in_order(ray_cluster, tmp_path):
    episodes = tmp_path / "tokens.jsonl"
    episodes.write_text(json.dumps({"id": "ids", "task": "Read notes.txt.", "model": {"token_ids": True}}) + "\n")
    with ScriptedServer(respond_tokens) as server:
        config = ModelConfig(model="scripted-7b", base_url=server.base_url, max_retries=0)
        summary = asyncio.run(run_eval([episodes], tmp_path / "out", progress=None, model=config))
    assert summary["episodes_failed"] == 0, summary["per_episode"]
    assert all(r.get("return_token_ids") is True for r in server.requests)
    turns = [e for e in read_records(tmp_path / "out" / "logs" / "ids.log") if e["type"] == "assistant/message"]
    assert turns[0]["tokens"] == {"prompt_ids": [1, 2, 3], "completion_ids": [101, 102], "logprobs": [-0.5, -0.25]}
    assert "no prompt_token_ids or token_ids" in turns[1]["tokens"]["missing"]  # said, never guessed
    # The export: the ids in order, a loss mask over the completion tokens; read back with pyarrow.
    import pyarrow.parquet as pq

    from dsh_actors.eval.export import SCHEMA, episode_rows, export_run, to_rl_rows

    (row,) = list(episode_rows(tmp_path / "out"))
    assert row["schema"] == SCHEMA and row["stop"] == "final" and row["final"] == "done"
    assert row["token_turns"] == [{"prompt_ids": [1, 2, 3], "completion_ids": [101, 102], "logprobs": [-0.5, -0.25],
                                   "loss_mask": [1, 1]}]
    assert row["episode_tokens"] is None and "turn 2 has no token ids: the endpoint sent no" in row["episode_tokens_missing"]
    assert [m["role"] for m in row["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    (event,) = row["tool_events"]
    assert (event["name"], event["decision"], event["error_code"]) == ("read_file", "ok", None)
    assert event["duration_ms"] > 0 and "ship" in event["result"]
    assert export_run(tmp_path / "out", tmp_path / "e.parquet", "parquet") == 1
    table = pq.read_table(tmp_path / "e.parquet").to_pylist()
    assert table[0]["token_turns"][0]["completion_ids"] == [101, 102] and table[0]["id"] == "ids"
    assert json.loads(table[0]["messages_json"]) == row["messages"]
    (rl,) = list(to_rl_rows(iter([row])))
    assert [m["role"] for m in rl["prompt"]] == ["system", "user"] and rl["reward"] is None  # no scorer: unscored
