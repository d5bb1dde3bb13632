"""An ordinary user's backend, for test_ordinary_user: run by /usr/bin/python3 as uid 65534
(the test's interpreter lives under /root, which that user cannot read), with the
project's sources and installed packages put on sys.path. Prints one JSON report.

Run as ``python3 ordinary.py ROOT SITE_PACKAGES WORKSPACE [allow]``."""

import sys

sys.path[:0] = [sys.argv[1], sys.argv[2]]

import asyncio  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

from dsh_actors.envs import EnvironmentUnavailableError, EnvSpec  # noqa: E402
from dsh_actors.envs.native import NativeBackend  # noqa: E402

CHECKS = {
    "id": "id -u; id -g",
    "caps": "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status",
    "shadow": "cat /etc/shadow",
    "host_tmp": "ls /tmp",
    "network": "ip -o link show up",
    "write": "echo mine > made.txt && stat -c %u made.txt",
    "daemon": "setsid sleep 6007 >/dev/null 2>&1 < /dev/null & echo $!",
}


def sleepers():
    found = []
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and open(f"/proc/{name}/cmdline", "rb").read() == b"sleep\x006007\x00":
                found.append(int(name))
        except OSError:
            pass
    return found


async def main(workspace: str, allow: bool) -> dict:
    backend = NativeBackend(allow_missing=("cgroups",) if allow else ())
    try:
        env = await backend.start("ordinary", EnvSpec(workspace=workspace))
    except EnvironmentUnavailableError as exc:
        return {"refused": str(exc)}
    report = {"isolation": backend.isolation, "uid": os.getuid()}
    for name, command in CHECKS.items():
        result = await env.run(command, timeout_s=10)
        report[name] = [result.exit_code, result.output.decode()]
    for _ in range(100):  # the daemon has been forked; it may not have become "sleep" yet
        report["sleepers_before"] = sleepers()
        if report["sleepers_before"]:
            break
        await asyncio.sleep(0.05)
    await env.end()
    report["sleepers_after"] = sleepers()
    report["owner_on_host"] = os.stat(os.path.join(workspace, "made.txt")).st_uid
    await backend.close()
    return report


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[3], len(sys.argv) > 4))))
