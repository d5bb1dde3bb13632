"""The isolation probe: tries every wall of ``_walls.py`` once and prints what this host has.

Started by the host as ``python -I -S -B _launcher.py CONFIG`` (an empty environment,
``CONFIG`` with ``probe`` set); prints a JSON report ``{mechanism: "ok" | why not}``.
Runs are not started here: the fork server (``_forkserver.py``) starts them.
"""

import json
import sys

CONFIG = json.loads(sys.argv[1])
for _lib in CONFIG["libs"]:
    sys.path.insert(0, _lib)

import _boot  # noqa: E402

_boot.prepare(CONFIG)
import _walls  # noqa: E402


def _never(_frames_fd):
    raise AssertionError("the probe runs no program")


if __name__ == "__main__":
    _walls.Launch(CONFIG).run(_never)
