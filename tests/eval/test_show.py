"""`dsh-actors show` on intact, torn and damaged logs: what it prints, what it says on
stderr, and its exit status (0 intact, 1 damaged in any way, 2 not a log at all)."""

import struct

import pytest

from dsh_actors.cli import main
from dsh_actors.log import HEADER, FrameFile, tool_result_event

T = 30


def write_log(path):
    with FrameFile(path) as log:
        log.append({"type": "user/message", "content": "list the files"})
        log.append(tool_result_event({"command": "ls"}, "bash", {"call_id": "c1", "content": [
            {"type": "text", "text": "a.txt\n"}], "is_error": False}))
        log.append({"type": "assistant/message", "content": "There is one file."})
    return path.read_bytes()


@pytest.mark.timeout(T)
def test_an_intact_log_is_shown_whole_and_exits_0(tmp_path, capsys):
    write_log(tmp_path / "s.log")
    assert main(["show", str(tmp_path / "s.log")]) == 0
    out, err = capsys.readouterr()
    assert "» user: list the files" in out and "« assistant: There is one file." in out and "bash" in out
    assert err == ""


@pytest.mark.timeout(T)
def test_a_torn_tail_is_shown_up_to_the_tear_said_on_stderr_and_exits_1(tmp_path, capsys):
    good = write_log(tmp_path / "s.log")
    (tmp_path / "s.log").write_bytes(good + struct.pack(">II", 50, 0) + b"short")
    assert main(["show", str(tmp_path / "s.log")]) == 1
    out, err = capsys.readouterr()
    assert "« assistant: There is one file." in out
    assert "a torn tail of 13 byte(s) after 3 event(s)" in err
    assert (tmp_path / "s.log").read_bytes() == good + struct.pack(">II", 50, 0) + b"short"  # show never repairs


@pytest.mark.timeout(T)
def test_damage_in_the_middle_shows_both_sides_and_exits_1(tmp_path, capsys):
    good = write_log(tmp_path / "s.log")
    first = len(HEADER) + 8 + int.from_bytes(good[len(HEADER):len(HEADER) + 4], "big")
    (tmp_path / "s.log").write_bytes(good[:first] + b"\x00\x00\x00\x09\x00\x00\x00\x07garbage!!" + good[first:])
    assert main(["show", str(tmp_path / "s.log")]) == 1
    out, err = capsys.readouterr()
    assert "» user: list the files" in out and "« assistant: There is one file." in out
    assert f"!! damaged bytes {first}-{first + 17}" in out and "recovered 1 event(s) before the damage and 2 after" in err


@pytest.mark.timeout(T)
def test_a_file_that_is_not_a_log_is_one_line_and_exits_2(tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("hello")
    assert main(["show", str(tmp_path / "notes.txt")]) == 2
    assert main(["show", str(tmp_path / "missing.log")]) == 2
    _, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 2 and "bad header" in lines[0] and "missing.log" in lines[1]


@pytest.mark.timeout(T)
def test_a_workspace_kept_on_another_node_is_named_with_its_node(tmp_path, capsys):
    (tmp_path / "logs").mkdir()
    (tmp_path / "reports").mkdir()
    write_log(tmp_path / "logs" / "e1.log")
    gone = tmp_path / "elsewhere" / "e1"  # not on this machine
    (tmp_path / "reports" / "e1.json").write_text(f'{{"id": "e1", "workspace": "{gone}", "node": "node-b"}}')
    assert main(["show", str(tmp_path / "logs" / "e1.log")]) == 0
    out, _ = capsys.readouterr()
    assert f"· workspace kept at {gone} (on node node-b, not here)" in out
    gone.mkdir(parents=True)  # now it is here
    assert main(["show", str(tmp_path / "logs" / "e1.log")]) == 0
    assert f"· workspace kept at {gone} (on this machine)" in capsys.readouterr().out
