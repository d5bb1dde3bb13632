"""The gateway's pure parts, in one process: which clients answer an ask through the
protocol and what they are asked; the state a retry brings back; tokens and the gate that
checks them (driven over ASGI by a real HTTP client)."""

import asyncio
import json

import pytest

pytest.importorskip("mcp")

import httpx2 as httpx  # noqa: E402  (the MCP SDK's own HTTP client)
import mcp_types as types  # noqa: E402

from dsh_actors.serve.access import TokenGate, load_tokens  # noqa: E402
from dsh_actors.serve.asks import answer_of, client_answers, question, state_of  # noqa: E402

pytestmark = pytest.mark.timeout(30)

MODERN = "2026-07-28"


@pytest.mark.parametrize("version, capabilities, answers", [
    (MODERN, types.ClientCapabilities(elicitation=types.ElicitationCapability(form=types.FormElicitationCapability())), True),
    (MODERN, types.ClientCapabilities(elicitation=types.ElicitationCapability()), True),  # no mode: form
    (MODERN, types.ClientCapabilities(elicitation=types.ElicitationCapability(url=types.UrlElicitationCapability())), False),
    (MODERN, types.ClientCapabilities(), False),
    (MODERN, None, False),
    ("2025-11-25", types.ClientCapabilities(elicitation=types.ElicitationCapability()), False),  # no round trip
])
def test_only_a_client_of_the_round_trip_with_form_elicitation_is_asked(version, capabilities, answers):
    assert client_answers(version, capabilities) is answers


def test_the_question_names_agent_tool_and_reason_and_its_state_names_the_call():
    asked = question("alice", "mcp-1", {"id": "ask-9", "tool_name": "write", "reason": "writes need a human"})
    [(key, request)] = asked.input_requests.items()
    assert key == "approval" and request.method == "elicitation/create"
    assert 'Agent "alice" asks to run tool "write": writes need a human.' in request.params.message
    assert request.params.requested_schema["properties"]["allow"]["type"] == "boolean"
    assert state_of(asked.request_state, "alice") == {"agent": "alice", "call_id": "mcp-1", "ask": "ask-9"}


@pytest.mark.parametrize("text, agent, fault", [
    ('{"agent": "alice", "call_id": "c", "ask": "a"}', "bob", 'belongs to agent "alice"'),
    ('{"agent": "alice", "call_id": 3, "ask": "a"}', "alice", "not one an ask"),
    ("[1]", "alice", "not one an ask"),
    ("not json", "alice", "not one an ask"),
])
def test_a_state_of_another_agent_or_another_shape_is_refused(text, agent, fault):
    with pytest.raises(ValueError, match=fault):
        state_of(text, agent)


@pytest.mark.parametrize("response, outcome", [
    ({"action": "accept", "content": {"allow": True}}, "allowed-once"),
    (types.ElicitResult(action="accept", content={"allow": True}), "allowed-once"),
    ({"action": "accept", "content": {"allow": False}}, "rejected"),
    ({"action": "accept", "content": {"allow": "yes"}}, "rejected"),  # only a true boolean allows
    ({"action": "accept"}, "rejected"),
    ({"action": "decline"}, "rejected"),
    ({"action": "cancel"}, "rejected"),
    (None, "rejected"),
])
def test_only_an_accepted_form_that_allows_allows(response, outcome):
    assert answer_of({"approval": response} if response is not None else None) == outcome


def test_a_tokens_file_is_checked_and_kept_as_digests(tmp_path):
    good = tmp_path / "tokens.json"
    good.write_text(json.dumps({"a" * 32: ["alice"], "b" * 32: "*"}))
    grants = load_tokens(str(good))
    assert sorted(map(sorted, grants.values())) == [["*"], ["alice"]] and "a" * 32 not in grants
    for content, fault in (("[]", "JSON object"), ('{"short": ["alice"]}', "shorter than 16"),
                           (json.dumps({"c" * 32: []}), "list of agent ids"), ("{", "not JSON")):
        (tmp_path / "bad.json").write_text(content)
        with pytest.raises(ValueError, match=fault):
            load_tokens(str(tmp_path / "bad.json"))
    with pytest.raises(ValueError, match="cannot read"):
        load_tokens(str(tmp_path / "missing.json"))


def test_the_gate_refuses_a_missing_token_and_another_agents_endpoint(tmp_path):
    (tmp_path / "tokens.json").write_text(json.dumps({"alice-token-0123456789": ["alice"], "admin-token-0123456789": "*"}))
    reached = []

    async def app(scope, receive, send):
        reached.append(scope["path"])
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    gate = TokenGate(app, load_tokens(str(tmp_path / "tokens.json")))

    async def ask(path, token=None):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient(transport=httpx.ASGITransport(gate), base_url="http://127.0.0.1") as client:
            return (await client.post(path, headers=headers)).status_code

    async def all_of():
        return [await ask(*a) for a in (
            ("/agents/alice/mcp", "alice-token-0123456789"), ("/agents/bob/mcp", "alice-token-0123456789"),
            ("/agents/alice/mcp",), ("/agents/alice/mcp", "forged-token-0123456789"),
            ("/agents/bob/mcp", "admin-token-0123456789"))]

    statuses = asyncio.run(all_of())
    assert statuses == [200, 403, 401, 401, 200]
    assert sorted(reached) == ["/agents/alice/mcp", "/agents/bob/mcp"]  # nothing refused got through


class _Place:
    """A place whose command ends when ``until`` is set (or after 30 s), and says whether it
    ran out or was cancelled."""

    root = "/"

    def __init__(self, until=None):
        self.until, self.ended = until or asyncio.Event(), None

    async def run(self, command, *, timeout_s, max_output, signal=None):
        try:
            await asyncio.wait_for(self.until.wait(), 30)
        except asyncio.CancelledError:
            self.ended = "cancelled"
            raise
        self.ended = "ran"
        return command


def test_a_running_command_touches_its_environment_while_it_runs_and_dies_with_its_call():
    """The idle end's heartbeat (:mod:`dsh_actors.serve.environments`): a command that runs
    until its environment was touched three times is touched while it runs (without the
    heartbeat it would wait out its 30 s), then once as it ends; a call cancelled
    mid-command cancels the command before it returns."""
    from dsh_actors.serve.environments import _Touching

    async def scenario():
        touches, third = [], asyncio.Event()

        def touch():
            touches.append(1)
            if len(touches) == 3:
                third.set()

        place = _Place(third)
        assert await asyncio.wait_for(_Touching(place, touch, every_s=0.02).run("echo", timeout_s=5, max_output=9),
                                      10) == "echo"
        held = _Place()
        call = asyncio.ensure_future(_Touching(held, lambda: None, every_s=0.02).run("x", timeout_s=5, max_output=1))
        await asyncio.sleep(0.1)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        return len(touches), place.ended, held.ended

    touches, ran, cancelled = asyncio.run(scenario())
    assert touches >= 4 and (ran, cancelled) == ("ran", "cancelled")  # three beats, then the end's touch
