import struct
import zlib

import msgpack
import pytest

from dsh_actors import define_tool, text_block
from dsh_actors.log import (
    HEADER, FrameFile, InvalidEventError, LogCorruptError, check_event, context_message_event,
    derive_messages, replay_cards, tool_result_event,
)


def frame(value):
    payload = msgpack.packb(value)
    return struct.pack(">II", len(payload), zlib.crc32(payload)) + payload


def test_appended_frames_are_read_back_in_order_after_reopening(tmp_path):
    path = tmp_path / "s.log"
    log = FrameFile(path)
    assert [log.append({"type": "turn/start", "n": i}) for i in range(3)] == [0, 1, 2]
    log.close()
    with FrameFile(path) as again:
        assert again.records() == [{"type": "turn/start", "n": i} for i in range(3)]
    assert path.read_bytes().startswith(HEADER)


@pytest.mark.parametrize("tail", [
    b"\x00\x00",                                     # a torn length prefix
    struct.pack(">II", 50, 0) + b"short",            # a frame cut short
    struct.pack(">II", 3, 12345) + b"abc",           # a complete last frame with a bad checksum
])
def test_a_torn_tail_is_truncated_and_nothing_committed_is_lost(tmp_path, tail):
    path = tmp_path / "s.log"
    log = FrameFile(path)
    log.append({"type": "turn/start"})
    log.append({"type": "turn/end"})
    log.close()
    good = path.read_bytes()
    path.write_bytes(good + tail)
    with FrameFile(path) as again:
        assert again.records() == [{"type": "turn/start"}, {"type": "turn/end"}]
        assert again.truncated_bytes == len(tail) and path.read_bytes() == good
        again.append({"type": "turn/start"})
    with FrameFile(path) as reopened:
        assert reopened.records()[-1] == {"type": "turn/start"}


def test_damage_before_good_frames_is_refused_not_silently_dropped(tmp_path):
    path = tmp_path / "s.log"
    path.write_bytes(HEADER + struct.pack(">II", 3, 1) + b"bad" + frame({"type": "turn/end"}))
    with pytest.raises(LogCorruptError, match="refusing to drop committed events"):
        FrameFile(path)


def test_a_torn_tail_whose_payload_holds_frame_like_bytes_is_still_a_torn_tail(tmp_path):
    """A user's event may carry bytes that look like frames (even a whole valid one); cut
    short, it is a torn tail — only a frame that completes the file means corruption."""
    path = tmp_path / "s.log"
    with FrameFile(path) as log:
        log.append({"type": "turn/start"})
    good = path.read_bytes()
    inner = frame({"type": "turn/end"})
    whole = frame({"type": "user/message", "blob": b"x" * 40 + inner + b"y" * 40})
    for cut in (len(whole) - 41, len(whole) - 40, len(whole) - 1):  # the inner frame cut, whole, and more
        path.write_bytes(good + whole[:cut])
        with FrameFile(path) as again:
            assert again.records() == [{"type": "turn/start"}] and again.truncated_bytes == cut
        assert path.read_bytes() == good
    ends_inner = frame({"type": "user/message", "blob": b"x" * 40 + inner})  # a valid frame ends where it does
    bad_crc = ends_inner[:4] + struct.pack(">I", zlib.crc32(ends_inner[8:]) ^ 1) + ends_inner[8:]
    path.write_bytes(good + bad_crc)  # whole, but its checksum does not hold: the last append, torn
    with FrameFile(path) as again:
        assert again.records() == [{"type": "turn/start"}] and again.truncated_bytes == len(bad_crc)


def test_a_log_damaged_in_the_middle_says_what_is_damaged_where_and_what_was_recovered(tmp_path):
    from dsh_actors.log import read_records, scan_log

    path = tmp_path / "s.log"
    before, after = [frame({"type": "turn/start", "n": i}) for i in range(3)], \
        [frame({"type": "turn/end", "n": i}) for i in range(4)]
    damaged_at = len(HEADER) + sum(map(len, before))
    path.write_bytes(HEADER + b"".join(before) + struct.pack(">II", 9, 7) + b"garbage!!" + b"".join(after))
    with pytest.raises(LogCorruptError, match=f"damaged frame at byte {damaged_at}"):
        FrameFile(path)
    with pytest.raises(LogCorruptError, match=f"damaged bytes {damaged_at}-{damaged_at + 17}.*3 event.*4 after"):
        read_records(path)
    scan = scan_log(path.read_bytes(), path, recover_after=True)
    assert [r["n"] for r in scan.records] == [0, 1, 2] and [r["n"] for r in scan.after] == [0, 1, 2, 3]
    assert scan.damaged and scan.resumes_at == damaged_at + 17
    assert path.read_bytes().count(b"garbage") == 1  # readers never repair


