"""Session logs on the node's shared writer: ordered, durable appends with group commit; a
killed writer loses nothing acknowledged."""

import asyncio
import time

import pytest
import ray

from dsh_actors.log import FrameFile, InvalidEventError
from dsh_actors.runtime.session.client import SessionLog

from .fixtures import pid_of, process_alive

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


def test_reading_back_its_own_appends_asks_no_actor_and_what_another_process_logged_is_read_in_order(
        ray_cluster, tmp_path):
    """An agent loop reads its log before every model turn: its own appends come from the
    client's memory; the writer is asked only from the first event another process added."""
    session_id = f"mirror-{time.monotonic_ns()}"
    log = SessionLog.open(session_id, str(tmp_path / "m.log"))
    asked = []
    ask = log._writer_call

    async def counted(method, *args):
        asked.append((method, *args))
        return await ask(method, *args)

    log._writer_call = counted
    log.append_many([{"type": "user/message", "content": "task"}, {"type": "turn/start"}]).result(T)
    assert log.known_events(0).result(T) == [{"type": "user/message", "content": "task"}, {"type": "turn/start"}]
    assert asked == []

    @ray.remote(num_cpus=0)
    def record_elsewhere(session_id):  # e.g. the approval queue logging an ask for this agent
        return SessionLog.find(session_id).append({"type": "approval/asked", "id": "r1", "tool_name": "t"}).result(T)

    assert ray.get(record_elsewhere.remote(session_id), timeout=T) == 2
    log.append({"type": "user/message", "content": "after"}).result(T)
    assert [e["type"] for e in log.known_events(2).result(T)] == ["approval/asked", "user/message"]
    assert asked == [("events", 2)]  # one read, from the first event this client did not append
    assert log.known_events(0).result(T) == log.events(0).result(T)  # the same as the writer's, from memory
    assert len(asked) == 2  # only events() asked
    log.close().result(T)


def _stream_then_kill(logs, kill, acknowledged_before_kill=50, after=100):
    """Append to every log in ``logs`` round-robin until ``acknowledged_before_kill``
    appends were acknowledged, kill the writer mid-stream, append ``after`` more. Returns
    ``{(log index, n): index or exception}``."""
    outcomes = {}

    async def one(k, n):
        try:
            outcomes[(k, n)] = await logs[k].append({"type": "approval/policy", "policy": f"p{n}"})
        except Exception as exc:  # noqa: BLE001 — recorded and checked
            outcomes[(k, n)] = exc

    async def scenario():
        tasks, n = [], 0
        while sum(isinstance(v, int) for v in outcomes.values()) < acknowledged_before_kill:
            tasks += [asyncio.ensure_future(one(k, n)) for k in range(len(logs))]
            n += 1
            await asyncio.sleep(0.001)
        kill()
        for _ in range(after):
            tasks += [asyncio.ensure_future(one(k, n)) for k in range(len(logs))]
            n += 1
            await asyncio.sleep(0.002)
        await asyncio.gather(*tasks)

    asyncio.run(scenario())
    return outcomes


def _check_acknowledged_are_on_disk(paths, outcomes):
    for k, path in enumerate(paths):
        with FrameFile(path) as on_disk:
            events = on_disk.records()
        mine = {n: seq for (kk, n), seq in outcomes.items() if kk == k and isinstance(seq, int)}
        for n, seq in mine.items():
            assert events[seq] == {"type": "approval/policy", "policy": f"p{n}"}
        written = [int(e["policy"][1:]) for e in events if e["type"] == "approval/policy"]
        assert written == sorted(written)  # in the order they were appended


def test_killing_the_writer_mid_stream_loses_nothing_that_was_acknowledged(ray_cluster, tmp_path):
    path = tmp_path / "crash.log"
    session = f"crash-{time.monotonic_ns()}"
    log = SessionLog.open(session, str(path), fsync="never")
    outcomes = _stream_then_kill([log], lambda: ray.kill(log._writer))
    failed = [v for v in outcomes.values() if not isinstance(v, int)]
    assert failed and all(getattr(v, "code", None) == "LOG_WRITE_FAILED" for v in failed)  # said, not hidden
    assert sum(isinstance(v, int) for v in outcomes.values()) > 50  # appends after the kill went on
    summary = log.close().result(T)  # its restarted writer opens it again to answer
    assert summary["by_type"]["approval/policy"] >= sum(isinstance(v, int) for v in outcomes.values())
    # Simulate the torn write a crash can leave, then reopen the session.
    with open(path, "ab") as raw:
        raw.write(b"\x00\x00\x01\x00\xde\xad")
    reopened = SessionLog.open(session + "-again", str(path))
    assert reopened.info().result(T)["recovered_truncated_bytes"] == 6
    reopened.close().result(T)
    _check_acknowledged_are_on_disk([path], outcomes)


