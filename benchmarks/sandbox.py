"""The two Code Mode backends side by side, with no Ray in the way.

Run: ``python benchmarks/sandbox.py``. Writes to RESULTS.md: an empty program and a
program making 10 sub-calls, on Monty and on the OS-isolated CPython sandbox, next to a
plain async function call making the same 10 calls. For CPython two rows: "warm" (the
spare sandbox has finished booting when the run starts, as between an agent's turns) and
"back to back" (the next run starts as soon as the last ended, so it may wait for a boot).
Goals: ≤ 2 ms for an empty Monty run; the isolated CPython sandbox no slower than the
30 ms of the previous (audit-hook) sandbox, warm.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _results import table, write_section  # noqa: E402

from dsh_actors.codemode.runtime import CodeRuntimeConfig, make_runtime  # noqa: E402

TEN_CALLS = "for i in range(10):\n    await tools.echo(text=str(i))"


async def echo(args):
    return args.get("text", "")


async def plain_ten():
    for i in range(10):
        await echo({"text": str(i)})


async def p50(call, rounds, pause_s=0.0):
    for _ in range(3):
        await call()
    samples = []
    for _ in range(rounds):
        if pause_s:
            await asyncio.sleep(pause_s)  # not timed: lets the spare sandbox finish booting
        start = time.perf_counter()
        result = await call()
        samples.append((time.perf_counter() - start) * 1e3)
        if getattr(result, "error", None) is not None:
            raise RuntimeError(result.error)
    return statistics.median(samples)


async def main(rounds: int) -> str:
    monty = make_runtime(CodeRuntimeConfig(backend="monty"))
    cpython = make_runtime(CodeRuntimeConfig(backend="cpython"))
    bindings = {"echo": echo}
    rows = [
        ["plain async function, 10 awaited calls (reference)", "—", f"{await p50(plain_ten, rounds * 10):.3f}"],
        ["Monty", f"{await p50(lambda: monty.run('pass', {}), rounds * 5):.2f}",
         f"{await p50(lambda: monty.run(TEN_CALLS, bindings), rounds * 5):.2f}"],
        ["CPython, OS-isolated, warm", f"{await p50(lambda: cpython.run('pass', {}), rounds, 0.6):.1f}",
         f"{await p50(lambda: cpython.run(TEN_CALLS, bindings), rounds, 0.6):.1f}"],
        ["CPython, OS-isolated, back to back", f"{await p50(lambda: cpython.run('pass', {}), rounds):.1f}",
         f"{await p50(lambda: cpython.run(TEN_CALLS, bindings), rounds):.1f}"],
    ]
    monty.close()
    cpython.close()
    return table(["backend", "empty run p50 ms", "10 sub-calls p50 ms"], rows) + (
        f"\n\nIsolation of the CPython rows: `{cpython.isolation}`. Each CPython run is a fresh sandbox "
        "(namespaces, a tmpfs root, Landlock, seccomp); a boot costs ≈150 ms of CPU here, most of it "
        "`import asyncio` in a fresh interpreter, so back-to-back runs wait for the spare's boot. Monty "
        "runs reuse pooled worker processes (the interpreter state is fresh per run).")


if __name__ == "__main__":
    body = asyncio.run(main(15))
    write_section("code_sandbox", "Code Mode backends: Monty vs the OS-isolated CPython sandbox", body)
    print(body)
