"""The session client (SessionLog) against a fake writer handle (tests/fakes.py), without
Ray: behind the handle is the real writer class (its plain writer on a thread, real files);
only the actor call is an in-process one. What is about processes (a SIGKILLed writer, another node) is in
test_session.py, on Ray."""

import asyncio

import pytest

from dsh_actors.log import FrameFile, InvalidEventError
from dsh_actors.log.writer import SessionWriterCore
from dsh_actors.runtime.session.client import SessionLog
from dsh_actors.runtime.session.writer import SessionWriterService

from ..fakes import FakeActor

pytestmark = pytest.mark.timeout(30)


def _writer():
    """A node's session writer: the real writer class behind an in-process handle."""
    return FakeActor(SessionWriterService(directory=None))


def _restart(writer):
    """What Ray's restart leaves: a writer process that has no session open (the dead one's
    files closed with it, unsynced data in the page cache)."""
    _stop(writer)
    writer.obj._core = SessionWriterCore(None)


def _stop(writer):
    for file in writer.obj._core._files.values():
        file.close()


def _log(session_id, path, writer):
    return SessionLog(session_id, "test", {"path": str(path), "fsync": "always", "interval": 0.05, "node": "n"},
                      handle=writer)


async def _opened(session_id, path, writer):
    log = _log(session_id, path, writer)
    await writer.open.remote(*log._open_args())
    return log


def test_appends_made_in_one_turn_by_many_sessions_go_to_their_writer_as_one_call(tmp_path):
    async def scenario():
        writer = _writer()
        logs = [await _opened(f"agent-{k}", tmp_path / f"{k}.log", writer) for k in range(20)]
        before = writer.calls.count("commit_batch")
        indexes = await asyncio.gather(*(log.append_many([{"type": "turn/start"}, {"type": "turn/end"}])
                                         for log in logs))
        sent = writer.calls.count("commit_batch") - before
        summaries = await asyncio.gather(*(log.close() for log in logs))
        return indexes, sent, summaries

    indexes, sent, summaries = asyncio.run(scenario())
    assert indexes == [[0, 1]] * 20
    assert sent == 1  # one turn's appends of 20 sessions: one actor call
    assert all(s["events"] == 2 and s["by_type"] == {"turn/start": 1, "turn/end": 1} for s in summaries)
    with FrameFile(tmp_path / "7.log") as on_disk:
        assert [e["type"] for e in on_disk.records()] == ["turn/start", "turn/end"]


def test_after_its_writer_restarted_a_session_is_opened_there_again_and_nothing_is_lost_or_doubled(tmp_path):
    async def scenario():
        writer = _writer()
        log = await _opened("agent", tmp_path / "a.log", writer)
        await log.append({"type": "turn/start"})
        _restart(writer)  # the new writer process has forgotten the session
        second = await log.append({"type": "turn/end"})  # answered not_open: reopened, sent once more
        events = await log.events()
        _restart(writer)
        summary = await log.close()  # a close still answers the summary, from the recovered file
        return second, events, summary, writer.calls.count("open")

    second, events, summary, opens = asyncio.run(scenario())
    assert second == 1
    assert [e["type"] for e in events] == ["turn/start", "turn/end"]
    assert summary["events"] == 2
    assert opens == 3  # the first open, then one per restart
    with FrameFile(tmp_path / "a.log") as on_disk:
        assert [e["type"] for e in on_disk.records()] == ["turn/start", "turn/end"]


def test_known_events_come_from_memory_until_another_process_appended_between(tmp_path):
    async def scenario():
        writer = _writer()
        mine = await _opened("agent", tmp_path / "a.log", writer)
        other = _log("agent", tmp_path / "a.log", writer)  # another process's client of the same session
        await mine.append_many([{"type": "turn/start"}, {"type": "user/message", "content": "hi"}])
        first = await mine.known_events()
        reads_before = writer.calls.count("events")
        await other.append({"type": "approval/asked", "id": "1", "tool_name": "rm"})
        await mine.append({"type": "turn/end"})
        second = await mine.known_events()
        _stop(writer)
        return first, reads_before, second, writer.calls.count("events")

    first, reads_before, second, reads_after = asyncio.run(scenario())
    assert [e["type"] for e in first] == ["turn/start", "user/message"] and reads_before == 0
    assert [e["type"] for e in second] == ["turn/start", "user/message", "approval/asked", "turn/end"]
    assert reads_after == 1  # only the gap the other process filled was read


def test_an_event_that_is_not_one_is_refused_by_the_client_and_the_session_goes_on(tmp_path):
    async def scenario():
        writer = _writer()
        log = await _opened("agent", tmp_path / "a.log", writer)
        sent_before = writer.calls.count("commit_batch")
        with pytest.raises(InvalidEventError):
            await log.append_many([{"type": "turn/start"}, {"type": "no/such-type"}])
        refused_unsent = writer.calls.count("commit_batch") == sent_before
        index = await log.append({"type": "turn/start"})
        _stop(writer)
        return refused_unsent, index

    refused_unsent, index = asyncio.run(scenario())
    assert refused_unsent and index == 0  # all or none: nothing of the refused batch was written
