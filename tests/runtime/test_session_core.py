"""The session writer's core without Ray: a batch of opens, appends and closes is carried
out in order, one result per op, and what a close reports is what the file holds."""

import msgpack
import pytest

from dsh_actors.log import FrameFile
from dsh_actors.log.frames import read_records
from dsh_actors.runtime.session.writer import SessionWriterCore

pytestmark = pytest.mark.timeout(30)


def packed(*events):
    return [msgpack.packb(e, use_bin_type=True) for e in events]


def test_an_episodes_open_appends_and_close_in_one_batch_leave_its_events_on_disk(tmp_path):
    core, path = SessionWriterCore(), str(tmp_path / "a.log")
    results = core.commit([
        ("append", "a", packed({"type": "turn/start"})),  # before its open: not open yet
        ("open", "a", path, "always", 0.05, None),
        ("append", "a", packed({"type": "turn/start"}, {"type": "approval/asked", "id": "1", "tool_name": "rm"})),
        ("append", "a", packed({"type": "tool/code-dispatch", "is_error": True},
                               {"type": "tool/code-dispatch", "is_error": False})),
        ("close", "a"),
        ("close", "a"),  # closed already: not open (a client opens it again to ask)
    ])
    assert [r[0] for r in results] == ["not_open", "ok", "ok", "ok", "ok", "not_open"]
    assert results[2][1] == [0, 1] and results[3][1] == [2, 3]
    summary = results[4][1]
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
        ("open", "a", first, "always", 0.05, "actor-1"),
        ("open", "a", second, "always", 0.05, "actor-2"),  # held over another file: never a take-over here
        ("append", "a", packed({"type": "turn/start"})),
        ("append", "b", [b"\xc1"]),  # not open: refused without touching the others
    ])
    assert results[0][0] == "ok"
    assert results[1][:2] == ("error", "SESSION_HELD") and "first.log" in results[1][2]
    assert results[2] == ("ok", [0])
    assert results[3] == ("not_open",)
    assert not (tmp_path / "second.log").exists()
    core.commit([("close", "a")])


def test_closing_one_of_two_sessions_sharing_a_file_keeps_the_file_open_for_the_other(tmp_path):
    core, path = SessionWriterCore(), str(tmp_path / "shared.log")
    core.commit([("open", "a", path, "never", 0.05, None), ("open", "b", path, "never", 0.05, None)])
    results = core.commit([
        ("append", "a", packed({"type": "turn/start"})),
        ("close", "a"),
        ("append", "b", packed({"type": "turn/end"})),
        ("append", "a", packed({"type": "turn/end"})),  # closed: not open
        ("append", "b", [b"\xc1"]),  # not one msgpack value: refused, nothing written
    ])
    assert results[0] == ("ok", [0])
    assert results[1][1]["events"] == 1  # the file's events as "a" closed
    assert results[2] == ("ok", [1])
    assert results[3] == ("not_open",)
    assert results[4][:2] == ("error", "INVALID_EVENT")
    assert core.is_open("b")
    core.commit([("close", "b")])
    with FrameFile(path) as on_disk:
        assert [e["type"] for e in on_disk.records()] == ["turn/start", "turn/end"]


def test_an_open_that_fails_in_a_batch_fails_alone(tmp_path):
    core, good, bad = SessionWriterCore(), str(tmp_path / "good.log"), tmp_path / "bad.log"
    core.commit([("open", "g", good, "always", 0.05, None)])
    bad.write_bytes(b"not a session log at all")
    results = core.commit([
        ("append", "g", packed({"type": "turn/start"})),
        ("open", "b", str(bad), "always", 0.05, None),  # damaged: refused, the group still commits
        ("open", "c", str(tmp_path / "c.log"), "interval", 0, None),  # no such interval
        ("append", "g", packed({"type": "turn/end"})),
    ])
    assert results[0] == ("ok", [0]) and results[3] == ("ok", [1])
    assert results[1][:2] == ("error", "LOG_CORRUPT") and "bad.log" in results[1][2]
    assert results[2][:2] == ("error", "LOG_WRITE_FAILED") and "fsync_interval_s" in results[2][2]
    assert not core.is_open("b") and not core.is_open("c")
    core.commit([("close", "g")])


def test_a_close_opening_its_session_again_never_makes_its_file(tmp_path):
    core, path = SessionWriterCore(), tmp_path / "gone.log"
    with pytest.raises(FileNotFoundError, match="gone"):
        core.open("a", str(path), "always", 0.05, None, create=False)  # what a close's reopen asks
    assert not path.exists() and not core.is_open("a")


