"""Each agent of a registry as an MCP server on Ray Serve, asked by the official `mcp`
client over real HTTP: its own tools, the registry's whole pipeline on every call, an ask
answered from the approval queue, a replica killed. Judged from outside: files the tool
bodies write, the client's own view of the results."""

import asyncio
import json
import os
import signal
import time
import uuid

import pytest

pytest.importorskip("ray.serve")

import ray  # noqa: E402

from dsh_actors import ToolRegistry, ask, define_tool  # noqa: E402
from dsh_actors.log import read_records  # noqa: E402
from tests.ports import free_port  # noqa: E402

pytestmark = pytest.mark.timeout(300)

T = 60


def _tools(folder):
    def add(args, ctx):
        return [{"type": "text", "text": str(int(args["a"] + args["b"]))}]

    def write(args, ctx):
        with open(f"{folder}/{args['name']}", "w") as out:
            out.write(ctx.agent or "")
        return {"content": [{"type": "text", "text": "written"}], "meta": {"structured_content": {"bytes": 1}}}

    def slow(args, ctx):  # a plain body, in a thread: only its signal can tell it to stop
        (folder / f"{args['name']}.started").write_text("")
        for _ in range(400):
            if ctx.signal is not None and ctx.signal.aborted:
                (folder / f"{args['name']}.aborted").write_text(str(ctx.signal.reason))
                return [{"type": "text", "text": "stopped"}]
            time.sleep(0.05)
        (folder / f"{args['name']}.finished").write_text("")
        return [{"type": "text", "text": "finished"}]

    async def nap(args, ctx):  # one line per run of each name: a call run twice shows
        with open(folder / f"nap-{args['name']}", "a") as out:
            out.write("ran\n")
        await asyncio.sleep(1.5)
        return [{"type": "text", "text": args["name"]}]

    async def steps(args, ctx):  # reports its progress: heard only by a client that asked for it
        heard = [ctx.report_progress(k, 3, f"step {k}") for k in (1, 2)]
        await asyncio.sleep(0.2)
        heard.append(await asyncio.to_thread(lambda: ctx.report_progress(3, 3, "from a thread")))
        return [{"type": "text", "text": json.dumps(heard)}]

    def counts(args, ctx):  # a plain body, on the executor's threads
        return [{"type": "text", "text": json.dumps([ctx.report_progress(k) for k in range(1, 4)])}]

    return [
        define_tool(name="steps", description="Three steps, reported.", parameters={}, execute=steps),
        define_tool(name="counts", description="Count to three, reported.", parameters={}, execute=counts),
        define_tool(name="nap", description="Sleep 1.5 s.", parameters={"name": {"type": "string"}}, execute=nap),
        define_tool(name="slow", description="Take 20 s unless aborted.", parameters={"name": {"type": "string"}},
                    execute=slow),
        define_tool(name="add", description="Add two integers.", parameters={"a": {"type": "number"}, "b": {"type": "number"}}, execute=add,
                    extras={"read_only": True, "idempotent": True}),
        define_tool(name="write", description="Write a marker file.", parameters={"name": {"type": "string"}}, execute=write,
                    extras={"destructive": False}),
    ]


def _node_of(args, ctx):
    return [{"type": "text", "text": ray.get_runtime_context().get_node_id()}]


_where = define_tool(name="where", description="Say the node this call ran on (the special one's resource).",
                     parameters={}, execute=_node_of, extras={"ray_options": {"resources": {"dsh_special": 1}}})
"""Only agent ``placed`` sees it (a tool of its scope)."""


async def _far_steps(args, ctx):
    return [{"type": "text", "text": json.dumps([os.getpid(), [ctx.report_progress(k, 2) for k in (1, 2)]])}]


_far = define_tool(name="far-steps", description="Two steps, reported from a Ray task of its own.", parameters={},
                   execute=_far_steps, extras={"ray_options": {"num_cpus": 0}})
"""Only agent ``watcher`` sees it (a tool of its scope)."""


def _asks_for_askers(execution, call_next):
    return ask("the asker's writes need a human") if execution.agent == "asker" else call_next()


def _connect(name, **options):
    """A registry connected as ``dsh-actors serve`` connects its own: every agent's scope on
    the registry's shared scope hosts (a gateway's agents come and go; a host of its own
    each would be a process per agent, and the module's tests name about thirty)."""
    return ToolRegistry.connect(name, scope_hosting="shared", **options)


@pytest.fixture(scope="module")
def gateway(ray_cluster, tmp_path_factory):
    """One registry and one gateway (two replicas, one per node) for the module: Serve
    starts in seconds, and a registry and its processes cost several CPU-seconds each."""
    from dsh_actors.serve import GatewayConfig, serve_mcp, stop_mcp

    name, folder = f"mcp-{uuid.uuid4().hex[:8]}", tmp_path_factory.mktemp("marks")
    registry = _connect(name)
    for definition in _tools(folder):
        registry.register(definition).result(T)
    registry.scope("reader").restrict(deny=["write"]).result(T)
    registry.scope("placed").register(_where).result(T)
    registry.scope("watcher").register(_far).result(T)
    registry.on("tools/pre-execute", _asks_for_askers).result(T)
    queue = registry.approvals().result(T)
    url = serve_mcp(GatewayConfig(name, logs=str(folder / "logs")), port=free_port(), num_replicas=2,
                    max_replicas_per_node=1)  # one on each of the session's nodes
    try:
        yield folder, queue, url, registry
    finally:
        try:
            stop_mcp(shutdown_serve=True)
        finally:
            registry.shutdown()


async def _session(url, agent, work):
    from mcp import Client

    async with Client(url.format(agent=agent)) as client:
        return await work(client)


def _ask(url, agent, work):
    return asyncio.run(_session(url, agent, work))


