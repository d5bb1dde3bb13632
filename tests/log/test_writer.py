"""The session writer's plain part: a batch of opens, appends and closes is carried out in
order, one reply per op, and what a close reports is what the file holds."""

import msgpack
import pytest

from dsh_actors.log import FrameFile
from dsh_actors.log.frames import read_records
from dsh_actors.log.writer import NOT_OPEN, Append, Close, Open, Reply, SessionDirectory, SessionWriterCore

pytestmark = pytest.mark.timeout(30)


def packed(*events):
    return [msgpack.packb(e, use_bin_type=True) for e in events]


def test_an_episodes_open_appends_and_close_in_one_batch_leave_its_events_on_disk(tmp_path):
    core, path = SessionWriterCore(), str(tmp_path / "a.log")
    results = core.commit([
        Append("a", packed({"type": "turn/start"})),  # before its open: not open yet
        Open("a", path, "always", 0.05, None),
        Append("a", packed({"type": "turn/start"}, {"type": "approval/asked", "id": "1", "tool_name": "rm"})),
        Append("a", packed({"type": "tool/code-dispatch", "is_error": True},
                               {"type": "tool/code-dispatch", "is_error": False})),
        Close("a"),
        Close("a"),  # closed already: not open (a client opens it again to ask)
    ])
    assert [r.kind for r in results] == ["not_open", "ok", "ok", "ok", "ok", "not_open"]
    assert results[2].value == [0, 1] and results[3].value == [2, 3]
    summary = results[4].value
    assert summary["events"] == 4 and summary["path"] == path
    assert summary["by_type"] == {"turn/start": 1, "approval/asked": 1, "tool/code-dispatch": 2}
    assert summary["errors_by_type"] == {"tool/code-dispatch": 1}
    assert not core.is_open("a")
    with FrameFile(path) as on_disk:
        assert [e["type"] for e in on_disk.records()] == ["turn/start", "approval/asked",
                                                          "tool/code-dispatch", "tool/code-dispatch"]


def test_an_open_over_another_file_is_refused_in_the_batch_and_the_rest_still_runs(tmp_path):
    core = SessionWriterCore()
    first, second = str(tmp_path / "first.log"), str(tmp_path / "second.log")
    results = core.commit([
        Open("a", first, "always", 0.05, "actor-1"),
        Open("a", second, "always", 0.05, "actor-2"),  # held over another file: never a take-over here
        Append("a", packed({"type": "turn/start"})),
        Append("b", [b"\xc1"]),  # not open: refused without touching the others
    ])
    assert results[0].kind == "ok"
    assert (results[1].kind, results[1].code) == ("error", "SESSION_HELD") and "first.log" in results[1].message
    assert results[2] == Reply.ok([0])
    assert results[3] == NOT_OPEN
    assert not (tmp_path / "second.log").exists()
    core.commit([Close("a")])


def test_closing_one_of_two_sessions_sharing_a_file_keeps_the_file_open_for_the_other(tmp_path):
    core, path = SessionWriterCore(), str(tmp_path / "shared.log")
    core.commit([Open("a", path, "never", 0.05, None), Open("b", path, "never", 0.05, None)])
    results = core.commit([
        Append("a", packed({"type": "turn/start"})),
        Close("a"),
        Append("b", packed({"type": "turn/end"})),
        Append("a", packed({"type": "turn/end"})),  # closed: not open
        Append("b", [b"\xc1"]),  # not one msgpack value: refused, nothing written
    ])
    assert results[0] == Reply.ok([0])
    assert results[1].value["events"] == 1  # the file's events as "a" closed
    assert results[2] == Reply.ok([1])
    assert results[3] == NOT_OPEN
    assert (results[4].kind, results[4].code) == ("error", "INVALID_EVENT")
    assert core.is_open("b")
    core.commit([Close("b")])
    with FrameFile(path) as on_disk:
        assert [e["type"] for e in on_disk.records()] == ["turn/start", "turn/end"]


