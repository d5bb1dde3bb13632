"""What models write, run on both backends: the default must run it, Monty's text must be true.

A program is run correctly when its printed lines and returned value are exactly what plain
CPython gives (the corpus's oracle), with no error. The default backend (the CPython
sandbox, on a host with its walls) must run at least 95 % of the corpus; Monty's count is
measured and reported, and its SDK language text is checked claim by claim.
"""

import asyncio

import pytest

from dsh_actors.codemode.contract import CodeRuntimeConfig
from dsh_actors.codemode.monty import DIALECT, MontyRuntime
from dsh_actors.codemode.runtime import make_runtime

from .corpus import bindings, oracle, programs

BUDGETS = dict(compute_ms=10_000, max_wall_ms=30_000, max_log_bytes=1 << 20, max_value_bytes=1 << 20)
CORPUS = programs()


def correct(runtime, source, expected):
    result = asyncio.run(runtime.run(source, bindings()))
    return result.error is None and (result.logs, result.value) == expected, result


@pytest.fixture(scope="module")
def expected():
    return {name: oracle(source) for name, source in CORPUS}


def test_the_corpus_is_large_and_every_program_completes_in_plain_cpython(expected):
    assert len(CORPUS) >= 100
    assert all(lines or value for lines, value in expected.values())  # each one shows something


@pytest.mark.timeout(300)
def test_the_default_backend_runs_at_least_95_percent_of_what_models_write(expected):
    runtime = make_runtime(CodeRuntimeConfig(**BUDGETS))
    try:
        failed = [name for name, source in CORPUS if not correct(runtime, source, expected[name])[0]]
    finally:
        runtime.close()
    ran = len(CORPUS) - len(failed)
    assert ran / len(CORPUS) >= 0.95, f"{ran}/{len(CORPUS)} ran; failed: {failed}"


@pytest.mark.timeout(300)
def test_monty_fails_on_part_of_the_corpus_and_each_failure_it_explains_is_marked_as_its_dialect(expected):
    runtime = MontyRuntime(CodeRuntimeConfig(backend="monty", retry_unsupported=False, **BUDGETS))
    outcomes = {name: correct(runtime, source, expected[name]) for name, source in CORPUS}
    runtime.close()
    failures = {name: result for name, (ok, result) in outcomes.items() if not ok}
    assert 0 < len(failures) < len(CORPUS)  # Monty is a subset: it runs some, not all
    noted = [r for r in failures.values() if r.error is not None and "this sandbox runs Monty" in r.error.message]
    assert len(noted) >= len(failures) // 2, "most of what Monty lacks must say so"


@pytest.mark.timeout(300)
def test_with_retry_monty_hands_what_it_cannot_parse_to_the_cpython_sandbox(expected):
    runtime = make_runtime(CodeRuntimeConfig(backend="monty", **BUDGETS))
    try:
        failed = [name for name, source in CORPUS if not correct(runtime, source, expected[name])[0]]
    finally:
        runtime.close()
    # only programs that failed after a sub-call (never run twice) or in a way Monty cannot explain remain
    assert len(failed) < len(CORPUS) * 0.2, failed


def test_a_retried_program_never_runs_a_sub_call_twice():
    calls = []

    async def note(args):
        calls.append(args["n"])
        return "noted"

    runtime = make_runtime(CodeRuntimeConfig(backend="monty"))
    try:
        before_any_call = asyncio.run(runtime.run(
            "def gen():\n    yield 1\nawait tools.note(n=1)\nreturn list(gen())", {"note": note}))
        after_a_call = asyncio.run(runtime.run(
            "await tools.note(n=2)\nimport heapq\nreturn heapq.nlargest(1, [3, 1])", {"note": note}))
    finally:
        runtime.close()
    assert before_any_call.error is None and before_any_call.value == "[1]"  # parse-time: retried on CPython
    assert after_a_call.error is not None and "heapq exists in CPython but not here" in after_a_call.error.message
    assert calls == [1, 2]  # each sub-call ran exactly once


# What Monty's language text says it runs, and what it says it does not: each claim checked.
RUNS = {
    "closures and decorators": "def d(f):\n    def w(x):\n        return f(x) + 1\n    return w\n@d\ndef g(x):\n    return x\nreturn g(1)",
    "asyncio.gather": "import asyncio\nasync def f(x):\n    return x\nreturn await asyncio.gather(f(1), f(2))",
    "generator expressions consumed by sum": "return sum(x * x for x in range(4))",
    "match and walrus": "match 2:\n    case 2:\n        r = [y for x in [1, 2] if (y := x) > 1]\nreturn r",
    "a simple class and @dataclass": ("from dataclasses import dataclass\n@dataclass\nclass P:\n    x: int\n"
                                       "class Q:\n    def __init__(self):\n        self.y = 2\nreturn P(1).x + Q().y"),
    "json, re, collections, itertools, functools, datetime, csv, decimal": (
        "import json, re, collections, itertools, functools, datetime, csv, decimal\n"
        "return [json.dumps([1]), re.sub('a', 'b', 'aa'), collections.Counter('aab')['a'],"
        " list(itertools.accumulate([1, 2])), functools.reduce(lambda a, b: a + b, [1, 2]),"
        " datetime.date(2024, 1, 2).isoformat(), str(decimal.Decimal('1.5'))]"),
}
DOES_NOT_RUN = {  # the words of the text that name it -> a program that uses it
    "class inheritance": "class A:\n    pass\nclass B(A):\n    pass\nreturn 1",
    "@property": "class A:\n    @property\n    def x(self):\n        return 1\nreturn A().x",
    "__len__": "class A:\n    def __len__(self):\n        return 3\nreturn len(A())",
    "yield": "def g():\n    yield 1\nreturn list(g())",
    "next() on a generator expression": "return next(x for x in [1])",
    "del": "a = [1]\ndel a[0]\nreturn a",
    "key=d.get": "d = {'a': 1}\nreturn max(d, key=d.get)",
    "async with": "import asyncio\nasync def f():\n    async with asyncio.Lock():\n        return 1\nreturn await f()",
    "create_task": "import asyncio\nasync def f():\n    return 1\nreturn await asyncio.create_task(f())",
    "io,": "import io\nreturn io.StringIO('x').read()",
    "statistics": "import statistics\nreturn statistics.mean([1, 2])",
    "heapq": "import heapq\nreturn heapq.nlargest(1, [1, 2])",
    "textwrap": "import textwrap\nreturn textwrap.shorten('a b c', 3)",
}


@pytest.fixture(scope="module")
def monty():
    runtime = MontyRuntime(CodeRuntimeConfig(backend="monty", retry_unsupported=False))
    yield runtime
    runtime.close()


@pytest.mark.parametrize("claim", list(RUNS))
def test_what_the_monty_text_says_it_runs_runs(monty, claim):
    result = asyncio.run(monty.run(RUNS[claim], {}))
    assert result.error is None, result
    assert asyncio.run(make_runtime(CodeRuntimeConfig()).run(RUNS[claim], {})).value == result.value


@pytest.mark.parametrize("claim", list(DOES_NOT_RUN))
def test_what_the_monty_text_says_it_does_not_run_fails_there_and_the_text_names_it(monty, claim):
    assert claim in DIALECT.split("It does NOT run")[1]  # the text names it among what fails
    result = asyncio.run(monty.run(DOES_NOT_RUN[claim], {}))
    assert result.error is not None, f"Monty ran {claim!r}: the text is wrong"
