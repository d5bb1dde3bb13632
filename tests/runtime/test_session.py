"""The session log actor: ordered, durable appends; a crash mid-append loses nothing committed."""

import asyncio
import time

import pytest
import ray

from dsh_actors.log import FrameFile, InvalidEventError
from dsh_actors.runtime.session import SessionLog

T = 60


def test_appends_are_ordered_durable_and_derive_the_history(ray_cluster, tmp_path):
    path = tmp_path / "s1.log"
    log = SessionLog.open(f"s1-{time.monotonic_ns()}", str(path))
    assert log.append({"type": "user/message", "content": "hi"}).result(T) == 0
    assert log.append_many([{"type": "turn/start"}, {"type": "turn/end"}]).result(T) == [1, 2]
    with pytest.raises(InvalidEventError, match="unknown session event type"):
        log.append({"type": "bogus"}).result(T)
    assert log.derive_messages().result(T) == [{"role": "user", "content": "hi"}]
    with FrameFile(path) as on_disk:  # already on disk: fsync "always" before each append returned
        assert len(on_disk.records()) == 3
    log.close().result(T)


def test_killing_the_log_actor_mid_append_loses_nothing_that_was_acknowledged(ray_cluster, tmp_path):
    path = tmp_path / "crash.log"
    session = f"crash-{time.monotonic_ns()}"
    log = SessionLog.open(session, str(path), fsync="never")

    async def scenario():
        calls = [asyncio.ensure_future(log.append({"type": "approval/policy", "policy": f"p{i}"}))
                 for i in range(3000)]
        while sum(c.done() for c in calls) < 50:
            await asyncio.sleep(0.005)
        ray.kill(log._handle())
        return await asyncio.gather(*calls, return_exceptions=True)

    outcomes = asyncio.run(scenario())
    acknowledged = {i: seq for i, seq in enumerate(outcomes) if isinstance(seq, int)}
    assert 50 <= len(acknowledged) < 3000  # killed mid-stream (appends run at ~1.6k/s)
    # Simulate the torn write a crash can leave, then reopen the session.
    with open(path, "ab") as raw:
        raw.write(b"\x00\x00\x01\x00\xde\xad")
    reopened = SessionLog.open(session + "-again", str(path))
    info = reopened.info().result(T)
    events = reopened.events().result(T)
    assert info["recovered_truncated_bytes"] == 6
    for i, seq in acknowledged.items():
        assert events[seq] == {"type": "approval/policy", "policy": f"p{i}"}
    assert [e["policy"] for e in events] == sorted((e["policy"] for e in events), key=lambda p: int(p[1:]))
    reopened.close().result(T)