def test_each_agent_lists_its_own_tools_with_their_hints(gateway):
    _, _, url, _ = gateway

    async def listed(client):
        return {t.name: t for t in (await client.list_tools()).tools}

    writer, reader = _ask(url, "writer", listed), _ask(url, "reader", listed)
    assert sorted(writer) == ["add", "counts", "nap", "slow", "steps", "write"]
    assert sorted(reader) == ["add", "counts", "nap", "slow", "steps"]  # the reader's restriction holds
    add = writer["add"]
    assert add.description == "Add two integers."
    assert add.input_schema["type"] == "object" and set(add.input_schema["properties"]) == {"a", "b"}
    assert add.annotations.read_only_hint is True and add.annotations.idempotent_hint is True
    assert writer["write"].annotations.destructive_hint is False


def test_a_call_through_the_gateway_runs_where_its_tool_declares_its_resources(gateway, ray_cluster):
    """The session's cluster has two nodes; only the second has ``dsh_special``."""
    _, _, url, _ = gateway

    async def called(client):
        return await client.call_tool("where", {})

    ran = _ask(url, "placed", called)
    assert ran.is_error is False and [b.text for b in ran.content] == [ray_cluster["special_node"].node_id]


def test_a_call_runs_the_pipeline_as_the_agent_and_its_result_keeps_the_code(gateway):
    marks, _, url, _ = gateway

    async def calls(client):
        return (await client.call_tool("add", {"a": 2, "b": 3}),
                await client.call_tool("add", {"a": "two"}),
                await client.call_tool("write", {"name": "by-writer"}),
                await client.call_tool("nope", {}))

    added, invalid, written, unknown = _ask(url, "writer", calls)
    assert [b.text for b in added.content] == ["5"] and added.is_error is False
    # Each call is in the agent's session log, once, as the batch job records a step's calls.
    logged = [e for e in read_records(marks / "logs" / "writer.log") if e["type"] == "tool/result"]
    assert [(e["call_id"], e["name"], e["is_error"]) for e in logged] == [
        (r.meta["dsh"]["call_id"], name, r.is_error)
        for r, name in ((added, "add"), (invalid, "add"), (written, "write"), (unknown, "nope"))]
    assert logged[0]["arguments"] == {"a": 2, "b": 3}
    assert added.meta["dsh"]["call_id"].startswith("mcp-")
    assert invalid.is_error is True and invalid.meta["dsh"]["error"]["code"] == "INVALID_ARGS"
    assert written.structured_content == {"bytes": 1}
    assert (marks / "by-writer").read_text() == "writer"  # the body ran, as that agent
    assert unknown.is_error is True and unknown.meta["dsh"]["error"]["code"] == "UNKNOWN_TOOL"

    async def refused(client):
        return await client.call_tool("write", {"name": "by-reader"})

    denied = _ask(url, "reader", refused)
    assert denied.is_error is True and not (marks / "by-reader").exists()  # its restriction is a wall


def test_an_ask_waits_for_the_approval_queue_and_a_rejection_runs_nothing(gateway):
    marks, queue, url, _ = gateway

    async def answered(client):
        async def answer(verdict):
            deadline = time.monotonic() + T
            while time.monotonic() < deadline:
                pending = await queue.pending()
                if pending:
                    return await (queue.allow(pending[0]["id"]) if verdict == "allow" else queue.reject(pending[0]["id"]))
                await asyncio.sleep(0.1)
            raise AssertionError("no ask reached the queue")

        allowed = await asyncio.gather(client.call_tool("write", {"name": "allowed"}), answer("allow"))
        rejected = await asyncio.gather(client.call_tool("write", {"name": "rejected"}), answer("reject"))
        return allowed[0], rejected[0]

    allowed, rejected = _ask(url, "asker", answered)
    assert allowed.is_error is False and (marks / "allowed").read_text() == "asker"
    assert rejected.is_error is True and not (marks / "rejected").exists()


def _listening(url):
    """The sockets listening on the gateway's port (inodes, from /proc/net/tcp): one per
    replica that takes connections. Seen from outside: Serve's status may still call a
    killed replica running for a while."""
    port = int(url.split(":")[2].split("/")[0])
    with open("/proc/net/tcp") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return {row[9] for row in rows if row[3] == "0A" and int(row[1].split(":")[1], 16) == port}


def _processes_holding(sockets):
    """The processes holding any of ``sockets`` (inodes), from /proc."""
    held = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            links = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        except OSError:
            continue
        if links & {f"socket:[{inode}]" for inode in sockets}:
            held.add(int(pid))
    return held


def _replicas_running(url, count=2, gone=frozenset()):
    """Wait until ``count`` replicas listen on the gateway's port, none of them one of the
    ``gone`` sockets (those of replicas just killed). Each replica listens itself, so one
    Serve is still starting takes no connection yet: a test that kills one waits first."""
    deadline = time.monotonic() + T
    while time.monotonic() < deadline:
        now = _listening(url)
        if len(now) == count and not now & gone:
            return now
        time.sleep(0.2)
    raise AssertionError(f"{count} replicas did not listen in {T} s: {_listening(url)} (gone: {gone})")


def test_a_killed_replica_is_replaced_and_the_gateway_keeps_answering(gateway):
    _, _, url, _ = gateway
    _replicas_running(url)
    replicas = [a for a in ray.util.list_named_actors(all_namespaces=True)
                if "dsh-mcp" in a["name"] and "McpGateway" in a["name"]]
    assert len(replicas) == 2
    victim = ray.get_actor(replicas[0]["name"], namespace=replicas[0]["namespace"])
    before = _listening(url)
    ray.kill(victim, no_restart=True)
    # ray.kill returns before the process is gone: a connection the victim accepts until then
    # dies with it (its own calls). Once its socket is gone, the survivor takes every one.
    deadline = time.monotonic() + T
    while len(_listening(url) & before) > 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_listening(url) & before) == 1

    async def add(client):
        return await client.call_tool("add", {"a": 20, "b": 22})

    answers = [_ask(url, f"agent-{k}", add) for k in range(6)]  # the survivor answers meanwhile
    assert all([b.text for b in a.content] == ["42"] for a in answers)
    deadline = time.monotonic() + T
    while time.monotonic() < deadline:
        names = {a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                 if "dsh-mcp" in a["name"] and "McpGateway" in a["name"]}
        if len(names) == 2 and replicas[0]["name"] not in names:
            break
        time.sleep(0.5)
    assert len(names) == 2 and replicas[0]["name"] not in names  # Serve made a new one


