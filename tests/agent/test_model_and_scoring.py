"""The model client against a real HTTP server on loopback (through the real openai
client), the protocol translation, and the scorers."""

import asyncio
import sys

import pytest

from dsh_actors.agent import ChatModel, ModelConfig, ScorerError, score
from dsh_actors.agent.model import ModelError, to_chat_messages
from dsh_actors.agent.scripted import ScriptedServer, reply
from dsh_actors.agent.scoring import check_scorer

pytestmark = pytest.mark.timeout(60)
TOOLS = [{"name": "read_file", "description": "Read a file.", "parameters": {"type": "object"}}]


def complete(server, *, retries=2, messages=None, tools=TOOLS):
    async def run():
        model = ChatModel(ModelConfig(model="scripted-1", base_url=server.base_url, max_retries=retries,
                                      temperature=0.0, seed=7))
        try:
            return await model.complete("You are terse.", messages or [{"role": "user", "content": "hi"}], tools)
        finally:
            await model.close()
    return asyncio.run(run())


def test_tool_calls_come_back_raw_and_the_request_carries_model_tools_and_sampling():
    with ScriptedServer([reply("", ("read_file", {"path": "a.txt"}), ("read_file", '{"path": '))]) as server:
        turn = complete(server)
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("read_file", '{"path": "a.txt"}'),
                                                                ("read_file", '{"path": ')]
    assert turn.completion_tokens > 0 and turn.prompt_tokens > 0 and turn.seconds > 0
    sent = server.requests[0]
    assert sent["model"] == "scripted-1" and sent["temperature"] == 0.0 and sent["seed"] == 7
    assert sent["messages"][0] == {"role": "system", "content": "You are terse."}
    assert sent["tools"] == [{"type": "function", "function": TOOLS[0]}]


def test_429_is_retried_with_backoff_and_a_server_that_keeps_failing_is_a_model_error():
    with ScriptedServer([reply(status=429), reply(status=503), reply("fine")]) as server:
        assert complete(server).content == "fine"
    assert len(server.requests) == 3
    with ScriptedServer([reply(status=429)] * 5) as server:
        with pytest.raises(ModelError, match="failed"):
            complete(server, retries=1)
    assert len(server.requests) == 2


def test_the_log_history_becomes_chat_messages_tool_results_matched_to_their_calls():
    history = [
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"call_id": "c1", "name": "read_file", "arguments": {"path": "a"}},
            {"call_id": "c2", "name": "read_file", "arguments": '{"path": '}]},
        {"role": "tool", "call_id": "c1", "name": "read_file", "content": [{"type": "text", "text": "A"}],
         "is_error": False},
        {"role": "tool", "call_id": "c2", "name": "read_file",
         "content": [{"type": "text", "text": "Error: bad"}], "is_error": True},
        {"role": "user", "content": "context", "contexts": []},
    ]
    chat = to_chat_messages("sys", history)
    assert chat[2]["tool_calls"][1]["function"]["arguments"] == '{"path": '  # sent back as the model wrote it
    assert chat[2]["content"] is None and chat[2]["tool_calls"][0]["function"]["arguments"] == '{"path": "a"}'
    assert chat[3] == {"role": "tool", "tool_call_id": "c1", "content": "A"}
    assert chat[4] == {"role": "tool", "tool_call_id": "c2", "content": "Error: bad"}
    assert chat[5] == {"role": "user", "content": "context"}


def good_answer(text):
    return text.startswith("yes")


@pytest.mark.parametrize("spec,answer,verdict", [
    ({"kind": "exact", "expected": "42"}, " 42\n", True),
    ({"kind": "exact", "expected": "42"}, "43", False),
    ({"kind": "exact", "expected": "42"}, None, False),
    ({"kind": "regex", "pattern": r"\b4\d\b"}, "the answer is 42.", True),
    ({"kind": "json_path", "path": "$.items[1].id", "expected": 7}, '{"items": [{"id": 1}, {"id": 7}]}', True),
    ({"kind": "json_path", "path": '$["a b"]', "expected": "x"}, '{"a b": "x"}', True),
    ({"kind": "json_path", "path": "$.items[5]", "expected": 7}, '{"items": []}', False),
    ({"kind": "json_path", "path": "$.a", "expected": 1}, "not json", False),
    ({"kind": "python", "callable": f"{__name__}:good_answer"}, "yes indeed", True),
])
def test_scorers(spec, answer, verdict):
    sys.modules.setdefault(__name__, sys.modules[__name__])
    assert score(spec, answer) is verdict


@pytest.mark.parametrize("spec,message", [
    ({"kind": "fuzzy"}, "unknown scorer kind"), ({"kind": "regex", "pattern": "("}, "bad regex"),
    ({"kind": "json_path", "path": "a.b", "expected": 1}, "starts with"),
    ({"kind": "python", "callable": "no_such_module_xyz:f"}, "cannot import"),
    ({"kind": "exact"}, "needs"),
    ({"kind": "regex"}, "a regex scorer needs 'pattern'"),  # not an empty pattern that matches anything
    ({"kind": "exact", "expected": "42", "expect": "41"}, r"no field\(s\) \['expect'\]; its fields: expected"),
])
def test_a_malformed_scorer_is_refused_with_what_is_wrong(spec, message):
    with pytest.raises(ScorerError, match=message):
        check_scorer(spec)


