"""Episodes on the wire: one read from a file travels as its line and is validated again
where it lands; one made in Python travels as the model."""

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