def test_an_open_that_fails_in_a_batch_fails_alone(tmp_path):
    core, good, bad = SessionWriterCore(), str(tmp_path / "good.log"), tmp_path / "bad.log"
    core.commit([Open("g", good, "always", 0.05, None)])
    bad.write_bytes(b"not a session log at all")
    results = core.commit([
        Append("g", packed({"type": "turn/start"})),
        Open("b", str(bad), "always", 0.05, None),  # damaged: refused, the group still commits
        Open("c", str(tmp_path / "c.log"), "interval", 0, None),  # no such interval
        Append("g", packed({"type": "turn/end"})),
    ])
    assert results[0] == Reply.ok([0]) and results[3] == Reply.ok([1])
    assert (results[1].code, results[1].kind) == ("LOG_CORRUPT", "error") and "bad.log" in results[1].message
    assert (results[2].code, results[2].kind) == ("LOG_WRITE_FAILED", "error") and "fsync_interval_s" in results[2].message
    assert not core.is_open("b") and not core.is_open("c")
    core.commit([Close("g")])


def test_a_close_opening_its_session_again_never_makes_its_file(tmp_path):
    core, path = SessionWriterCore(), tmp_path / "gone.log"
    with pytest.raises(FileNotFoundError, match="gone"):
        core.open("a", str(path), "always", 0.05, None, create=False)  # what a close's reopen asks
    assert not path.exists() and not core.is_open("a")


def test_a_writers_directory_says_where_each_session_is_and_its_successor_still_knows(tmp_path):
    notes = str(tmp_path / "writer.notes")
    core = SessionWriterCore(notes)
    a, b = str(tmp_path / "a.log"), str(tmp_path / "b.log")
    results = core.commit([Open("a", a, "always", 0.05, None), Open("b", b, "interval", 0.2, None),
                           Close("b")])
    assert [r.kind for r in results] == ["ok", "ok", "ok"]
    assert core.directory.where("a") == {"path": a, "fsync": "always", "interval": 0.05}
    assert core.directory.where("b") is None and core.directory.where("nobody") is None
    core.file("a").close()  # the writer's process dies: its file goes, its notes stay
    with open(notes, "a") as torn:  # a note cut short by the process's death
        torn.write("93a4")
    successor = SessionWriterCore(notes)  # what Ray restarts: nothing is open in it
    assert not successor.is_open("a")
    assert successor.directory.where("a") == {"path": a, "fsync": "always", "interval": 0.05}
    assert successor.directory.where("b") is None
    assert successor.commit([Close("a")]) == [NOT_OPEN]  # known, not open: a close opens it first
    successor.close("a")  # what a close does once its session is open again: it is forgotten
    assert successor.directory.where("a") is None
    assert SessionWriterCore(notes).directory.where("a") is None  # and so is it for the next one


def test_a_writers_notes_are_compacted_as_sessions_come_and_go(tmp_path, monkeypatch):
    monkeypatch.setattr(SessionDirectory, "_COMPACT_AT", 10)
    notes = tmp_path / "writer.notes"
    core = SessionWriterCore(str(notes))
    for i in range(40):
        core.commit([Open(f"s{i}", str(tmp_path / f"{i}.log"), "never", 0.05, None), Close(f"s{i}")])
    core.commit([Open("kept", str(tmp_path / "kept.log"), "never", 0.05, None)])
    core.file("kept").close()
    assert len(notes.read_text().splitlines()) <= 10 + 2  # not two lines for every session there ever was
    assert SessionWriterCore(str(notes)).directory.where("kept")["path"] == str(tmp_path / "kept.log")


def test_a_session_whose_file_was_removed_under_it_is_opened_anew_not_joined(tmp_path):
    """An episode run again (its runner died, or its job was resumed) removes its dead
    attempt's log and opens the same session id over the same path: the writer, still
    holding the dead attempt's session, must not go on writing into the unlinked file."""
    core, path = SessionWriterCore(), tmp_path / "ep.log"
    first = core.commit([Open("agent", str(path), "always", 0.05, "dead-runner"),
                         Append("agent", packed({"type": "turn/start"}, {"type": "turn/end"}))])
    assert [r.kind for r in first] == ["ok", "ok"]
    path.unlink()  # the rerun's fresh files
    again = core.commit([Open("agent", str(path), "always", 0.05, "new-runner"),
                         Append("agent", packed({"type": "turn/start"}, {"type": "user/message", "content": "x"})),
                         Close("agent")])
    assert [r.kind for r in again] == ["ok", "ok", "ok"] and again[2].value["events"] == 2
    assert [e["type"] for e in read_records(path)] == ["turn/start", "user/message"]  # all of the last attempt
    assert core.holders("agent") == set()
