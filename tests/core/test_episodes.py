"""Episode files: each bad line is one error named by file and line, never a crashed load."""

import json

from dsh_actors.eval.episodes import load_episodes


def test_hostile_lines_are_each_one_bad_line_and_the_good_ones_still_load(tmp_path):
    good = json.dumps({"id": "fine", "turns": [{"user": "hi"}]}).encode()
    lines = [
        good,
        b'{"id": "bad\xff", "turns": []}',                                      # not UTF-8
        b"[" * 100_000 + b"]" * 100_000,                                        # nested 100k deep
        b'{"id": "big", "turns": [{"user": "x", "calls": [{"name": "a", "arguments": {"n": ' + b"9" * 5000 + b"}}]}]}",
        json.dumps({"id": "../../x", "turns": [{"user": "hi"}]}).encode(),      # a path, not a name
        json.dumps({"id": "ok2", "agent": "a/b", "turns": [{"user": "hi"}]}).encode(),
        json.dumps({"id": "p", "policies": ["nope"], "turns": [{"user": "hi"}]}).encode(),
        json.dumps({"id": "also-fine", "agent": "agent.7", "turns": [{"user": "hi"}]}).encode(),
    ]
    path = tmp_path / "hostile.jsonl"
    path.write_bytes(b"\n".join(lines))
    episodes, errors = load_episodes([path])
    assert [e.id for e in episodes] == ["fine", "also-fine"]
    assert [(e.line, e.message.split(":")[0]) for e in errors] == [
        (2, "not UTF-8 (byte 12 of the line)"), (3, "invalid JSON"), (4, "invalid JSON"), (5, "id"), (6, "agent"),
        (7, "policies")]
    assert "nested too deeply" in errors[1].message and "4300 digits" in errors[2].message
    assert "unknown policies ['nope']" in errors[5].message
