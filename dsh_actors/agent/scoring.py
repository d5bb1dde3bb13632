"""Scorers: was the agent's final answer right?

A scorer is a mapping with ``kind``:

* ``{"kind": "exact", "expected": "42"}`` — the answer, stripped, equals ``expected``;
* ``{"kind": "regex", "pattern": "^4\\\\d$"}`` — the pattern matches somewhere (``re.search``);
* ``{"kind": "json_path", "path": "$.result[0].id", "expected": 7}`` — the answer is JSON
  and the value at ``path`` (``$``, then ``.key`` / ``[index]`` steps) equals ``expected``;
* ``{"kind": "python", "callable": "package.module:function"}`` — ``function(answer)``
  returns the verdict (truthy).

No final answer scores false. A scorer that is malformed raises :class:`ScorerError`
(a batch reports it up front, before anything runs).
"""

from __future__ import annotations

import importlib
import json
import re
from typing import Any, Callable, Mapping

from ..core.errors import HarnessError

__all__ = ["SCORERS", "ScorerError", "check_scorer", "score"]


class ScorerError(HarnessError):
    """A scorer that cannot be used (unknown kind, bad pattern, path or import)."""

    code = "SCORER"


_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[(\d+)\]|\[\"([^\"]*)\"\]")


def _steps(path: str) -> list[str | int]:
    if not path.startswith("$"):
        raise ScorerError(f"a JSON path starts with $: {path!r}")
    steps: list[str | int] = []
    at = 1
    while at < len(path):
        match = _STEP.match(path, at)
        if match is None:
            raise ScorerError(f"cannot read the JSON path {path!r} at character {at + 1}")
        key, index, quoted = match.groups()
        steps.append(int(index) if index is not None else (key if key is not None else quoted))
        at = match.end()
    return steps


def _callable(spec: str) -> Callable[[str], Any]:
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ScorerError(f'a python scorer names "package.module:function", got {spec!r}')
    try:
        function = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ScorerError(f"cannot import the scorer {spec!r}: {exc}") from None
    if not callable(function):
        raise ScorerError(f"the scorer {spec!r} is not callable")
    return function  # type: ignore[no-any-return]


SCORERS: dict[str, tuple[str, dict[str, str]]] = {
    "exact": ("the answer, stripped, equals `expected`, stripped",
              {"expected": "the right answer (a string)"}),
    "regex": ("the pattern matches somewhere in the answer (`re.search`)",
              {"pattern": "a Python regular expression"}),
    "json_path": ("the answer is JSON and the value at `path` equals `expected`",
                  {"path": "`$`, then `.key`, `[index]` or `[\"key\"]` steps", "expected": "any JSON value"}),
    "python": ("`function(answer)` returns a truthy verdict",
               {"callable": "`\"package.module:function\"`, importable where the episode runs"}),
}
"""Each scorer kind: what it checks, and its fields (all required, no others allowed)."""


def check_scorer(spec: Mapping[str, Any]) -> None:
    """Raise :class:`ScorerError` unless ``spec`` is a usable scorer."""
    kind = spec.get("kind")
    if kind in SCORERS:
        fields = SCORERS[kind][1]
        extra = sorted(str(k) for k in spec if k != "kind" and k not in fields)
        if extra:
            raise ScorerError(f"a {kind} scorer has no field(s) {extra}; its fields: {', '.join(fields)}")
        missing = [f for f in fields if f not in spec]
        if missing:
            raise ScorerError(f"a {kind} scorer needs {', '.join(repr(f) for f in missing)}")
    if kind == "exact":
        if not isinstance(spec.get("expected"), str):
            raise ScorerError('an exact scorer needs "expected" (a string)')
    elif kind == "regex":
        try:
            re.compile(str(spec.get("pattern", "")))
        except re.error as exc:
            raise ScorerError(f"bad regex pattern: {exc}") from None
    elif kind == "json_path":
        _steps(str(spec.get("path", "")))
        if "expected" not in spec:
            raise ScorerError('a json_path scorer needs "expected"')
    elif kind == "python":
        _callable(str(spec.get("callable", "")))
    else:
        raise ScorerError(f"unknown scorer kind {kind!r}; known: exact, regex, json_path, python")


def score(spec: Mapping[str, Any], answer: str | None) -> bool:
    """Whether ``answer`` passes the scorer ``spec`` (see the module docs)."""
    check_scorer(spec)
    if answer is None:
        return False
    kind = spec["kind"]
    if kind == "exact":
        return answer.strip() == spec["expected"].strip()
    if kind == "regex":
        return re.search(spec["pattern"], answer) is not None
    if kind == "json_path":
        try:
            value: Any = json.loads(answer)
            for step in _steps(spec["path"]):
                value = value[step]
        except (ValueError, KeyError, IndexError, TypeError):
            return False
        return bool(value == spec["expected"])
    return bool(_callable(spec["callable"])(answer))