def _answering(allow):
    """An elicitation callback answering every ask: allow (True), refuse (False) or decline (None)."""
    import mcp_types as types

    seen = []

    async def answer(context, params):
        seen.append(params.message)
        if allow is None:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"allow": allow})

    return answer, seen


def test_an_ask_is_put_to_a_client_that_answers_through_the_protocol(gateway):
    from mcp import Client

    marks, queue, url, _ = gateway

    async def calls():
        results = {}
        for allow, name in ((True, "elicited-yes"), (False, "elicited-no"), (None, "elicited-decline")):
            answer, seen = _answering(allow)
            async with Client(url.format(agent="asker"), elicitation_callback=answer) as client:
                results[name] = (await client.call_tool("write", {"name": name}), seen)
        return results

    results = asyncio.run(calls())
    allowed, seen = results["elicited-yes"]
    assert seen == ['Agent "asker" asks to run tool "write": the asker\'s writes need a human. Allow this call once?']
    assert allowed.is_error is False and (marks / "elicited-yes").read_text() == "asker"
    for name in ("elicited-no", "elicited-decline"):
        refused, seen = results[name]
        assert len(seen) == 1 and refused.is_error is True and not (marks / name).exists()
    assert queue.pending().result(T) == []  # nothing left waiting in the queue
    # The session log holds each decision, as for an ask answered from the queue.
    decided = [e["outcome"] for e in read_records(marks / "logs" / "asker.log") if e["type"] == "approval/decided"]
    assert decided[-3:] == ["allowed-once", "rejected", "rejected"]


def test_an_asked_calls_progress_reaches_the_client_while_its_answer_waits_for_the_result(gateway):
    """The body of an asked call runs only once the client's answer has come back (on a
    request of its own, maybe to another replica): what it reports then reaches that request's
    progress callback, in order, before the result."""
    from mcp import Client

    _, _, url, _ = gateway
    answer, seen = _answering(True)
    heard = []

    async def note(progress, total, message):
        heard.append((progress, total, message))

    async def call():
        async with Client(url.format(agent="asker"), elicitation_callback=answer) as client:
            return await client.call_tool("steps", {}, progress_callback=note)

    result = asyncio.run(call())
    assert len(seen) == 1 and result.is_error is False
    assert json.loads(result.content[0].text) == [True, True, True]
    assert heard == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "from a thread")]


def test_the_answer_may_come_back_on_another_connection_and_a_forged_or_moved_state_is_refused(gateway):
    import mcp_types as types
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    marks, _, url, _ = gateway
    yes = {"approval": types.ElicitResult(action="accept", content={"allow": True})}

    answer, seen = _answering(True)  # declares form elicitation; the round trip is driven by hand here

    async def work():
        async with Client(url.format(agent="asker"), elicitation_callback=answer) as first:
            asked = await first.session.call_tool("write", {"name": "later"}, allow_input_required=True)
        assert isinstance(asked, types.InputRequiredResult), asked  # the call is held meanwhile
        state, refusals = asked.request_state, []
        async with Client(url.format(agent="asker")) as second:  # a new connection: any replica
            for arguments, sealed in (({"name": "later"}, state[:-6] + "AAAAAA"),  # forged
                                      ({"name": "elsewhere"}, state)):  # another call's arguments
                with pytest.raises(MCPError) as refused:
                    await second.session.call_tool("write", arguments, request_state=sealed, input_responses=yes)
                refusals.append(refused.value.error.message)
            async with Client(url.format(agent="writer")) as third:  # another agent's endpoint
                with pytest.raises(MCPError) as moved:
                    await third.session.call_tool("write", {"name": "later"}, request_state=state, input_responses=yes)
            done = await second.session.call_tool("write", {"name": "later"}, request_state=state, input_responses=yes)
            with pytest.raises(MCPError) as again:  # one answer per ask
                await second.session.call_tool("write", {"name": "later"}, request_state=state, input_responses=yes)
        return refusals, moved.value.error.message, done, again.value.error.message

    refusals, moved, done, again = asyncio.run(work())
    assert seen == []
    assert refusals == ["Invalid or expired requestState"] * 2
    assert 'belongs to agent "asker"' in moved
    assert done.is_error is False and (marks / "later").read_text() == "asker"
    assert "no call waits for this answer" in again


def test_a_held_call_dies_with_its_replica_and_its_ask_with_it(gateway):
    """The replica holding an asked call for its client is killed: the ask is cancelled
    (nobody may allow a call whose result nobody will see), and the client's answer gets
    one coded error, on whichever replica Serve brings up instead."""
    import mcp_types as types
    from mcp import Client

    marks, queue, url, _ = gateway
    answer, _ = _answering(True)

    async def ask_then_answer():
        async with Client(url.format(agent="asker"), elicitation_callback=answer) as client:
            asked = await client.session.call_tool("write", {"name": "orphan"}, allow_input_required=True)
        assert isinstance(asked, types.InputRequiredResult), asked
        assert [p["tool_name"] for p in await queue.pending()] == ["write"]
        killed = _listening(url)
        for replica in ray.util.list_named_actors(all_namespaces=True):
            if "dsh-mcp" in replica["name"] and "McpGateway" in replica["name"]:
                ray.kill(ray.get_actor(replica["name"], namespace=replica["namespace"]), no_restart=True)
        deadline = time.monotonic() + T
        while await queue.pending() and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert await queue.pending() == []  # cancelled: its holder is gone
        await asyncio.to_thread(_replicas_running, url, 2, killed)  # nobody listens until Serve replaced them
        async with Client(url.format(agent="asker"), elicitation_callback=answer) as client:
            return await client.session.call_tool("write", {"name": "orphan"}, request_state=asked.request_state,
                                                  input_responses={"approval": types.ElicitResult(
                                                      action="accept", content={"allow": True})})

    late = asyncio.run(ask_then_answer())
    assert late.is_error is True and late.meta["dsh"]["error"]["code"] == "WORKER_CRASHED"
    assert not (marks / "orphan").exists()  # allowed by nobody, run by nobody


