"""bash and the file tools, through the pipeline, with their cards."""

import asyncio

import pytest

from dsh_actors import AbortController, InMemoryRegistry
from dsh_actors.log import replay_cards, tool_result_event
from dsh_actors.tools import applied_hunks, reference_tools


@pytest.fixture
def workspace(tmp_path):
    (tmp_path / "notes.txt").write_text("one\ntwo\nthree\nfour\nfive\nsix\nseven\neight\n")
    registry = InMemoryRegistry()
    for tool in reference_tools(str(tmp_path)):
        registry.register(tool)
    return tmp_path, registry


def call(registry, name, **arguments):
    return asyncio.run(registry.execute(call_id="c", name=name, arguments=arguments))


def test_bash_runs_in_the_workspace_and_reports_exit_status_on_a_terminal_card(workspace):
    root, registry = workspace
    ok = call(registry, "bash", command="pwd && ls", description="where am I")
    assert ok.text.splitlines() == [str(root), "notes.txt"] and ok.meta == {"exit_code": 0}
    failed = call(registry, "bash", command="echo oops >&2; exit 3")
    assert failed.text == "oops\n\n(exit status 3)" and failed.meta == {"exit_code": 3}
    bash = registry.get("bash")
    assert bash.present_call({"command": "ls", "description": "list"}) == {
        "card": "terminal", "title": "ls", "cwd": str(root), "description": "list"}
    assert bash.present_result({"command": "x"}, failed) == {"card": "terminal", "output": failed.text, "exit_code": 3}


def test_bash_times_out_and_stops_on_abort(workspace):
    _, registry = workspace
    timed = call(registry, "bash", command="sleep 30", timeout_s=0.3)
    assert timed.error == {"name": "WallBoundError", "code": "ENV_WALL"}
    controller = AbortController()

    async def scenario():
        asyncio.get_running_loop().call_later(0.3, controller.abort, "user stop")
        return await registry.execute(call_id="c", name="bash", arguments={"command": "sleep 30"},
                                      signal=controller.signal)

    stopped = asyncio.run(scenario())
    assert stopped.text == "Error: command stopped: user stop" and stopped.error["code"] == "CANCELLED"


def test_read_file_reads_lines_and_refuses_escapes_and_missing_files(workspace):
    root, registry = workspace
    assert call(registry, "read_file", path="notes.txt", offset=2, limit=2).text == "two\nthree\n"
    assert call(registry, "read_file", path=str(root / "notes.txt")).text.startswith("one\n")
    escape = call(registry, "read_file", path="../../etc/passwd")
    assert escape.error["code"] == "WORKSPACE" and "escapes the workspace" in escape.text
    assert 'no file at "ghost.txt"' in call(registry, "read_file", path="ghost.txt").text
    (root / "link").symlink_to("/etc")
    assert "escapes the workspace" in call(registry, "read_file", path="link/hostname").text


def test_write_and_edit_show_the_applied_hunks_and_replay_renders_the_same_cards(workspace):
    root, registry = workspace
    created = call(registry, "write_file", path="sub/new.md", content="hello\n")
    assert created.text == "created sub/new.md (6 characters)" and (root / "sub/new.md").read_text() == "hello\n"
    edited = call(registry, "edit_file", path="notes.txt", old_text="five", new_text="FIVE")
    assert (root / "notes.txt").read_text().count("FIVE") == 1
    assert edited.meta["diffs"] == [{"path": "notes.txt", "old_text": "two\nthree\nfour\nfive\nsix\nseven\neight\n",
                                     "new_text": "two\nthree\nfour\nFIVE\nsix\nseven\neight\n"}]
    edit = registry.get("edit_file")
    card = edit.present_result({"path": "notes.txt", "old_text": "five", "new_text": "FIVE"}, edited)
    assert card == {"card": "diff", "diffs": edited.meta["diffs"]}
    events = [tool_result_event({"path": "notes.txt", "old_text": "five", "new_text": "FIVE"}, "edit_file", edited)]
    tools = {d.name: d for d in registry.visible()}
    assert replay_cards(events, tools)[0]["result"] == card
    assert "not found" in call(registry, "edit_file", path="notes.txt", old_text="zzz", new_text="y").text
    (root / "dup.txt").write_text("a a a")
    assert "occurs 3 times" in call(registry, "edit_file", path="dup.txt", old_text="a", new_text="b").text
    assert call(registry, "edit_file", path="dup.txt", old_text="a", new_text="b", replace_all=True).text == \
        "edited dup.txt: 3 replacement(s)"


def test_applied_hunks_keep_context_and_split_distant_changes():
    before = "".join(f"{i}\n" for i in range(30))
    after = before.replace("2\n", "TWO\n", 1).replace("25\n", "XXV\n")
    hunks = applied_hunks("f", before, after, context=1)
    assert [h["new_text"] for h in hunks] == ["1\nTWO\n3\n", "24\nXXV\n26\n"]


def test_the_checked_in_tool_catalog_is_current():
    from pathlib import Path

    from dsh_actors.catalog import render_catalog

    checked_in = Path(__file__).resolve().parents[2] / "docs" / "tool-catalog.md"
    assert checked_in.read_text() == render_catalog(), "run `dsh-actors catalog` and commit docs/tool-catalog.md"
