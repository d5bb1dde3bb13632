import pytest

from dsh_actors import accept, allow, ask, block, deny
from dsh_actors.core.decisions import parse_post_decision, parse_pre_decision
from dsh_actors.core.errors import MalformedDecisionError
from dsh_actors.core.presentation import PresentationError, validate_call_view, validate_result_view

CTX = {"content": "note", "source": {"kind": "plugin", "plugin": "p"}}


def test_constructors_build_exactly_the_union_members():
    assert allow() == {"kind": "allow"}
    assert deny("no") == {"kind": "deny", "reason": "no"}
    assert ask() == {"kind": "ask"} and ask("why") == {"kind": "ask", "reason": "why"}
    assert accept() == {"kind": "accept"}
    assert block("fix it") == {"kind": "block", "feedback": "fix it"}


@pytest.mark.parametrize("value", [
    None, "allow", {"kind": "maybe"}, {"kind": "deny"}, {"kind": "deny", "reason": 3},
    {"kind": "allow", "extra": 1}, {"kind": "ask", "reason": None}, {"kind": "deny", "reason": "x", "args": {}},
])
def test_malformed_pre_decisions_fail_closed(value):
    with pytest.raises(MalformedDecisionError) as info:
        parse_pre_decision(value)
    assert info.value.code == "MALFORMED_DECISION" and "tools/pre-execute" in str(info.value)


@pytest.mark.parametrize("value", [
    {"kind": "accept", "content": "text"}, {"kind": "accept", "content": None}, {"kind": "block"},
    {"kind": "block", "feedback": 3}, {"kind": "accept", "additional_context": [{"content": "x"}]},
    {"kind": "accept", "extra": True}, {"kind": "reject"}, {"kind": "accept", "content": [{"text": "x"}]},
])
def test_malformed_post_decisions_fail_closed(value):
    with pytest.raises(MalformedDecisionError, match="tools/post-execute"):
        parse_post_decision(value)


def test_a_block_feedback_string_becomes_one_text_block():
    assert parse_post_decision(block("fix", [CTX])) == {
        "kind": "block", "feedback": [{"type": "text", "text": "fix"}], "additional_context": [CTX]}


def test_call_and_result_views_validate_each_card():
    assert validate_call_view({"card": "generic", "title": "t", "kind": "read",
                               "locations": [{"path": "/a", "line": 3}]})["kind"] == "read"
    assert validate_call_view({"card": "terminal", "title": "ls", "cwd": "/"})["cwd"] == "/"
    assert validate_call_view({"card": "diff", "title": "w", "diffs": [
        {"path": "/a", "old_text": None, "new_text": "x"}]})["diffs"][0]["old_text"] is None
    assert validate_result_view({"card": "terminal", "output": "o", "exit_code": 0})["exit_code"] == 0
    assert validate_result_view({"card": "diff", "diffs": []}) == {"card": "diff", "diffs": []}
    assert validate_result_view(None) is None


@pytest.mark.parametrize("view", [
    {"title": "no card"}, {"card": "hologram", "title": "x"}, {"card": "generic"},
    {"card": "generic", "title": "t", "kind": "teleport"},
    {"card": "generic", "title": "t", "locations": [{"path": "/a", "line": 0}]},
    {"card": "diff", "title": "t", "diffs": [{"path": "/a", "new_text": "x"}]},
    {"card": "terminal", "title": "t", "exit_code": 0},
    {"card": "generic", "title": "t", "raw_input": {1, 2}},
])
def test_malformed_call_views_are_rejected(view):
    with pytest.raises(PresentationError):
        validate_call_view(view)


def test_a_terminal_result_exit_code_must_be_an_int():
    with pytest.raises(PresentationError, match="exit_code"):
        validate_result_view({"card": "terminal", "exit_code": "0"})