def test_an_append_that_fails_part_way_is_cut_back_before_anything_else_is_acknowledged(tmp_path):
    import errno

    path = tmp_path / "s.log"
    log = FrameFile(path)
    log.append({"type": "turn/start"})
    size = path.stat().st_size
    real = log._file

    class DiskFull:  # writes part of the chunk to disk, then fails as a full disk does
        def seek(self, *args):
            return real.seek(*args)

        def close(self):
            real.close()

        def write(self, chunk):
            real.write(chunk[: len(chunk) // 2])
            real.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

    log._file = DiskFull()
    with pytest.raises(OSError, match="No space"):
        log.append({"type": "turn/end", "text": "lost" * 100})
    assert path.stat().st_size == size  # cut back to the last good frame
    assert log.append({"type": "turn/end", "text": "kept"}) == 1
    log.close()
    with FrameFile(path) as again:
        assert again.records() == [{"type": "turn/start"}, {"type": "turn/end", "text": "kept"}]
        assert again.truncated_bytes == 0


def test_a_file_that_is_not_a_log_is_refused(tmp_path):
    path = tmp_path / "other.txt"
    path.write_bytes(b"hello world, not a log")
    with pytest.raises(LogCorruptError, match="bad header"):
        FrameFile(path)


def test_the_fsync_policy_is_validated():
    with pytest.raises(ValueError, match="fsync must be"):
        FrameFile("/tmp/never-created.log", fsync="sometimes")


def test_events_are_validated_as_known_shapes_of_lossless_json():
    assert check_event({"type": "turn/start"}) == {"type": "turn/start"}
    with pytest.raises(InvalidEventError, match="unknown session event type"):
        check_event({"type": "tool/resul"})
    with pytest.raises(InvalidEventError, match="missing"):
        check_event({"type": "tool/result", "call_id": "c"})
    with pytest.raises(InvalidEventError, match="lossless JSON"):
        check_event({"type": "approval/policy", "policy": {1, 2}})


def test_derive_messages_rebuilds_the_history_and_hides_log_only_events():
    result = {"call_id": "c1", "content": [text_block("ok")], "is_error": False,
              "additional_context": [{"content": "note", "source": {"kind": "plugin", "plugin": "p"}}]}
    events = [
        {"type": "turn/start"},
        {"type": "user/message", "content": "hi"},
        {"type": "assistant/message", "content": "", "tool_calls": [{"call_id": "c1", "name": "echo"}]},
        {"type": "approval/asked", "id": "a", "tool_name": "echo"},
        {"type": "approval/decided", "id": "a", "outcome": "allowed-once"},
        tool_result_event({"text": "ok"}, "echo", result),
        {"type": "tool/code-dispatch", "parent_call_id": "c1", "sub_call_id": "c1:code:1", "name": "x",
         "arguments": {}, "is_error": False, "result_summary": "x"},
        context_message_event(result["additional_context"]),
        {"type": "turn/end"},
    ]
    messages = derive_messages(events)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "user"]
    assert messages[2]["content"] == [text_block("ok")] and messages[3]["content"] == "note"


def test_derive_messages_of_a_user_message_and_a_code_dispatch_is_one_message():
    assert len(derive_messages([
        {"type": "user/message", "content": "x"},
        {"type": "tool/code-dispatch", "parent_call_id": "p", "sub_call_id": "p:code:1", "name": "t",
         "arguments": {}, "is_error": False, "result_summary": ""},
    ])) == 1


def test_replay_renders_the_same_cards_from_the_log_every_time():
    shell = define_tool(
        name="shell", description="d", parameters={"command": {"type": "string", "required": True}},
        execute=lambda a, c: [],
        present_call=lambda args: {"card": "terminal", "title": args["command"]},
        present_result=lambda args, r: {"card": "terminal", "output": r["content"][0]["text"],
                                        "exit_code": r["meta"]["exit"]},
    )
    event = tool_result_event({"command": "ls"}, "shell", {"call_id": "1", "content": [text_block("a b")],
                                                           "is_error": False, "meta": {"exit": 0}})
    unknown = tool_result_event({}, "gone", {"call_id": "2", "content": [], "is_error": True})
    first = replay_cards([event, unknown], {"shell": shell})
    assert first == replay_cards([event, unknown], {"shell": shell})
    assert first[0] == {"call_id": "1", "name": "shell", "call": {"card": "terminal", "title": "ls"},
                        "result": {"card": "terminal", "output": "a b", "exit_code": 0}}
    assert first[1]["call"] is None and first[1]["result"] is None


@pytest.fixture
def fsyncs(monkeypatch):
    """Every ``os.fsync`` made while the test runs (each still syncs), by file descriptor."""
    import os

    made = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (made.append(fd), real(fd))[1])
    return made


def test_a_batch_is_written_in_order_under_one_fsync_and_reads_back_whole(tmp_path, fsyncs):
    path = tmp_path / "batch.log"
    with FrameFile(path) as log:
        before = len(fsyncs)
        assert log.append_many([{"n": 1}, {"n": 2}, {"n": 3}]) == [0, 1, 2]
        assert len(fsyncs) - before == 1  # one fsync covers the batch
    with FrameFile(path) as again:
        assert again.records() == [{"n": 1}, {"n": 2}, {"n": 3}]


@pytest.mark.parametrize("policy, syncs", [("always", 2), ("never", 1)])
def test_a_log_is_synced_once_per_write_its_policy_wants_and_closing_syncs_only_what_is_not(
        tmp_path, fsyncs, policy, syncs):
    path = tmp_path / "s.log"
    log = FrameFile(path, fsync=policy)  # a new file's header rides its first sync
    log.append({"type": "turn/start"})
    log.append({"type": "turn/end"})
    log.close()  # "always": nothing left to sync; "never": the one sync, here
    assert len(fsyncs) == syncs
    with FrameFile(path) as again:
        assert [e["type"] for e in again.records()] == ["turn/start", "turn/end"]
    assert path.read_bytes().startswith(HEADER)


def test_a_reopened_log_counts_as_unsynced_until_its_next_sync(tmp_path, fsyncs):
    """Whoever wrote it before may have died before syncing: under "never" the close syncs it."""
    path = tmp_path / "s.log"
    first = FrameFile(path, fsync="never")
    first.append({"type": "turn/start"})
    first._file.flush()  # its bytes in the page cache only: the writer dies here
    before = len(fsyncs)  # "never": none so far
    again = FrameFile(path, fsync="never")
    assert len(again) == 1
    again.close()
    assert before == 0 and len(fsyncs) == 1
    first._file.close()
