"""Fixtures of the environment tests: a backend per module, on a loop thread of its own."""

import uuid

import pytest

from dsh_actors.envs import EnvSpec
from dsh_actors.envs.native import SYSTEM_PATHS, NativeBackend

from .host import Canary, LoopThread


@pytest.fixture(scope="module")
def loop():
    thread = LoopThread()
    yield thread
    thread.close()


@pytest.fixture(scope="module")
def visible(tmp_path_factory):
    """A host folder every environment of the module sees read-only, holding a canary."""
    folder = tmp_path_factory.mktemp("visible")
    folder.chmod(0o755)
    return {"folder": folder, "canary": Canary(folder / "canary.txt")}


@pytest.fixture(scope="module")
def backend(loop, visible):
    made = NativeBackend(readonly=SYSTEM_PATHS + (str(visible["folder"]),))
    yield made
    loop.run(made.close())


class Started:
    """Starts environments for one test and ends them after it."""

    def __init__(self, loop, backend, tmp_path):
        self.loop, self.backend, self.tmp_path, self.started = loop, backend, tmp_path, []

    def __call__(self, workspace=None, **spec):
        """A new environment (``spec``: :class:`EnvSpec` fields) on a fresh workspace, or ``workspace``."""
        workspace = workspace or self.tmp_path / f"ws-{len(self.started)}"
        workspace.mkdir(exist_ok=True)
        env = self.loop.run(self.backend.start(f"test-{uuid.uuid4().hex[:12]}",
                                               EnvSpec(workspace=str(workspace), **spec)))
        self.started.append(env)
        return env

    def sh(self, env, command, timeout_s=20.0, **options):
        return self.loop.run(env.run(command, timeout_s=timeout_s, **options), timeout_s + 30)

    def end(self):
        for env in self.started:
            self.loop.run(env.end())


@pytest.fixture
def envs(loop, backend, tmp_path):
    started = Started(loop, backend, tmp_path)
    yield started
    started.end()


@pytest.fixture
def env(envs):
    return envs()