def _post(url, body, **headers):
    import httpx2

    base = {"content-type": "application/json", "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2026-07-28", "mcp-method": body["method"], "mcp-name": body["params"].get("name", "")}
    with httpx2.Client(timeout=T) as http:
        return http.post(url, json=body, headers={**base, **headers})


def _tools_call(name, arguments, capabilities):
    return {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
        "name": name, "arguments": arguments,
        "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                  "io.modelcontextprotocol/clientCapabilities": capabilities}}}


def test_the_gateways_own_answer_to_a_call_is_the_sdks_and_what_the_sdk_refuses_it_refuses(gateway):
    """A call the front answers itself (a client that cannot answer asks) and the same call
    answered by the SDK's server (a client that declares elicitation) are the same JSON,
    but for the call's id; a request the SDK would refuse is refused as the SDK refuses it."""
    _, _, url, _ = gateway
    url = url.format(agent="wire")
    front = _post(url, _tools_call("add", {"a": 1, "b": 2}, {}))
    sdk = _post(url, _tools_call("add", {"a": 1, "b": 2}, {"elicitation": {"form": {}}}))
    assert front.status_code == sdk.status_code == 200
    assert front.headers["content-type"] == sdk.headers["content-type"] == "application/json"
    mine, theirs = front.json(), sdk.json()
    assert mine["result"]["_meta"]["dsh"].pop("call_id") != theirs["result"]["_meta"]["dsh"].pop("call_id")
    assert mine == theirs and mine["result"]["content"] == [{"type": "text", "text": "3"}]
    assert mine["result"]["resultType"] == "complete" and "io.modelcontextprotocol/serverInfo" in mine["result"]["_meta"]
    # The SDK's refusals, whichever path the request would have taken.
    mismatch = _post(url, _tools_call("add", {"a": 1, "b": 2}, {}), **{"mcp-name": "write"})
    assert mismatch.status_code == 400 and mismatch.json()["error"]["code"] == -32020
    assert _post(url, _tools_call("add", {"a": 1, "b": 2}, {}), host="evil.example").status_code == 421
    assert _post(url, _tools_call("add", {"a": 1, "b": 2}, {}), accept="text/html").status_code == 406
    bad = _post(url, _tools_call("add", "not an object", {}))
    assert bad.status_code == 400 and bad.json()["error"]["code"] == -32602
    nobody = _post(url.replace("/agents/wire/", "/agents/no%20such%20agent/"), _tools_call("add", {"a": 1, "b": 2}, {}))
    assert nobody.status_code == 400 and "no agent in the endpoint" in nobody.json()["error"]["message"]


def test_a_client_that_asks_for_progress_hears_each_report_of_the_body_then_its_result(gateway):
    """The official client's progress callback hears what the body reports (from its
    coroutine, a thread it starts, a plain body on a worker thread, and a body in a Ray task
    of its own), in order, then gets the result; a client that did not ask gets the result alone, the body told that
    nobody listens."""
    from mcp import Client

    _, _, url, _ = gateway

    async def calls():
        heard = {"steps": [], "counts": [], "far-steps": []}
        async with Client(url.format(agent="watcher")) as client:
            results = {}
            for tool in heard:
                async def note(progress, total, message, tool=tool):
                    heard[tool].append((progress, total, message))
                results[tool] = await client.call_tool(tool, {}, progress_callback=note)
            results["unheard"] = await client.call_tool("steps", {})
        return heard, results

    heard, results = asyncio.run(calls())
    assert heard["steps"] == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "from a thread")]
    assert heard["counts"] == [(1, None, None), (2, None, None), (3, None, None)]
    assert json.loads(results["steps"].content[0].text) == [True, True, True]
    assert json.loads(results["counts"].content[0].text) == [True, True, True]
    far_pid, far_heard = json.loads(results["far-steps"].content[0].text)
    assert heard["far-steps"] == [(1, 2, None), (2, 2, None)] and far_heard == [True, True]
    replicas = _processes_holding(_listening(url))
    assert replicas and far_pid not in replicas  # its own task, not a replica
    assert not results["steps"].is_error
    assert json.loads(results["unheard"].content[0].text) == [False, False, False]


@pytest.mark.parametrize("client", ["answers asks", "legacy revision"])
def test_progress_reaches_a_client_whose_calls_the_sdk_answers(gateway, client):
    """A client the front leaves to the SDK — one that answers asks (its calls may become
    questions), or one of an older protocol revision — hears the body's reports as well,
    through the SDK's event-stream face, and gets the same result."""
    from mcp import Client

    _, _, url, _ = gateway
    options = {"elicitation_callback": _answering(True)[0]} if client == "answers asks" else {"mode": "legacy"}

    async def call():
        heard = []

        async def note(progress, total, message):
            heard.append((progress, total, message))

        async with Client(url.format(agent="watcher"), **options) as session:
            result = await session.call_tool("steps", {}, progress_callback=note)
            unheard = await session.call_tool("steps", {})
        return heard, result, unheard

    heard, result, unheard = asyncio.run(call())
    assert heard == [(1, 3, "step 1"), (2, 3, "step 2"), (3, 3, "from a thread")]
    assert json.loads(result.content[0].text) == [True, True, True]
    assert json.loads(unheard.content[0].text) == [False, False, False]


