"""Replay: recorded calls against a new policy set, with no tool running for real."""

from dsh_actors import text_block
from dsh_actors.eval.replay import replay_logs
from dsh_actors.log import FrameFile, tool_result_event


def test_replay_reports_what_a_policy_set_would_have_done_differently(tmp_path):
    log = tmp_path / "agent-1.log"
    with FrameFile(log) as frames:
        frames.append({"type": "user/message", "content": "clean up"})
        frames.append(tool_result_event({"command": "rm -rf build"}, "bash", {
            "call_id": "1", "content": [text_block("")], "is_error": False, "meta": {"exit_code": 0}}))
        frames.append(tool_result_event({"path": "secrets.env"}, "read_file", {
            "call_id": "2", "content": [text_block("DB_PASSWORD=hunter2")], "is_error": False}))
        frames.append(tool_result_event({"path": "notes.txt"}, "read_file", {
            "call_id": "3", "content": [text_block("fine")], "is_error": False}))
        frames.append(tool_result_event({"command": "rm -rf /"}, "bash", {
            "call_id": "4", "content": [text_block("Error: destructive")], "is_error": True}))
    rows = replay_logs([log], ["deny-destructive", "redact-secrets"])
    assert [(r["call_id"], r["recorded"], r["replayed"]) for r in rows] == [("1", "ok", "denied"), ("2", "ok", "denied")]
    assert "destructive commands are not allowed" in rows[0]["text"] and "withheld" in rows[1]["text"]
    assert replay_logs([log], []) == []  # no policies: every recorded outcome reproduces
