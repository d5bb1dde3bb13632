"""`dsh-actors serve` as an operator runs it: your own tools by import path, each agent in its
own workspace, an MCP client calling them over HTTP, and SIGTERM taking down what it made."""

import asyncio
import json
import signal
import subprocess
import sys

import pytest

pytest.importorskip("ray.serve")

from tests.ports import free_port  # noqa: E402

pytestmark = pytest.mark.timeout(300)

PLUGIN = '''
from dsh_actors import define_tool

def tools(workspaces):
    def note(args, ctx):
        path = workspaces.at(ctx).resolve(args["name"])
        path.write_text(args["text"])
        return [{"type": "text", "text": f"noted {args['name']} in {path.parent.name}"}]
    return [define_tool(name="note", description="Write a note in your workspace.",
                        parameters={"name": {"type": "string"}, "text": {"type": "string"}}, execute=note)]
'''


def test_the_cli_serves_your_tools_per_agent_until_it_is_stopped(cluster_env, tmp_path):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    (tmp_path / "mytools.py").write_text(PLUGIN)
    tokens = {"alice": "alice-" + "a" * 32, "bob": "bob-" + "b" * 32}
    (tmp_path / "tokens.json").write_text(
        json.dumps({tokens["alice"]: ["alice"], tokens["bob"]: ["bob", "carol"]}))
    for agent in ("alice", "bob"):
        (tmp_path / "ws" / agent).mkdir(parents=True)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "dsh_actors", "serve", "--tools", "mytools:tools",
                               "--workspaces", str(tmp_path / "ws"), "--port", str(port), "--approvals", "never", "--mode", "both",
                               "--tokens", "tokens.json", "--ingress", "proxy",
                               "--policies", "redact-secrets"],  # the module's gateway is direct
                              cwd=tmp_path, env=cluster_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        assert "an agent's endpoint: " in line, line or server.stderr.read()[-3000:]
        url = line.rsplit("an agent's endpoint: ", 1)[1].strip()
        assert url == f"http://127.0.0.1:{port}/agents/{{agent}}/mcp"

        async def note(agent, text, token=None, name="n.txt"):
            token = token or tokens.get(agent, tokens["bob"])
            # The SDK's own client timeouts (a bare httpx client reads for 5 s only: a cold first
            # call on a loaded machine can take longer).
            http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
            async with http, Client(streamable_http_client(url.format(agent=agent), http_client=http)) as client:
                return await client.call_tool("note", {"name": name, "text": text})

        async def status(agent, token):
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            async with httpx2.AsyncClient(timeout=60) as http:
                return (await http.post(url.format(agent=agent), headers=headers, json={})).status_code

        async def listed(agent):
            http = create_mcp_http_client(headers={"Authorization": f"Bearer {tokens[agent]}"})
            async with http, Client(streamable_http_client(url.format(agent=agent), http_client=http)) as client:
                return [(t.name, t.description) for t in (await client.list_tools()).tools]

        [(name, _), (code, sdk)] = asyncio.run(listed("alice"))  # --mode both: the tools, and run_code
        assert (name, code) == ("note", "run_code") and "note(" in sdk
        answers = [asyncio.run(note("alice", "from alice")), asyncio.run(note("bob", "from bob"))]
        nobody = asyncio.run(note("carol", "no workspace"))
        assert [a.content[0].text for a in answers] == ["noted n.txt in alice", "noted n.txt in bob"]
        assert (tmp_path / "ws" / "alice" / "n.txt").read_text() == "from alice"
        assert (tmp_path / "ws" / "bob" / "n.txt").read_text() == "from bob"  # each agent in its own
        assert nobody.is_error and not (tmp_path / "ws" / "carol").exists()
        # --policies redact-secrets: a result naming a password is withheld from the client.
        secret = asyncio.run(note("alice", "x", name="password.txt"))
        assert secret.is_error and "withheld" in secret.content[0].text and "password" not in secret.content[0].text
        # Who may call: a token for its own agents only, and none at all is refused.
        assert asyncio.run(status("bob", tokens["alice"])) == 403
        assert asyncio.run(status("alice", None)) == 401
        assert asyncio.run(status("alice", "forged-" + "f" * 32)) == 401
        with pytest.raises(Exception):  # the MCP client itself is turned away with alice's token at bob's
            asyncio.run(note("bob", "by alice", token=tokens["alice"]))
        assert (tmp_path / "ws" / "bob" / "n.txt").read_text() == "from bob"
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=120)
        assert server.returncode == 0, err[-3000:]
        assert "stopped" in out
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    with pytest.raises(Exception):  # nothing answers there any more: Serve started for it ended with it
        asyncio.run(note("alice", "after"))
