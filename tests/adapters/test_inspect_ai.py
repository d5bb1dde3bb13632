"""inspect_ai tasks whose samples' sandboxes are dsh environments (dsh_actors/adapters/inspect_ai.py),
driven by inspect's own mockllm model: the model's bash() and python() calls and the scorer's
commands run inside the sample's environment, and every sample's environment is ended — its
processes gone, its workspace removed — after a failure too. Judged from outside: the host's
files, /proc, the eval log."""

import os
import time

import pytest

pytest.importorskip("inspect_ai")

from inspect_ai import Task, eval as inspect_eval  # noqa: E402
from inspect_ai.dataset import Sample  # noqa: E402
from inspect_ai.model import ModelOutput, get_model  # noqa: E402
from inspect_ai.scorer import Score, Target, accuracy, scorer  # noqa: E402
from inspect_ai.solver import Generate, TaskState, generate, solver, use_tools  # noqa: E402
from inspect_ai.tool import bash, python  # noqa: E402
from inspect_ai.util import sandbox  # noqa: E402

from dsh_actors.adapters.inspect_ai import DshSandboxConfig, DshSandboxEnvironment  # noqa: E402
from tests.codemode.watch import processes_of  # noqa: E402

pytestmark = [pytest.mark.timeout(120),
              # inspect's own: a retry library's deprecation, and streams its eval loop leaves to the collector
              pytest.mark.filterwarnings("ignore::DeprecationWarning"), pytest.mark.filterwarnings("ignore::ResourceWarning"),
              pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")]


@pytest.fixture(autouse=True)
def offline_token_counts(monkeypatch):
    """mockllm counts its input's tokens with tiktoken, whose encodings are downloaded on first
    use; these machines reach no network but the package registries."""
    monkeypatch.setattr("inspect_ai.model._model.count_text_tokens", lambda text: len(text) // 4 + 1)


@scorer(metrics=[accuracy()])
def file_says(path, expected):
    async def score(state: TaskState, target: Target) -> Score:
        result = await sandbox().exec(["cat", path])  # the scorer's command, in the sample's sandbox
        return Score(value=1.0 if result.stdout.strip() == expected else 0.0, answer=result.stdout)
    return score


def test_a_tasks_tools_and_scorer_run_in_each_samples_dsh_sandbox(tmp_path):
    template = tmp_path / "template"
    template.mkdir()
    (template / "given.txt").write_text("from the template\n")
    outside = tmp_path / "outside.txt"
    model = get_model("mockllm/model", custom_outputs=[
        ModelOutput.for_tool_call("mockllm/model", "bash", {
            "command": f"cat given.txt > copied.txt; echo $(id -u) > uid.txt; echo escaped > {outside}; "
                       "(setsid sleep 300 &) ; echo to-stderr >&2; echo done"}),
        ModelOutput.for_tool_call("mockllm/model", "python", {"code": "print(open('copied.txt').read().strip())"}),
        ModelOutput.from_content("mockllm/model", "finished"),
    ])
    task = Task(dataset=[Sample(input="copy the file", target="x")], solver=[use_tools(bash(), python()), generate()],
                scorer=file_says("copied.txt", "from the template"),
                sandbox=("dsh", DshSandboxConfig(template=str(template), root=str(tmp_path / "samples"))))
    [log] = inspect_eval(task, model=model, log_dir=str(tmp_path / "logs"), display="none")
    assert log.status == "success", log.error
    [sample] = log.samples
    assert sample.scores["file_says"].value == 1.0  # the scorer read what the model's bash wrote, in the sandbox
    tool_outputs = [m.text for m in sample.messages if m.role == "tool"]
    stderr, stdout = tool_outputs[0].rsplit("\n\n", 1)  # inspect's bash(): stderr, a blank line, stdout
    assert stdout == "done\n" and stderr.endswith("to-stderr") and f"{outside}: Permission denied" in stderr
    assert tool_outputs[1].strip() == "from the template"
    assert not outside.exists()  # the host's files are out of reach
    assert list((tmp_path / "samples").iterdir()) == []  # its workspace removed with it


def test_the_sandbox_contract_holds(tmp_path):
    import asyncio

    async def contract():
        made = await DshSandboxEnvironment.sample_init("contract", DshSandboxConfig(root=str(tmp_path)), {})
        box = made["default"]
        try:
            await box.write_file("a/b/c.txt", "hello\n")
            await box.write_file("/tmp/bin.dat", bytes(range(256)))
            read = (await box.read_file("a/b/c.txt"), await box.read_file("/tmp/bin.dat", text=False))
            with pytest.raises(FileNotFoundError):
                await box.read_file("missing.txt")
            with pytest.raises(IsADirectoryError):
                await box.read_file("a")
            with pytest.raises(PermissionError):
                await box.write_file("/etc/passwd", "root::0:0::/:/bin/sh\n")
            piped = await box.exec(["cat"], input="from stdin")
            where = await box.exec(["pwd"], cwd="a/b")
            env = await box.exec(["sh", "-c", "echo $GREETING"], env={"GREETING": "hi"})
            failed = await box.exec(["sh", "-c", "echo out; echo err >&2; exit 3"])
            with pytest.raises(TimeoutError):
                await box.exec(["sleep", "30"], timeout=1)
            from inspect_ai.util._sandbox.environment import SandboxUserUnsupportedError
            with pytest.raises(SandboxUserUnsupportedError):
                await box.exec(["id"], user="root")
            uid = int((await box.exec(["id", "-u"])).stdout)
            await box.exec(["sh", "-c", "nohup sleep 300 >/dev/null 2>&1 &"])
            return read, piped, where, env, failed, box.workspace, uid
        finally:
            await DshSandboxEnvironment.sample_cleanup("contract", None, made, interrupted=False)

    read, piped, where, env, failed, workspace, uid = asyncio.run(contract())
    assert read == ("hello\n", bytes(range(256)))
    assert (piped.stdout, where.stdout.strip(), env.stdout) == ("from stdin", f"{workspace}/a/b", "hi\n")
    assert (failed.success, failed.returncode, failed.stdout, failed.stderr) == (False, 3, "out\n", "err\n")
    assert not os.path.exists(workspace)
    deadline = time.monotonic() + 10
    while processes_of(uid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert uid != os.getuid() and processes_of(uid) == []  # its nohup'd sleep ended with it


@solver
def fails_after_a_command():
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        await sandbox().exec(["sh", "-c", "echo $$ > /tmp/pid; nohup sleep 300 >/dev/null 2>&1 & echo started"])
        state.store.set("uid", int((await sandbox().exec(["id", "-u"])).stdout))
        raise RuntimeError("the solver failed")
    return solve


def test_a_failed_samples_sandbox_is_cleaned_up(tmp_path):
    task = Task(dataset=[Sample(input="x", target="x")], solver=fails_after_a_command(),
                sandbox=("dsh", DshSandboxConfig(root=str(tmp_path / "samples"))))
    [log] = inspect_eval(task, model=get_model("mockllm/model"), log_dir=str(tmp_path / "logs"), display="none")
    [sample] = log.samples
    assert sample.error is not None and "the solver failed" in sample.error.message
    uid = sample.store["uid"]
    deadline = time.monotonic() + 10
    while processes_of(uid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_of(uid) == [] and list((tmp_path / "samples").iterdir()) == []


def test_a_hostile_sample_reaches_neither_another_samples_files_nor_past_its_bounds(tmp_path):
    import asyncio

    async def two_samples():
        config = DshSandboxConfig(root=str(tmp_path), processes=32, memory_mb=128)
        a = (await DshSandboxEnvironment.sample_init("hostile", config, {}))["default"]
        b = (await DshSandboxEnvironment.sample_init("hostile", config, {}))["default"]
        try:
            await b.write_file("secret.txt", "b's own\n")
            peek = await a.exec(["sh", "-c", f"cat {b.workspace}/secret.txt; ls {tmp_path}; cat /proc/1/environ"])
            await a.exec(["bash", "-c", "b() { b | b & }; b"], timeout=20)
            flood = await a.exec(["python3", "-c", "x = bytearray(512 << 20); print('allocated')"], timeout=20)
            after = await a.exec(["echo", "still serving"])
            theirs = await b.read_file("secret.txt")
            return peek, flood, after, theirs
        finally:
            for box in (a, b):
                await DshSandboxEnvironment.sample_cleanup("hostile", None, {"default": box}, interrupted=True)

    peek, flood, after, theirs = asyncio.run(two_samples())
    assert "b's own" not in peek.stdout and not peek.success  # another sample's workspace is not there
    # (the bomb's command may return before any fork is refused: it goes on in the background,
    # held by the processes bound, and is killed when the next commands need room, below)
    assert not flood.success and flood.stdout == "" and "memory bound" in flood.stderr
    assert after.stdout == "still serving\n" and theirs == "b's own\n"
    assert list(tmp_path.iterdir()) == []