def test_sigkilling_the_shared_writer_mid_batch_loses_no_acknowledged_event_of_any_agent(ray_cluster, tmp_path):
    """Twenty agents' logs on one writer, fsync "always": the writer's process is killed
    while group commits run; every event any agent was told is on disk is on disk, and
    the restarted writer takes the next appends (each session opened there again)."""
    import os
    import signal

    tag = time.monotonic_ns()
    paths = [tmp_path / f"agent-{k}.log" for k in range(20)]
    logs = [SessionLog.open(f"agent-{k}-{tag}", str(p)) for k, p in enumerate(paths)]
    writer = logs[0]._writer
    assert all(log._writer._actor_id == writer._actor_id for log in logs)  # one writer for the node
    pid = pid_of(writer, T)
    outcomes = _stream_then_kill(logs, lambda: os.kill(pid, signal.SIGKILL), acknowledged_before_kill=200,
                                 after=30)
    assert any(not isinstance(v, int) for v in outcomes.values())
    assert logs[3].append({"type": "turn/start"}).result(T) >= 1  # the restarted writer serves it
    new_pid = pid_of(writer, T)
    assert new_pid != pid
    for log in logs:
        log.close().result(T)
    _check_acknowledged_are_on_disk(paths, outcomes)


def test_fifty_agents_appending_at_once_each_get_their_own_file_in_order(ray_cluster, tmp_path):
    """Group commits mix many sessions' appends: each still lands in its own file, with
    its own indexes, in the order it was made."""
    tag = time.monotonic_ns()
    logs = [SessionLog.open(f"group-{k}-{tag}", str(tmp_path / f"g{k}.log")) for k in range(50)]

    async def burst():
        return await asyncio.gather(*(log.append({"type": "turn/start"}) for log in logs for _ in range(10)))

    indexes = asyncio.run(burst())
    assert sorted(indexes) == sorted(list(range(10)) * 50)
    for k in range(50):
        with FrameFile(tmp_path / f"g{k}.log") as on_disk:
            assert len(on_disk.records()) == 10
    for log in logs:
        log.close().result(T)


CREATOR = """
import sys
import ray
from dsh_actors.runtime.session.client import SessionLog

ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
log = SessionLog.open("creator", sys.argv[3], namespace=sys.argv[2])  # makes the node's writer
log.append({"type": "turn/start"}).result(60)
print("opened", flush=True)
sys.stdin.readline()  # until the test says go: then this driver ends
"""


def test_the_nodes_writer_outlives_the_driver_that_made_it(ray_cluster, tmp_path):
    """Two drivers share a node's writer; the one that happened to make it ends while the
    other still appends (a batch job finishing beside another)."""
    import subprocess
    import sys

    namespace = f"writer-owner-{time.monotonic_ns()}"  # a writer no earlier test made
    creator = subprocess.Popen([sys.executable, "-c", CREATOR, ray_cluster["cluster"].address, namespace,
                                str(tmp_path / "creator.log")], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True)
    try:
        assert creator.stdout.readline().strip() == "opened"
        log = SessionLog.open("survivor", str(tmp_path / "survivor.log"), namespace=namespace)
        assert log.append({"type": "turn/start"}).result(T) == 0
        writer = log._writer
        pid = ray.get(writer.__ray_call__.remote(lambda self: __import__("os").getpid()), timeout=T)
        creator.communicate("go\n", timeout=T)
        assert creator.returncode == 0
        time.sleep(2)  # Ray ends what a dead driver owned within about a second
        assert [log.append({"type": "turn/end"}).result(T) for _ in range(3)] == [1, 2, 3]
        assert ray.get(writer.__ray_call__.remote(lambda self: __import__("os").getpid()), timeout=T) == pid
        log.close().result(T)
    finally:
        creator.kill()
        try:  # a detached writer lives until killed: end this namespace's one
            ray.kill(ray.get_actor(f"dsh-session-writer:{ray.get_runtime_context().get_node_id()}",
                                   namespace=namespace))
        except ValueError:
            pass  # already gone


