"""Episode files and episodes on the wire: each bad line is one error named by file and line,
never a crashed load; one read from a file travels as its line and is validated again where it
lands; one made in Python travels as the model."""

import json
import pickle

from ray import cloudpickle

from dsh_actors.eval.episodes import Episode, load_episodes


def test_an_episode_read_from_a_file_pickles_as_its_line_and_lands_equal(tmp_path):
    line = {"id": "ep-1", "policies": ["redact-secrets"], "turns": [{"calls": [{"name": "bash", "arguments": {"command": "ls"}}]}]}
    path = tmp_path / "e.jsonl"
    path.write_text("# a comment\n" + json.dumps(line) + "\n")
    (episode,), errors = load_episodes([path])
    assert errors == []
    wire = cloudpickle.dumps(episode)
    assert json.dumps(line).encode() in wire and b"pydantic" not in wire  # the line, not the model
    landed = pickle.loads(wire)
    assert landed == episode and landed.source == (str(path), 2)
    assert pickle.loads(pickle.dumps(landed)) == episode  # and again from where it landed


def test_an_episode_made_in_python_pickles_as_the_model():
    episode = Episode.model_validate({"id": "py", "turns": [{"calls": [{"name": "bash", "arguments": {"t": (1, 2)}}]}]})
    landed = pickle.loads(cloudpickle.dumps(episode))
    assert landed == episode and landed.turns[0].calls[0].arguments == {"t": (1, 2)}  # a tuple stays a tuple


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