def test_a_writers_directory_says_where_each_session_is_and_its_successor_still_knows(tmp_path):
    notes = str(tmp_path / "writer.notes")
    core = SessionWriterCore(notes)
    a, b = str(tmp_path / "a.log"), str(tmp_path / "b.log")
    results = core.commit([("open", "a", a, "always", 0.05, None), ("open", "b", b, "interval", 0.2, None),
                           ("close", "b")])
    assert [r[0] for r in results] == ["ok", "ok", "ok"]
    assert core.directory.where("a") == {"path": a, "fsync": "always", "interval": 0.05}
    assert core.directory.where("b") is None and core.directory.where("nobody") is None
    core.file("a").close()  # the writer's process dies: its file goes, its notes stay
    with open(notes, "a") as torn:  # a note cut short by the process's death
        torn.write("93a4")
    successor = SessionWriterCore(notes)  # what Ray restarts: nothing is open in it
    assert not successor.is_open("a")
    assert successor.directory.where("a") == {"path": a, "fsync": "always", "interval": 0.05}
    assert successor.directory.where("b") is None
    assert successor.commit([("close", "a")]) == [("not_open",)]  # known, not open: a close opens it first
    successor.close("a")  # what a close does once its session is open again: it is forgotten
    assert successor.directory.where("a") is None
    assert SessionWriterCore(notes).directory.where("a") is None  # and so is it for the next one


def test_a_writers_notes_are_compacted_as_sessions_come_and_go(tmp_path, monkeypatch):
    from dsh_actors.runtime.session.writer import SessionDirectory

    monkeypatch.setattr(SessionDirectory, "_COMPACT_AT", 10)
    notes = tmp_path / "writer.notes"
    core = SessionWriterCore(str(notes))
    for i in range(40):
        core.commit([("open", f"s{i}", str(tmp_path / f"{i}.log"), "never", 0.05, None), ("close", f"s{i}")])
    core.commit([("open", "kept", str(tmp_path / "kept.log"), "never", 0.05, None)])
    core.file("kept").close()
    assert len(notes.read_text().splitlines()) <= 10 + 2  # not two lines for every session there ever was
    assert SessionWriterCore(str(notes)).directory.where("kept")["path"] == str(tmp_path / "kept.log")


def test_a_session_whose_file_was_removed_under_it_is_opened_anew_not_joined(tmp_path):
    """An episode run again (its runner died, or its job was resumed) removes its dead
    attempt's log and opens the same session id over the same path: the writer, still
    holding the dead attempt's session, must not go on writing into the unlinked file."""
    core, path = SessionWriterCore(), tmp_path / "ep.log"
    first = core.commit([("open", "agent", str(path), "always", 0.05, "dead-runner"),
                         ("append", "agent", packed({"type": "turn/start"}, {"type": "turn/end"}))])
    assert [r[0] for r in first] == ["ok", "ok"]
    path.unlink()  # the rerun's fresh files
    again = core.commit([("open", "agent", str(path), "always", 0.05, "new-runner"),
                         ("append", "agent", packed({"type": "turn/start"}, {"type": "user/message", "content": "x"})),
                         ("close", "agent")])
    assert [r[0] for r in again] == ["ok", "ok", "ok"] and again[2][1]["events"] == 2
    assert [e["type"] for e in read_records(path)] == ["turn/start", "user/message"]  # all of the last attempt
    assert core.holders("agent") == set()


def test_a_writer_closes_the_sessions_dead_actors_left_open_and_keeps_a_drivers(tmp_path, monkeypatch):
    """A detached writer outlives every job: sessions whose openers are all dead actors (a
    killed runner's, a killed driver's runners') are closed once idle, their files with
    them (counted in /proc/self/fd), while a driver's session stays open."""
    import asyncio
    import os

    from dsh_actors.runtime.session import writer as session

    monkeypatch.setattr(session, "ABANDONED_S", 0.05)
    monkeypatch.setattr(session, "_all_dead", lambda holders: holders <= {"dead-runner"})

    def open_files():
        return sum(1 for fd in os.listdir("/proc/self/fd") if str(tmp_path) in os.path.realpath(f"/proc/self/fd/{fd}"))

    async def scenario():
        writer = session.SessionWriterService(directory=str(tmp_path / "notes"))
        ops = [("open", f"ep-{i}", str(tmp_path / f"ep-{i}.log"), "never", 0.05, "dead-runner") for i in range(5)]
        ops += [("open", "driver", str(tmp_path / "driver.log"), "never", 0.05, None),
                ("open", "alive", str(tmp_path / "alive.log"), "never", 0.05, "live-runner")]
        await writer.commit_batch(ops)
        before = open_files()
        for _ in range(100):
            await asyncio.sleep(0.05)
            if open_files() == before - 5:
                break
        after, still = open_files(), [writer._core.is_open(s) for s in ("ep-0", "driver", "alive")]
        await writer.commit_batch([("close", "driver"), ("close", "alive")])
        return before, after, still

    before, after, still_open = asyncio.run(scenario())
    assert before >= 7 and after == before - 5
    assert still_open == [False, True, True]