def test_a_client_that_gives_up_on_a_call_aborts_it_through_its_signal(gateway):
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    marks, _, url, _ = gateway

    async def give_up():
        # Give up once the tool has started (not after a fixed time: on a loaded machine the
        # call may not have reached the tool yet), then leave: the connection is dropped.
        async with Client(url.format(agent="quitter")) as client:
            call = asyncio.ensure_future(client.call_tool("slow", {"name": "given-up"}, read_timeout_seconds=T))
            deadline = time.monotonic() + T
            while not (marks / "given-up.started").exists() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            call.cancel()
            with pytest.raises((asyncio.CancelledError, MCPError)):
                await call

    asyncio.run(give_up())
    deadline = time.monotonic() + T
    while not (marks / "given-up.aborted").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert (marks / "given-up.started").exists()
    assert "cancelled" in (marks / "given-up.aborted").read_text()  # its signal said why
    time.sleep(1)
    assert not (marks / "given-up.finished").exists()


def test_the_registrys_abort_of_an_agents_calls_reaches_those_running_in_a_replica(gateway):
    """``abort_agents`` (an episode's dead attempt, before its rerun) stops an agent's calls
    running in the gateway's replicas as it stops those on its executors: the client gets
    one ``CANCELLED`` result, the body on a thread hears it through its signal, and another
    agent's call goes on."""
    from mcp import Client

    marks, _, url, registry = gateway

    async def aborted():
        async with Client(url.format(agent="doomed")) as doomed, Client(url.format(agent="spared")) as spared:
            calls = [asyncio.ensure_future(doomed.call_tool("slow", {"name": "doomed"}, read_timeout_seconds=T)),
                     asyncio.ensure_future(spared.call_tool("nap", {"name": "spared"}, read_timeout_seconds=T))]
            deadline = time.monotonic() + T
            while not (marks / "doomed.started").exists() and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            count = await registry.abort_agents(["doomed"], "its episode runs again")
            return count, await asyncio.gather(*calls)

    count, (doomed, spared) = asyncio.run(aborted())
    assert count == 1
    assert doomed.is_error and doomed.meta["dsh"]["error"]["code"] == "CANCELLED", doomed
    assert not spared.is_error and spared.content[0].text == "spared"
    deadline = time.monotonic() + T
    while not (marks / "doomed.aborted").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "cancelled" in (marks / "doomed.aborted").read_text()
    assert not (marks / "doomed.finished").exists()


