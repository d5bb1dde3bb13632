"""The whole-episode token sequence of the export: stitched from the recorded ids only,
with the model's tokens unmasked and everything between turns masked, or refused with why."""

import pytest

from dsh_actors.eval.export import stitch_turns

T = 30


def turn(prompt, completion, logprobs=None):
    return {"type": "assistant/message", "content": "", "tokens": {
        "prompt_ids": prompt, "completion_ids": completion, "logprobs": logprobs}}


@pytest.mark.timeout(T)
def test_turns_whose_prompts_extend_each_other_become_one_masked_sequence():
    events = [{"type": "user/message", "content": "hi"},
              turn([1, 2, 3], [10, 11], [-0.1, -0.2]),
              {"type": "tool/result", "call_id": "c", "name": "bash", "content": [], "is_error": False},
              turn([1, 2, 3, 10, 11, 50, 51, 52], [12], [-0.3]),
              turn([1, 2, 3, 10, 11, 50, 51, 52, 12, 60], [13, 14], None)]
    tokens, missing = stitch_turns(events)
    assert missing is None
    assert tokens == {"prompt_ids": [1, 2, 3],
                      "response_ids": [10, 11, 50, 51, 52, 12, 60, 13, 14],
                      "loss_mask": [1, 1, 0, 0, 0, 1, 0, 1, 1],
                      "logprobs": [-0.1, -0.2, None, None, None, -0.3, None, None, None]}


@pytest.mark.timeout(T)
@pytest.mark.parametrize("events, why", [
    ([], "no model turns"),
    ([turn([1], [2]), {"type": "assistant/message", "content": "", "tokens": {"missing": "none sent"}}],
     "turn 2 has no token ids: none sent"),  # the log's own reason
    ([turn([1], [2]), {"type": "assistant/message", "content": ""}], "turn 2 has no recorded token ids"),
    ([turn([1, 2], [3]), turn([1, 2, 9, 4], [5])], "turn 2's prompt does not begin with the previous prompt"),
])
def test_a_sequence_that_cannot_be_built_from_recorded_ids_is_refused_with_why(events, why):
    tokens, missing = stitch_turns(events)
    assert tokens is None and why in missing


@pytest.mark.timeout(T)
def test_the_stitched_sequence_is_in_both_export_formats(tmp_path):
    import json

    import pyarrow.parquet as pq

    from dsh_actors.eval.export import ROW_FIELDS, export_run
    from dsh_actors.eval.reports import EpisodeReport
    from dsh_actors.log import FrameFile

    (tmp_path / "reports").mkdir()
    (tmp_path / "logs").mkdir()
    (tmp_path / "run.json").write_text("{}")
    for name, turns in (("whole", [turn([1, 2], [3], [-0.5]), turn([1, 2, 3, 4], [5], [-0.25])]),
                        ("torn", [turn([1, 2], [3]), turn([9], [5])])):
        (tmp_path / "reports" / f"{name}.json").write_text(json.dumps(
            EpisodeReport(id=name, agent="a", model="m", stop="final", turns=2).to_json()))
        with FrameFile(tmp_path / "logs" / f"{name}.log") as log:
            given = [{"type": "system/prompt", "content": "Be brief.", "tools": [{"type": "function", "function": {
                "name": "bash", "description": "run", "parameters": {"type": "object"}}}]}] if name == "whole" else []
            for event in [*given, {"type": "user/message", "content": "go"}, *turns]:
                log.append(event)
    assert export_run(tmp_path, tmp_path / "e.jsonl") == 2
    rows = {r["id"]: r for r in map(json.loads, (tmp_path / "e.jsonl").read_text().splitlines())}
    assert all(list(row) == list(ROW_FIELDS) for row in rows.values())  # every field documented, in order
    assert rows["whole"]["episode_tokens"] == {"prompt_ids": [1, 2], "response_ids": [3, 4, 5],
                                               "loss_mask": [1, 0, 1], "logprobs": [-0.5, None, -0.25]}
    assert rows["torn"]["episode_tokens"] is None and "turn 2's prompt" in rows["torn"]["episode_tokens_missing"]
    assert export_run(tmp_path, tmp_path / "e.parquet", "parquet") == 2
    flat = set(ROW_FIELDS) - {"messages", "tools", "tool_events", "usage"} | {
        "messages_json", "tools_json", "tool_events_json", "prompt_tokens", "completion_tokens"}
    assert set(pq.read_schema(tmp_path / "e.parquet").names) == flat  # as the reference says
    table = {r["id"]: r for r in pq.read_table(tmp_path / "e.parquet").to_pylist()}
    assert table["whole"]["episode_tokens"] == rows["whole"]["episode_tokens"]
    assert rows["whole"]["messages"][0] == {"role": "system", "content": "Be brief."} and rows["torn"]["tools"] is None
    assert json.loads(table["whole"]["tools_json"]) == rows["whole"]["tools"]
    assert table["torn"]["episode_tokens"] is None and table["torn"]["episode_tokens_missing"]