def test_a_reply_that_is_not_a_chat_completion_is_a_malformed_reply_naming_the_endpoint():
    page = "<html><body>" + "x" * 500 + "</body></html>"
    for raw, kind, says in [(page, "text/html", "not a Chat Completions reply"),
                            ('{"choices": [', "application/json", "not valid JSON"),
                            ('{"id": "x", "object": "chat.completion", "choices": []}', "application/json", "no choices")]:
        with ScriptedServer([reply(raw=raw, content_type=kind)]) as server:
            with pytest.raises(ModelError, match=says) as caught:
                complete(server, retries=0)
        assert caught.value.stop == "malformed_reply" and server.base_url in str(caught.value)
        assert len(str(caught.value)) < 400  # a page is quoted, not pasted
    with ScriptedServer([reply("cut", finish_reason="length")]) as server:
        assert complete(server).finish_reason == "length"


def test_cards_cut_long_values_saying_their_size_and_keep_their_head_line_first():
    from dsh_actors.render import render_card

    ok = {"content": [{"type": "text", "text": "fine"}], "is_error": False}
    card = render_card("write_file", {"content": "y" * 2_000_000}, None, None, ok)
    assert max(len(line) for line in card.splitlines()) < 140 and "chars)" in card
    card = render_card("bash", {"command": "ls # list"}, {"card": "terminal", "title": "ls # list",
                                                            "description": "list files", "cwd": "/w"}, None, ok)
    assert card.splitlines()[0].startswith("✓ bash: ls # list") and "  # list files" in card


@pytest.mark.parametrize("values, p50, p90", [([1.0, 2.0], 1.5, 1.9), ([5.0], 5.0, 5.0), ([], None, None),
                                              ([1.0, 2.0, 3.0, 4.0, 5.0], 3.0, 4.6)])
def test_percentiles_interpolate_between_ranks(values, p50, p90):
    from dsh_actors.eval.reports import percentile

    assert (percentile(values, 50), percentile(values, 90)) == (p50, p90)


async def one_turn(server, token_ids=True):
    """One model turn against ``server``, asking for token ids unless told not to."""
    model = ChatModel(ModelConfig(model="m", base_url=server.base_url, max_retries=0, token_ids=token_ids))
    try:
        return await model.complete("", [{"role": "user", "content": "hi"}], [])
    finally:
        await model.close()


def test_token_ids_are_kept_as_the_endpoint_sent_them_or_said_missing():
    sent = reply("ok", token_ids=[9, 8, 7], prompt_token_ids=[1, 2, 3, 4], logprobs=[-0.1, -0.2, -0.3])
    with ScriptedServer([sent, reply("no ids"), sent]) as server:
        turn = asyncio.run(one_turn(server))
        bare = asyncio.run(one_turn(server))
        unasked = asyncio.run(one_turn(server, token_ids=False))
    assert (turn.tokens.prompt_ids, turn.tokens.completion_ids, turn.tokens.logprobs) == (
        [1, 2, 3, 4], [9, 8, 7], [-0.1, -0.2, -0.3])
    assert server.requests[0]["return_token_ids"] is True and server.requests[0]["logprobs"] is True
    assert bare.tokens.completion_ids is None and "nothing was re-tokenized" in bare.tokens.missing
    assert unasked.tokens is None and "return_token_ids" not in server.requests[2]


def test_token_ids_are_read_where_sglang_puts_them():
    sent = reply("ok", token_ids=[9, 8, 7], prompt_token_ids=[1, 2, 3, 4], logprobs=[-0.1, -0.2, -0.3])
    with ScriptedServer([sent, reply("no ids")], speaks="sglang") as server:
        turn = asyncio.run(one_turn(server))
        bare = asyncio.run(one_turn(server))
    asked = server.requests[0]
    assert asked["return_token_ids"] is asked["return_prompt_token_ids"] is asked["return_meta_info"] is True
    assert (turn.tokens.prompt_ids, turn.tokens.completion_ids, turn.tokens.logprobs) == (
        [1, 2, 3, 4], [9, 8, 7], [-0.1, -0.2, -0.3])  # the logprobs came from meta_info's triples
    assert bare.tokens.missing is not None and bare.tokens.completion_ids is None


def test_a_script_file_gives_each_task_its_own_replies_and_a_bad_one_says_where(tmp_path):
    import json as _json

    from dsh_actors.agent.scripted import by_task, load_script

    path = tmp_path / "script.json"
    path.write_text(_json.dumps({"Add 2 and 2.": [
        {"content": "", "tool_calls": [{"name": "bash", "arguments": {"command": "echo $((2+2))"}}]},
        {"content": "4", "token_ids": [7], "prompt_token_ids": [1]}]}))
    respond = by_task(load_script(str(path)))
    first = respond({"messages": [{"role": "user", "content": "Add 2 and 2."}]})
    second = respond({"messages": [{"role": "user", "content": "Add 2 and 2."}, {"role": "assistant"}]})
    later = respond({"messages": [{"role": "user", "content": "Add 2 and 2."}] + [{"role": "assistant"}] * 5})
    assert first["tool_calls"] == [{"name": "bash", "arguments": '{"command": "echo $((2+2))"}'}]
    assert second["content"] == later["content"] == "4" and second["token_ids"] == [7]
    assert "no replies for the task 'Other?'" in respond({"messages": [{"role": "user", "content": "Other?"}]})[
        "content"]
    for bad, said in (([], "a JSON object mapping each task"), ({"t": []}, "non-empty list"),
                      ({"t": [{"content": "x", "tool": "bash"}]}, "task 't' reply 0: a reply is an object with only")):
        path.write_text(_json.dumps(bad))
        with pytest.raises(ValueError, match=said):
            load_script(str(path))