def _leaf(exc):
    """What failed, under any exception groups (the client's task groups wrap it)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {str(exc)[:120]}"


@pytest.mark.parametrize("kill", ["ray.kill", "SIGKILL"])
def test_a_replica_killed_with_100_calls_in_flight_costs_only_its_own_calls(gateway, kill):
    """Each of 100 calls gets one answer — its result, or an error for the calls the dead
    replica held — and no call runs twice (Serve does not resend them), whether Ray ends
    the replica or its process is killed under it."""
    from mcp import Client

    marks, _, url, _ = gateway
    _replicas_running(url)  # both listening, so the survivor's calls are its own
    for old in marks.glob("nap-n*"):  # (the other kill's run)
        old.unlink()

    async def hundred():
        async def one(k):
            try:
                async with Client(url.format(agent=f"napper-{k % 10}")) as client:
                    result = await client.call_tool("nap", {"name": f"n{k}"})
                return "ok" if not result.is_error and result.content[0].text == f"n{k}" else f"error: {result}"
            except Exception as exc:  # noqa: BLE001 - the dead replica's calls: the client's own failure
                return f"failed: {_leaf(exc)}"

        calls = [asyncio.ensure_future(one(k)) for k in range(100)]
        deadline = time.monotonic() + T
        while len(list(marks.glob("nap-n*"))) < 60 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if kill == "SIGKILL":
            os.kill(min(_processes_holding(_listening(url))), signal.SIGKILL)
        else:
            replicas = [a for a in ray.util.list_named_actors(all_namespaces=True)
                        if "dsh-mcp" in a["name"] and "McpGateway" in a["name"]]
            ray.kill(ray.get_actor(replicas[0]["name"], namespace=replicas[0]["namespace"]), no_restart=True)
        return await asyncio.gather(*calls)

    outcomes = asyncio.run(hundred())
    assert len(outcomes) == 100 and not [o for o in outcomes if o.startswith("error")], outcomes
    failed = [o for o in outcomes if o != "ok"]
    assert len(failed) < 100 and outcomes.count("ok") > 0  # the other replica's calls answered
    runs = {p.name: p.read_text().count("ran") for p in marks.glob("nap-n*")}
    assert max(runs.values()) == 1, {k: v for k, v in runs.items() if v > 1}  # nothing ran twice


def test_a_pydantic_ai_agent_uses_an_agents_endpoint_through_its_own_mcp_client(gateway):
    """A second, independent MCP consumer: pydantic-ai's MCPToolset (FastMCP's client),
    driven by pydantic-ai's own FunctionModel. Its agent sees the endpoint's agent's tools;
    an allowed call, a call dsh refuses (bad arguments: pydantic-ai shows the model its
    retry prompt) and a write all go through the pipeline, and the session log holds each."""
    pydantic_ai = pytest.importorskip("pydantic_ai")
    from pydantic_ai.mcp import MCPToolset
    from pydantic_ai.messages import ModelResponse, RetryPromptPart, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import FunctionModel

    marks, _, url, _ = gateway
    seen = {}

    def model(messages, info):
        if len(messages) == 1:  # the prompt: one step of three calls
            seen["tools"] = sorted(t.name for t in info.function_tools)
            return ModelResponse(parts=[ToolCallPart("add", {"a": 2, "b": 3}, tool_call_id="t1"),
                                        ToolCallPart("add", {"a": "two", "b": 3}, tool_call_id="t2"),
                                        ToolCallPart("write", {"name": "by-pydantic"}, tool_call_id="t3")])
        seen["back"] = {p.tool_call_id: p for p in messages[-1].parts if isinstance(p, (ToolReturnPart, RetryPromptPart))}
        return ModelResponse(parts=[TextPart("done")])

    async def run(agent_id):
        toolset = MCPToolset(url.format(agent=agent_id), init_timeout=T)  # (its 5 s default fails a busy machine)
        agent = pydantic_ai.Agent(FunctionModel(model), toolsets=[toolset])
        return (await agent.run("go")).output

    assert asyncio.run(run("pydantic-writer")) == "done"
    assert seen["tools"] == ["add", "counts", "nap", "slow", "steps", "write"]
    back = seen["back"]
    assert isinstance(back["t1"], ToolReturnPart) and "5" in str(back["t1"].content)
    # the framework's form of a failed tool: a retry, the dsh refusal's text for the model
    assert getattr(back["t2"], "outcome", "retried") == "retried" and "must be a number" in str(back["t2"].content)
    assert isinstance(back["t3"], ToolReturnPart) and (marks / "by-pydantic").read_text() == "pydantic-writer"
    logged = [(e["name"], e["is_error"]) for e in read_records(marks / "logs" / "pydantic-writer.log")
              if e["type"] == "tool/result"]
    assert sorted(logged) == [("add", False), ("add", True), ("write", False)]


def test_a_second_gateway_serves_a_code_mode_registrys_run_code_beside_the_first_on_a_port_of_its_own(
        gateway, tmp_path):
    """Another registry (in Code Mode) served beside the module's gateway: the first one's
    port is refused (its replicas would share that server's connections), its own port
    serves only its registry's tools (run_code with its SDK, each agent's own), the first
    one's agents see none of them, and stopping it leaves the first one serving."""
    from mcp import Client

    from dsh_actors.codemode.runtime import CodeRuntimeConfig
    from dsh_actors.serve import GatewayConfig, serve_mcp, stop_mcp

    marks, _, url, _ = gateway
    coded = _connect(f"mcp-code-{uuid.uuid4().hex[:8]}", mode="code",
                                 code_runtime=CodeRuntimeConfig(backend="cpython", compute_ms=5000, max_wall_ms=60_000))
    try:
        for definition in _tools(tmp_path):
            if definition.name in ("add", "write"):
                coded.register(definition).result(T)
        coded.scope("reader").restrict(deny=["write"]).result(T)
        taken = int(url.split(":")[2].split("/")[0])
        with pytest.raises(OSError, match="taken"):
            serve_mcp(GatewayConfig(coded.name), port=taken, name="dsh-mcp-code")
        port = free_port()
        served = serve_mcp(GatewayConfig(coded.name), port=port, name="dsh-mcp-code")
        assert served == f"http://127.0.0.1:{port}/agents/{{agent}}/mcp"

        async def as_agent(agent, work):
            async with Client(served.format(agent=agent)) as client:
                return await work(client)

        async def everything():
            listed = (await as_agent("coder", lambda c: c.list_tools())).tools
            reader = (await as_agent("reader", lambda c: c.list_tools())).tools
            ran = await as_agent("coder", lambda c: c.call_tool("run_code", {
                "code": 'await tools.write(name="by-program")\nreturn await tools.add(a=2, b=3)'}))
            refused = await as_agent("reader", lambda c: c.call_tool("run_code", {
                "code": 'await tools.write(name="by-reader")'}))
            direct = await as_agent("coder", lambda c: c.call_tool("add", {"a": 1, "b": 1}))
            async with Client(url.format(agent="coder")) as first:  # the module's gateway, its own registry
                firsts = sorted(t.name for t in (await first.list_tools()).tools)
            return listed, reader, ran, refused, direct, firsts

        listed, reader, ran, refused, direct, firsts = asyncio.run(everything())
        assert "run_code" not in firsts and "add" in firsts
        assert [t.name for t in listed] == ["run_code"] and "add(" in listed[0].description
        assert "write(" in listed[0].description and "write(" not in reader[0].description  # its own SDK
        assert ran.is_error is False and ran.content[-1].text.endswith("5")
        assert (tmp_path / "by-program").read_text() == "coder"  # the sub-call ran as the agent
        assert refused.is_error is True and not (tmp_path / "by-reader").exists()
        assert direct.is_error is True and direct.meta["dsh"]["error"]["code"] == "UNKNOWN_TOOL"
        stop_mcp(name="dsh-mcp-code")

        async def first_still():
            async with Client(url.format(agent="x")) as first:
                return await first.call_tool("add", {"a": 1, "b": 1})

        assert asyncio.run(first_still()).content[0].text == "2"  # stopping one left the other
    finally:
        coded.shutdown()


def _env_hosts():
    """The environment hosts of the cluster's alive nodes (those made so far)."""
    from dsh_actors.runtime.wire import DEFAULT_NAMESPACE, env_host_name

    hosts = []
    for node in ray.nodes():
        if node["Alive"]:
            try:
                hosts.append(ray.get_actor(env_host_name(node["NodeID"]), namespace=DEFAULT_NAMESPACE))
            except ValueError:
                continue  # no host made on that node
    return hosts


def _environments_running(env_ids):
    """Which of ``env_ids`` the environment hosts of the cluster's nodes hold now."""
    running = set()
    for host in _env_hosts():
        running |= set(ray.get(host.running.remote(), timeout=T))
    return running & set(env_ids)


def _walled(registry, folder, agent, **options):
    """Give ``agent`` alone (its scope) the reference tools in the module's registry, each
    call in the agent's environment (its folder ``folder/<agent>``); its environment's id."""
    from dsh_actors.runtime.envhost import env_id_of
    from dsh_actors.serve.environments import GatewayEnvironments
    from dsh_actors.tools import AgentWorkspaces, reference_tools

    (folder / agent).mkdir()
    scope = registry.scope(agent)
    for definition in reference_tools(GatewayEnvironments(AgentWorkspaces(folder), registry.name, **options)):
        scope.register(definition).result(T)
    return env_id_of(f"{registry.name}/{agent}")


