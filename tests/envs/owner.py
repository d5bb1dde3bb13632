"""A backend's process for test_owner_death: starts environments whose commands left
daemons behind, says what it made (one JSON line), then waits to be killed.

Run as ``python -m tests.envs.owner WORKSPACES FOLDER``."""

import asyncio
import json
import os
import sys

from dsh_actors.envs import EnvSpec
from dsh_actors.envs.native import NativeBackend


async def main(workspaces: str, folder: str) -> None:
    backend = NativeBackend(folder=folder)
    made = []
    for i in range(2):
        workspace = os.path.join(workspaces, f"owned-{i}")
        os.makedirs(workspace)
        env = await backend.start(f"owned-{i}", EnvSpec(workspace=workspace))
        await env.run("setsid nohup sleep 600 >/dev/null 2>&1 < /dev/null & ( (sleep 601 &) & )", timeout_s=10)
        made.append({"uid": env.uid, "warden": env._started.pid})
    parent = backend._parent._process  # type: ignore[union-attr]
    print(json.dumps({"environments": made, "parent": parent.pid if parent else None}), flush=True)
    await asyncio.sleep(3600)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
