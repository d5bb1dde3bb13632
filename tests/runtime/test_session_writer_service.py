"""The session writer actor's class, driven without Ray: what it does beside the plain
writer's commits (closing what dead actors left open)."""

import pytest

from dsh_actors.log.writer import Close, Open

pytestmark = pytest.mark.timeout(30)


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
        ops = [Open(f"ep-{i}", str(tmp_path / f"ep-{i}.log"), "never", 0.05, "dead-runner") for i in range(5)]
        ops += [Open("driver", str(tmp_path / "driver.log"), "never", 0.05, None),
                Open("alive", str(tmp_path / "alive.log"), "never", 0.05, "live-runner")]
        await writer.commit_batch(ops)
        before = open_files()
        for _ in range(100):
            await asyncio.sleep(0.05)
            if open_files() == before - 5:
                break
        after, still = open_files(), [writer._core.is_open(s) for s in ("ep-0", "driver", "alive")]
        await writer.commit_batch([Close("driver"), Close("alive")])
        return before, after, still

    before, after, still_open = asyncio.run(scenario())
    assert before >= 7 and after == before - 5
    assert still_open == [False, True, True]