async def _bash(url, agent, command):
    """``command`` in ``agent``'s ``bash`` through the gateway: (its error code or None, its text)."""
    from mcp import Client

    async with Client(url.format(agent=agent)) as client:
        result = await client.call_tool("bash", {"command": command}, read_timeout_seconds=T)
    return (result.meta["dsh"].get("error", {}).get("code") if result.is_error else None,
            "\n".join(block.text for block in result.content).strip())


def test_each_agent_works_in_an_environment_of_its_own_started_at_its_first_call_and_ended_with_the_gateway(
        gateway, tmp_path):
    """The reference tools behind the gateway: an agent's first call starts its environment
    (its workspace its own folder, its siblings out of sight), its later calls use that one,
    another agent gets another, and ending the gateway's registry ends them all."""
    from mcp import Client

    from dsh_actors.runtime.envhost import env_id_of
    from dsh_actors.runtime.requester import CHECK_S
    from dsh_actors.serve import GatewayConfig, serve_mcp, stop_mcp
    from dsh_actors.serve.environments import GatewayEnvironments
    from dsh_actors.tools import AgentWorkspaces, reference_tools

    for agent in ("ann", "ben"):
        (tmp_path / agent).mkdir()
    walled = _connect(f"mcp-env-{uuid.uuid4().hex[:8]}")
    env_ids = [env_id_of(f"{walled.name}/{agent}") for agent in ("ann", "ben")]
    try:
        for definition in reference_tools(GatewayEnvironments(AgentWorkspaces(tmp_path), walled.name)):
            walled.register(definition).result(T)
        served = serve_mcp(GatewayConfig(walled.name), port=free_port(), name="dsh-mcp-env")

        async def bash(agent, command):
            async with Client(served.format(agent=agent)) as client:
                result = await client.call_tool("bash", {"command": command})
            return result.is_error, "\n".join(block.text for block in result.content)

        async def session():
            return [await bash("ann", "echo hi > made.txt; echo $$"), await bash("ann", "cat made.txt; echo $$"),
                    await bash("ben", f"ls; cat ../ann/made.txt; ls {tmp_path}")]

        (made, made_out), (again, again_out), (other, other_out) = asyncio.run(session())
        assert not made and not again, (made_out, again_out)
        assert (tmp_path / "ann" / "made.txt").read_text() == "hi\n"  # in ann's folder on the host
        assert "hi" in again_out  # the same environment (and workspace) the second time
        assert "hi" not in other_out and not (tmp_path / "ben" / "made.txt").exists()  # ben sees none of ann's
        assert _environments_running(env_ids) == set(env_ids)
        stop_mcp(name="dsh-mcp-env")  # its replica ends; the hosts check owners every CHECK_S
        time.sleep(3 * CHECK_S)
        assert _environments_running(env_ids) == set(env_ids)  # the gateway's registry's, not its replica's
    finally:
        walled.shutdown()
    deadline = time.monotonic() + T
    while _environments_running(env_ids) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _environments_running(env_ids)  # ended with the registry


def test_an_agents_first_calls_on_two_nodes_at_once_start_one_environment_that_both_use(gateway, tmp_path):
    """Replicas on the session's two nodes take an agent's very first calls at the same
    moment: one node claims its environment and starts it, the other's replica waits for it
    and uses it through that node's host — every call runs in that one environment (its
    private /tmp sees every call's line), and one node's host holds it."""
    _, _, url, registry = gateway
    env_id = _walled(registry, tmp_path, "cat")
    _replicas_running(url)

    async def first_calls():  # twelve connections at once: the kernel spreads them over both replicas
        return await asyncio.gather(*(_bash(url, "cat", f"echo call-{k} >> /tmp/calls") for k in range(12)))

    firsts = asyncio.run(first_calls())
    assert not [out for failed, out in firsts if failed], firsts
    failed, lines = asyncio.run(_bash(url, "cat", "sort /tmp/calls"))
    assert not failed and lines.split() == sorted(f"call-{k}" for k in range(12)), lines
    holders = [host for host in _env_hosts() if env_id in ray.get(host.running.remote(), timeout=T)]
    assert len(holders) == 1, holders


def test_an_environment_no_call_used_for_its_idle_limit_ends_and_the_next_call_starts_a_new_one(gateway, tmp_path):
    """With ``idle_s``, an agent's environment lives on while calls keep using it (past the
    limit in all) and while one command runs longer than the limit, ends once none did for
    that long (its processes and private /tmp with it), and the agent's next call gets a new
    one, its folder on the host kept."""
    _, _, url, registry = gateway
    idle_s = 4.0
    env_id = _walled(registry, tmp_path, "dot", idle_s=idle_s)

    async def bash(command):
        code, text = await _bash(url, "dot", command)
        assert code is None, text
        return text

    async def busy():  # a call every second, twice the limit in all
        await bash("echo kept > /tmp/mark; echo kept > made.txt")
        started = time.monotonic()
        while time.monotonic() - started < 2 * idle_s:
            assert await bash("cat /tmp/mark") == "kept"
            await asyncio.sleep(1)

    asyncio.run(busy())
    # one command 1.5 times the limit: its replica tells the host it is used while it runs
    assert asyncio.run(bash(f"sleep {1.5 * idle_s}; cat /tmp/mark")) == "kept"
    assert _environments_running([env_id]) == {env_id}  # used all along: still the first one
    deadline = time.monotonic() + T
    while _environments_running([env_id]) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not _environments_running([env_id]), "the idle environment did not end"
    again = asyncio.run(bash("cat /tmp/mark 2>/dev/null || echo fresh; cat made.txt"))
    assert again.split() == ["fresh", "kept"]  # a new environment, the same folder
    assert _environments_running([env_id]) == {env_id}