@pytest.mark.timeout(T)
def test_rl_and_conversation_shapes_carry_the_system_prompt_and_tools_the_model_was_given(tmp_path):
    import json

    import pyarrow.parquet as pq

    from dsh_actors.eval.export import export_run
    from dsh_actors.eval.reports import EpisodeReport
    from dsh_actors.log import FrameFile

    (tmp_path / "reports").mkdir()
    (tmp_path / "logs").mkdir()
    (tmp_path / "run.json").write_text("{}")
    tools = [{"type": "function", "function": {"name": "bash", "description": "run", "parameters": {"type": "object"}}}]
    (tmp_path / "reports" / "q.json").write_text(json.dumps(
        EpisodeReport(id="q", agent="a", model="m", stop="final", success=True).to_json()))
    with FrameFile(tmp_path / "logs" / "q.log") as log:
        for event in [{"type": "system/prompt", "content": "Be brief.", "tools": tools},
                      {"type": "user/message", "content": "6*7?"}, {"type": "assistant/message", "content": "42"}]:
            log.append(event)
    conversation = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "6*7?"},
                    {"role": "assistant", "content": "42"}]
    assert export_run(tmp_path, tmp_path / "rl.jsonl", "jsonl", "rl") == 1
    assert json.loads((tmp_path / "rl.jsonl").read_text()) == {
        "id": "q", "prompt": conversation[:2], "messages": conversation, "reward": 1.0, "weight": 1.0}
    assert export_run(tmp_path, tmp_path / "rl.parquet", "parquet", "rl") == 1
    (rl,) = pq.read_table(tmp_path / "rl.parquet").to_pylist()
    assert rl["prompt"] == conversation[:2] and rl["reward"] == 1.0 and json.loads(rl["messages_json"]) == conversation
    assert export_run(tmp_path, tmp_path / "m.jsonl", "jsonl", "messages") == 1
    assert json.loads((tmp_path / "m.jsonl").read_text()) == {"messages": conversation, "tools": tools, "weight": 1.0}
    assert export_run(tmp_path, tmp_path / "m.parquet", "parquet", "messages") == 1
    (m,) = pq.read_table(tmp_path / "m.parquet").to_pylist()
    assert json.loads(m["tools_json"]) == tools
    with pytest.raises(Exception, match="export shape must be one of episodes, rl, messages"):
        export_run(tmp_path, tmp_path / "x.jsonl", "jsonl", "sft")
    # An episode the infrastructure ended is masked: weight 0.0 in every shape, whatever its reward.
    lost = EpisodeReport(id="q", agent="a", model="m", stop="model_error", status="failed", success=False,
                         termination={"reason": "endpoint_unavailable", "infra": True})
    (tmp_path / "reports" / "q.json").write_text(json.dumps(lost.to_json()))
    export_run(tmp_path, tmp_path / "rl.parquet", "parquet", "rl")
    assert pq.read_table(tmp_path / "rl.parquet").to_pylist()[0]["weight"] == 0.0
    export_run(tmp_path, tmp_path / "e.jsonl", "jsonl", "episodes")
    row = json.loads((tmp_path / "e.jsonl").read_text())
    assert row["weight"] == 0.0 and row["termination"] == {"reason": "endpoint_unavailable", "infra": True}


@pytest.mark.timeout(T)
def test_rows_are_streamed_in_row_groups_and_a_failed_export_leaves_the_old_file(tmp_path, monkeypatch):
    import json

    import pyarrow.parquet as pq

    from dsh_actors.core.errors import HarnessError
    from dsh_actors.eval import export
    from dsh_actors.eval.reports import EpisodeReport
    from dsh_actors.log import FrameFile

    (tmp_path / "reports").mkdir()
    (tmp_path / "logs").mkdir()
    (tmp_path / "run.json").write_text("{}")
    for i in range(5):
        (tmp_path / "reports" / f"e{i}.json").write_text(json.dumps(EpisodeReport(id=f"e{i}", agent=f"a{i}").to_json()))
        with FrameFile(tmp_path / "logs" / f"e{i}.log") as log:
            log.append({"type": "user/message", "content": f"task {i}"})
    monkeypatch.setattr(export, "_BATCH", 2)
    assert export.export_run(tmp_path, tmp_path / "e.parquet", "parquet") == 5
    stored = pq.ParquetFile(tmp_path / "e.parquet")
    assert stored.metadata.num_row_groups == 3 and stored.metadata.num_rows == 5
    assert [r["id"] for r in stored.read().to_pylist()] == [f"e{i}" for i in range(5)]
    (tmp_path / "kept.jsonl").write_text("an earlier export\n")
    with pytest.raises(HarnessError, match="not a dsh-actors run folder"):
        export.export_run(tmp_path / "reports", tmp_path / "kept.jsonl")
    assert (tmp_path / "kept.jsonl").read_text() == "an earlier export\n"  # replaced only by a whole export
    assert not list(tmp_path.glob(".*.partial"))
