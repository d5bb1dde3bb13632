"""An episode report's JSON form: every field, nothing shared with the report."""

import dataclasses
import json
from collections import Counter

from dsh_actors.eval.reports import EpisodeReport


def test_a_reports_json_holds_every_field_copies_its_lists_and_comes_back_equal():
    report = EpisodeReport("ep", "agent", errors=Counter({"TOOL_FAILED": 2}), latencies_ms=[1.5, 2.0],
                           call_tools=["bash", "read_file"], model_turn_ms=[10.0], tool_step_ms=[3.0],
                           final="done", success=True, attempts=2, reran="its runner died")
    data = report.to_json()
    assert list(data) == [f.name for f in dataclasses.fields(EpisodeReport)]
    assert type(data["errors"]) is dict and data["errors"] == {"TOOL_FAILED": 2}
    for name in ("latencies_ms", "call_tools", "model_turn_ms", "tool_step_ms"):
        data[name].append("changed")  # the JSON form is a copy: the report is untouched
        assert getattr(report, name)[-1] != "changed"
    again = EpisodeReport.from_json(json.loads(json.dumps(report.to_json())))
    assert again == report and isinstance(again.errors, Counter)