def _sleepers(marker):
    """The processes of this machine whose command line ends ``sleep <marker>`` (from /proc):
    ``nohup sleep <marker>`` too, which a loaded machine may not have run ``exec`` in yet
    when the command that started it in the background has answered."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if cmdline.read().split(b"\0")[-3:-1] == [b"sleep", marker.encode()]:
                    found.append(int(pid))
        except OSError:
            continue
    return found


def test_an_environment_host_killed_under_an_agent_takes_its_environment_and_the_next_call_gets_a_new_one(
        gateway, tmp_path):
    """SIGKILL the node's environment host while an agent's environment runs a process: that
    process dies with it (seen from /proc), at most the agent's next call fails ``ENV_GONE``,
    and the call after gets a new environment (its folder on the host kept) — whichever of
    the two replicas (one per node) takes each: one that held the lost environment uses the
    one the other started since, rather than saying again that it is gone."""
    _, _, url, registry = gateway
    marker = str(3000 + os.getpid() % 1000)
    env_id = _walled(registry, tmp_path, "eve")

    def bash(command):
        return asyncio.run(_bash(url, "eve", command))

    assert bash(f"echo kept > made.txt; echo old > /tmp/mark; nohup sleep {marker} >/dev/null 2>&1 & echo started") \
        == (None, "started")
    deadline = time.monotonic() + T  # (its shell forked it; on a loaded machine it may exec a moment later)
    while not _sleepers(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_sleepers(marker)) == 1
    [host] = [h for h in _env_hosts() if env_id in ray.get(h.running.remote(), timeout=T)]
    os.kill(ray.get(host.__ray_call__.remote(lambda _: os.getpid()), timeout=T), signal.SIGKILL)
    deadline = time.monotonic() + T
    while _sleepers(marker) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _sleepers(marker)  # the environment's process died with its host
    first = bash("cat /tmp/mark 2>/dev/null || echo fresh; cat made.txt")
    assert first == (None, "fresh\nkept") or first[0] == "ENV_GONE", first
    assert bash("cat /tmp/mark 2>/dev/null || echo fresh; cat made.txt") == (None, "fresh\nkept")


@ray.remote(num_cpus=0)
class _Replica:
    """Asks for an agent's environment as a gateway replica on its node would, at a call."""

    async def use(self, environments, agent):
        from types import SimpleNamespace

        from dsh_actors.runtime.local import this_node

        await environments.environment(SimpleNamespace(agent=agent))
        return this_node(), time.time()


def _claim_and_die(environments, agent):
    """A replica that claims ``agent``'s environment, beats once, and dies before it starts it."""
    from dsh_actors.runtime.envhost import env_id_of
    from dsh_actors.runtime.wire import agent_session

    claim = environments._claim(env_id_of(agent_session(environments.sessions, agent)),
                                asyncio.run(environments._owner()))
    node, _ = claim.take()
    claim.beat()
    return node


def test_claims_nobody_will_start_are_taken_over_without_waiting_out_the_claim(gateway, ray_cluster, tmp_path):
    """Two agents' environments are claimed on one node and will not come from there: one
    started and died with its node's host (SIGKILL: Ray restarts the host, empty), the other's
    claimant died before starting it. A replica on the other node that never used either then
    starts each on its own node once its claim's heartbeat has been still a while — not only
    after the whole wait for a claimant, which is for one still starting it."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from dsh_actors.runtime.envhost import env_id_of
    from dsh_actors.runtime.wire import DEFAULT_NAMESPACE, env_host_name
    from dsh_actors.serve.environments import CLAIM_WAIT_S, GatewayEnvironments
    from dsh_actors.tools import AgentWorkspaces
    from tests.runtime.fixtures import pid_of, wait_gone

    registry = gateway[3]
    agents = ("ant", "bee")
    for agent in agents:
        (tmp_path / agent).mkdir()
    environments = GatewayEnvironments(AgentWorkspaces(tmp_path), registry.name)
    env_ids = [env_id_of(f"{registry.name}/{agent}") for agent in agents]
    special = ray_cluster["special_node"].node_id
    head = next(node["NodeID"] for node in ray.nodes() if node["Alive"] and node["NodeID"] != special)
    on_head = NodeAffinitySchedulingStrategy(head, soft=False)
    here, there = (_Replica.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)).remote()
                   for node in (head, special))
    try:
        claimed_at = time.time()
        node, _ = ray.get(here.use.remote(environments, "ant"), timeout=T)  # started on the head node
        host = ray.get_actor(env_host_name(head), namespace=DEFAULT_NAMESPACE)
        assert node == head and env_ids[0] in ray.get(host.running.remote(), timeout=T)
        pid = pid_of(host, T)
        os.kill(pid, signal.SIGKILL)
        wait_gone([pid], T)
        claimant = ray.remote(num_cpus=0)(_claim_and_die).options(scheduling_strategy=on_head)
        assert ray.get(claimant.remote(environments, "bee"), timeout=T) == head  # and its process ends
        pid_of(host, T)  # (once the host's next process answers)
        assert not set(env_ids) & set(ray.get(host.running.remote(), timeout=T))  # restarted, empty; the claims stay
        started = ray.get([there.use.remote(environments, agent) for agent in agents], timeout=CLAIM_WAIT_S + T)
        assert [node for node, _ in started] == [special, special]
        waited = [at - claimed_at for _, at in started]
        assert max(waited) < CLAIM_WAIT_S - 15, waited  # not the claims' whole wait
        other = ray.get_actor(env_host_name(special), namespace=DEFAULT_NAMESPACE)
        assert set(env_ids) <= set(ray.get(other.running.remote(), timeout=T))
        assert not set(env_ids) & set(ray.get(host.running.remote(), timeout=T))
    finally:
        for replica in (here, there):
            ray.kill(replica)

