"""The host against random and adversarial frames: it settles each run exactly once, with a
result, and stays usable — whatever bytes the child writes."""

import asyncio
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dsh_actors.codemode.channel import ChannelError, FrameReader, encode_frame
from dsh_actors.codemode.bounds import Ledger
from dsh_actors.codemode.contract import CodeRuntimeConfig
from dsh_actors.codemode.sandbox import SubprocessRuntime, settled

json_values = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.text(max_size=20) | st.binary(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                                        max_size=4), max_leaves=12)


@given(st.lists(st.binary(max_size=64), max_size=20))
def test_the_frame_decoder_returns_frames_or_one_channel_error_for_any_bytes(chunks):
    reader = FrameReader(max_frame=1024)
    try:
        for chunk in chunks:
            for frame in reader.feed(chunk):
                assert frame is not None or frame is None  # decoded values of any shape are returned
    except ChannelError as error:
        assert "frame" in str(error)


@given(st.lists(json_values, max_size=6), st.integers(min_value=1, max_value=7))
def test_frames_split_anywhere_decode_to_what_was_sent(messages, step):
    stream = b"".join(encode_frame({"t": "log", "v": m}) for m in messages)
    reader, got = FrameReader(max_frame=2**20), []
    for start in range(0, len(stream), step):
        got += reader.feed(stream[start:start + step])
    assert [f["v"] for f in got] == messages


def test_an_oversized_declared_length_is_a_channel_error_before_any_body_arrives():
    with pytest.raises(ChannelError, match="exceeds the 1024-byte limit"):
        FrameReader(max_frame=1024).feed(struct.pack(">I", 1025))


@given(json_values)
def test_only_a_well_formed_done_settles_and_a_forged_error_is_cut_to_the_byte_cap(message):
    result = settled({"t": "done", "value": message}, Ledger(100), 8)
    assert result is None if message is not None and not isinstance(message, str) else result is not None
    forged = settled({"t": "done", "value": "v", "error": {"kind": "exception", "message": "€€€€"}}, Ledger(100), 8)
    assert forged.value == "v" and forged.error.message == "€€"  # both reported; cut exactly, no marker
    assert settled({"t": "done", "error": {"kind": "pwned", "message": "x"}}, Ledger(100), 8) is None


@pytest.fixture(scope="module")
def runtime():
    rt = SubprocessRuntime(CodeRuntimeConfig(backend="cpython", compute_ms=3000, max_wall_ms=1500, max_log_bytes=2048,
                                             max_value_bytes=64))
    yield rt
    rt.close()


def raw_writer(payload: bytes) -> str:
    """A program that writes ``payload`` straight onto its frame channel, then waits."""
    return ("import os, sys\n"
            f"os.write(sys.modules['_child']._out[0], {payload!r})\n"
            "import time\ntime.sleep(30)\n")


ADVERSARIAL = {
    "a length far past the limit": (struct.pack(">I", 2**31) + b"x" * 10, "worker-exit"),
    "a body that is not msgpack": (struct.pack(">I", 3) + b"\xc1\xc1\xc1", "worker-exit"),
    "a map with non-string keys": (struct.pack(">I", 3) + b"\x81\x01\x01", "worker-exit"),
    "a done with a non-string value, then nothing": (encode_frame({"t": "done", "value": 5}), "timeout"),
    "a done with an unknown error kind": (encode_frame({"t": "done", "error": {"kind": "escape"}}), "timeout"),
    "a reply-shaped frame from the child": (encode_frame({"t": "reply", "id": 1, "ok": True}), "timeout"),
    "a well-formed forged done": (encode_frame({"t": "done", "value": "v", "error": {"kind": "abort", "message": "m" * 200}}),
                                  "abort"),
}


@pytest.mark.parametrize("case", list(ADVERSARIAL))
def test_an_adversarial_frame_ends_the_run_with_one_coded_result(runtime, case):
    payload, kind = ADVERSARIAL[case]
    result = asyncio.run(runtime.run(raw_writer(payload), {}))
    assert result.error is not None and result.error.kind == kind, result
    if kind == "abort":
        assert result.value == "v" and result.error.message == "m" * 64
    assert asyncio.run(runtime.run("return 'next'", {})).value == "next"


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(min_size=1, max_size=512))
def test_random_bytes_on_the_channel_always_end_in_one_result(runtime, payload):
    result = asyncio.run(runtime.run(raw_writer(payload), {}))
    assert isinstance(result.logs, list)
    assert result.error is not None or isinstance(result.value, (str, type(None)))


def test_a_frame_of_a_million_empty_maps_is_refused_before_it_is_built():
    import msgpack

    body = msgpack.packb({"t": "log", "text": [{} for _ in range(1_000_000)]})
    with pytest.raises(ChannelError, match="more than 64 maps and arrays"):
        FrameReader(max_frame=len(body) + 10).feed(struct.pack(">I", len(body)) + body)


def test_a_program_longer_than_the_reply_cap_still_runs():
    rt = SubprocessRuntime(CodeRuntimeConfig(backend="cpython", max_result_bytes=16 * 1024), warm_spare=False)
    try:
        program = "x = 1\n" * 50_000 + "return x"  # 300 KB of program, against 2 x 16 KiB of replies
        assert asyncio.run(rt.run(program, {})).value == "1"
    finally:
        rt.close()


def test_a_system_call_of_another_abi_ends_the_program_at_once_not_at_the_wall_ceiling():
    import time

    rt = SubprocessRuntime(CodeRuntimeConfig(backend="cpython", max_wall_ms=20_000), warm_spare=False)
    try:
        started = time.monotonic()
        # an x32 system call (getpid | __X32_SYSCALL_BIT) from the main thread
        result = asyncio.run(rt.run("import ctypes\nctypes.CDLL(None).syscall(0x40000000 | 39)\nreturn 1", {}))
        assert result.error is not None and result.error.kind == "worker-exit", result
        assert time.monotonic() - started < 10
    finally:
        rt.close()


def test_forged_call_frames_cannot_drop_delay_or_answer_the_programs_real_calls():
    """The program writes call frames of its own before and between its real calls: a
    very high id, the ids a counter would give next, and a duplicate of one of them. Each
    forged call runs (it is what a call of the program's would do) and its reply is never
    taken for a real one; every real call is answered at once with its own value."""
    forged_ids = [2**62, 1, 2, 3, 4, 5, 3]
    program = ("import sys, time\n"
               "child = sys.modules['_child']\n"
               f"for i in {forged_ids!r}:\n"
               "    child._send({'t': 'call', 'id': i, 'name': 'slow', 'json': '{\"n\": ' + str(i) + '}'})\n"
               "first = await tools.echo(text='one')\n"
               "child._send({'t': 'call', 'id': 2**62 + 1, 'name': 'slow', 'json': '{\"n\": -1}'})\n"
               "second = await tools['echo']({'text': 'two'})\n"
               "return [first, second]")
    forged, released = [], asyncio.Event()

    async def slow(args):
        forged.append(args["n"])
        await released.wait()
        return f"forged {args['n']}"

    async def echo(args):
        if args["text"] == "two":
            released.set()
        return f"echo:{args['text']}"

    rt = SubprocessRuntime(CodeRuntimeConfig(backend="cpython", compute_ms=3000, max_wall_ms=20_000), warm_spare=False)
    try:
        result = asyncio.run(rt.run(program, {"slow": slow, "echo": echo}))
    finally:
        rt.close()
    assert result.error is None and result.value == "['echo:one', 'echo:two']", result
    assert sorted(forged) == [-1, 1, 2, 3, 4, 5, 2**62]  # the in-flight duplicate of 3 was dropped