@ray.remote(num_cpus=0)
class _Holder:
    """An actor that opens a session's log and appends to it (as an episode runner does)."""

    def open(self, session_id, path):
        self.log = SessionLog.open(session_id, path)
        return self.log.append({"type": "user/message", "content": "first run"}).result(T)

    def pid(self):
        import os

        return os.getpid()


@pytest.mark.parametrize("kill", ["ray.kill", "SIGKILL"])
def test_a_session_left_open_by_a_dead_actor_opens_over_a_new_file_and_a_live_holder_keeps_it(
        ray_cluster, tmp_path, kill):
    import os
    import signal

    from dsh_actors.runtime.session.writer import SessionHeldError

    agent = f"reused-{kill}-{time.monotonic_ns()}"
    first, second = tmp_path / "first.log", tmp_path / "second.log"
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    live = _Holder.options(scheduling_strategy=here).remote()  # one node: one writer holds the session
    assert ray.get(live.open.remote(agent, str(first)), timeout=T) == 0
    with pytest.raises(SessionHeldError, match=f"^session '{agent}' is already open over .*still alive"):
        SessionLog.open(agent, str(second))  # its holder may still write there: refused, in our words
    if kill == "ray.kill":
        ray.kill(live, no_restart=True)
    else:
        os.kill(ray.get(live.pid.remote(), timeout=T), signal.SIGKILL)
    deadline = time.monotonic() + T
    while True:  # the holder's death reaches the GCS within moments
        try:
            again = SessionLog.open(agent, str(second))
            break
        except SessionHeldError:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    assert again.append({"type": "user/message", "content": "second run"}).result(T) == 0
    again.close().result(T)
    with FrameFile(first) as old, FrameFile(second) as new:
        assert len(old.records()) == 1 and len(new.records()) == 1  # each run in its own file
    held = SessionLog.open(agent, str(first))  # now by this driver, whose death nobody can tell
    with pytest.raises(SessionHeldError, match=f"^session '{agent}' is already open"):
        asyncio.run(SessionLog.open_async(agent, str(second)))
    held.close().result(T)


def test_a_session_is_found_by_id_from_another_node_and_still_after_its_writer_was_sigkilled(ray_cluster, tmp_path):
    """Where a session is open is what its writer says (nothing cluster-wide is written per
    session): found from a process on another node, and — from the notes its predecessor
    left — after the writer's process is killed, before the session's own client is back."""
    import os
    import signal

    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    session_id = f"found-{time.monotonic_ns()}"
    path = tmp_path / "found.log"
    log = SessionLog.open(session_id, str(path))
    log.append({"type": "turn/start"}).result(T)
    elsewhere = NodeAffinitySchedulingStrategy(ray_cluster["special_node"].node_id, soft=False)

    @ray.remote(num_cpus=0, scheduling_strategy=elsewhere)
    def record_from_another_node(session_id, n):
        found = SessionLog.find(session_id)
        if found is None:
            return None
        return ray.get_runtime_context().get_node_id(), found.append({"type": "user/message", "content": n}).result(T)

    node, index = ray.get(record_from_another_node.remote(session_id, "one"), timeout=T)
    assert node == ray_cluster["special_node"].node_id and index == 1
    writer = log._writer
    pid = pid_of(writer, T)
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + T
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    _, index = ray.get(record_from_another_node.remote(session_id, "two"), timeout=T)  # found in the notes
    assert index == 2
    assert log.append({"type": "user/message", "content": "three"}).result(T) == 3  # its own client is back too
    assert [e.get("content") for e in log.known_events(0).result(T)] == [None, "one", "two", "three"]
    log.close().result(T)
    assert ray.get(record_from_another_node.remote(session_id, "after"), timeout=T) is None  # closed: found nowhere
    assert SessionLog.find(session_id) is None
