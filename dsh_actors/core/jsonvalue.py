"""Lossless JSON: the one rule every argument and every result must pass.

A value is *lossless JSON* when a JSON round trip gives back an equal value of the
same types. Only these pass:

* ``None``, ``bool``, ``str`` (exact types),
* ``int`` (exact type; ``bool`` is an ``int`` subclass and is checked first) within
  -2**63 .. 2**64-1, so every accepted value also encodes as msgpack,
* ``float`` when finite and not ``-0.0``,
* ``list`` (exact type) of lossless values,
* ``dict`` (exact type) with ``str`` keys and lossless values,
* and this module's own :class:`FrozenDict` / :class:`FrozenList`, which are the
  deep-frozen form of the above.

Everything else is rejected with the path to the first offending value: tuples,
sets, bytes, NaN and infinities, non-``str`` keys, subclasses of the builtins,
custom objects, and cycles (a node that appears again on its own ancestor path;
two siblings sharing one node are fine and are copied twice).

:func:`snapshot` detaches (a fresh structure, nothing shared with the input) and
deep-freezes in one walk; :func:`thaw` gives back plain mutable data.
"""

from __future__ import annotations

import math
import json
from typing import Any, NoReturn, TypeAlias

__all__ = [
    "FrozenDict",
    "FrozenList",
    "FrozenValueError",
    "JSONValue",
    "NotLosslessJSONError",
    "check_lossless",
    "refreeze",
    "compact",
    "detach",
    "is_lossless",
    "json_equal",
    "snapshot",
    "thaw",
]

JSONValue: TypeAlias = "None | bool | int | float | str | list[JSONValue] | dict[str, JSONValue]"


class FrozenValueError(TypeError):
    """Raised on any attempt to modify a frozen JSON value."""

    code = "FROZEN_VALUE"


def _refuse(self: object, *_: object, **__: object) -> NoReturn:
    raise FrozenValueError(
        f"this {type(self).__name__} is frozen (a pipeline-owned snapshot); "
        "copy it with dsh_actors.thaw() to get mutable data"
    )


class FrozenDict(dict):  # type: ignore[type-arg]
    """A read-only ``dict``: equal to plain dicts, encodable by ``json`` and ``msgpack``.

    Mutating methods raise :class:`FrozenValueError`. It pickles (and deep-copies)
    back to a ``FrozenDict``. Hashable, so frozen values can be set members.
    """

    __slots__ = ()

    __setitem__ = __delitem__ = _refuse
    clear = pop = popitem = setdefault = update = _refuse
    __ior__ = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenDict, (dict(self),))

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    __repr__ = dict.__repr__  # reads like the plain data it equals

    def __copy__(self) -> "FrozenDict":
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> "FrozenDict":
        return self


class FrozenList(list):  # type: ignore[type-arg]
    """A read-only ``list``: equal to plain lists, encodable by ``json`` and ``msgpack``."""

    __slots__ = ()

    __setitem__ = __delitem__ = _refuse
    append = extend = insert = pop = remove = clear = sort = reverse = _refuse
    __iadd__ = __imul__ = _refuse  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (FrozenList, (list(self),))

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self))

    __repr__ = list.__repr__

    def __copy__(self) -> "FrozenList":
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> "FrozenList":
        return self


class NotLosslessJSONError(ValueError):
    """A value would change on a JSON round trip.

    ``path`` locates the first offending value (``$`` is the root, then ``.key``
    and ``[index]``); ``reason`` says what is wrong with it.
    """

    code = "NOT_LOSSLESS_JSON"

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason

    def __reduce__(self) -> tuple[Any, ...]:
        return (NotLosslessJSONError, (self.path, self.reason))


_SCALARS = (bool, type(None))


def _is_text(value: str) -> bool:
    """``False`` for a str JSON text cannot carry (a lone surrogate: not valid UTF-8)."""
    if value.isascii():
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_NOT_TEXT = "a str with a lone surrogate (not valid UTF-8) is not JSON text"
# msgpack (the session log's framing) holds ints from -2**63 to 2**64 - 1; beyond that a
# value could be accepted here and then be impossible to log, so it is not lossless.
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1
_DICTS = (dict, FrozenDict)
_LISTS = (list, FrozenList)
# Exact types the walk treats as JSON objects: plain dicts and our read-only mappings.
_DICT_TYPES: set[type] = {dict, FrozenDict}
_LIST_TYPES: set[type] = {list, FrozenList}
_CONTAINERS: set[type] = _DICT_TYPES | _LIST_TYPES


def register_frozen_mapping(cls: type) -> type:
    """Admit a read-only :class:`FrozenDict` subclass of this package as a JSON object."""
    if not issubclass(cls, FrozenDict):
        raise TypeError(f"{cls.__qualname__} must subclass FrozenDict")
    _DICT_TYPES.add(cls)
    return cls


def _key_path(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{key!r}]"


def _describe(value: object) -> str:
    kind = type(value)
    if kind is float:
        return f"float {value!r} is not lossless JSON (NaN, infinities and -0.0 are rejected)"
    if isinstance(value, (dict, list, str, int)):
        return (
            f"{kind.__module__}.{kind.__qualname__} is a subclass of a JSON type; "
            "only the exact builtin types are lossless"
        )
    return (
        f"{kind.__qualname__} is not lossless JSON; use dict (str keys), list, str, "
        "int, finite float, bool or None"
    )


MAX_DEPTH = 200
"""Containers nested deeper than this are refused: the interpreter's recursion limit (and
msgpack's) would fail on them later, so they fail here, with a path."""


def _path(where: Any) -> str:
    """The path text of a walk position: a root path, or ``(parent position, key or index)``
    — built only when an error needs it, never on the way down."""
    steps = []
    while isinstance(where, tuple):
        where, step = where
        steps.append(step)
    path = where
    for step in reversed(steps):
        path = f"{path}[{step}]" if type(step) is int else _key_path(path, step)
    return path


def _walk(value: Any, where: Any, ancestors: set[int], freeze: bool) -> Any:
    kind = type(value)
    if len(ancestors) >= MAX_DEPTH and kind in _CONTAINERS:
        raise NotLosslessJSONError(_path(where), f"nested deeper than {MAX_DEPTH} levels")
    if kind is str:
        if _is_text(value):
            return value
        raise NotLosslessJSONError(_path(where), _NOT_TEXT)
    if kind in _SCALARS:
        return value
    if kind is int:
        if _INT_MIN <= value <= _INT_MAX:
            return value
        raise NotLosslessJSONError(_path(where), f"int {value} is outside the 64-bit range -2**63..2**64-1")
    if kind is float:
        if math.isfinite(value) and not (value == 0.0 and math.copysign(1.0, value) < 0):
            return value
        raise NotLosslessJSONError(_path(where), _describe(value))
    if kind in _DICT_TYPES:
        marker = id(value)
        if marker in ancestors:
            raise NotLosslessJSONError(_path(where), "cycle: this value contains itself")
        ancestors.add(marker)
        out: dict[str, Any] = {}
        for key, item in value.items():
            if type(key) is not str:
                raise NotLosslessJSONError(
                    _path(where), f"key {key!r} is a {type(key).__name__}; JSON object keys must be str"
                )
            if not _is_text(key):
                raise NotLosslessJSONError(_path(where), "key: " + _NOT_TEXT)
            out[key] = _walk(item, (where, key), ancestors, freeze)
        ancestors.discard(marker)
        return FrozenDict(out) if freeze else out
    if kind in _LIST_TYPES:
        marker = id(value)
        if marker in ancestors:
            raise NotLosslessJSONError(_path(where), "cycle: this value contains itself")
        ancestors.add(marker)
        items = [_walk(item, (where, i), ancestors, freeze) for i, item in enumerate(value)]
        ancestors.discard(marker)
        return FrozenList(items) if freeze else items
    raise NotLosslessJSONError(_path(where), _describe(value))


def snapshot(value: Any, *, path: str = "$") -> Any:
    """Detach and deep-freeze ``value``, or raise :class:`NotLosslessJSONError`.

    The result shares nothing mutable with the input; its containers are
    :class:`FrozenDict` / :class:`FrozenList`.
    """
    return _walk(value, path, set(), True)


def refreeze(value: Any) -> Any:
    """Deep-freeze plain data that already passed the lossless check (it crossed a
    process boundary as msgpack): no second walk of the rules."""
    if isinstance(value, dict):
        return FrozenDict({key: refreeze(item) for key, item in value.items()})
    if isinstance(value, list):
        return FrozenList([refreeze(item) for item in value])
    return value


def detach(value: Any, *, path: str = "$") -> Any:
    """A fresh plain (mutable) copy of a lossless value, or :class:`NotLosslessJSONError`."""
    return _walk(value, path, set(), False)


def check_lossless(value: Any, *, path: str = "$") -> None:
    """Raise :class:`NotLosslessJSONError` unless ``value`` is lossless JSON."""
    _walk(value, path, set(), False)


def is_lossless(value: Any) -> bool:
    """``True`` when ``value`` survives a JSON round trip unchanged."""
    try:
        _walk(value, "$", set(), False)
    except NotLosslessJSONError:
        return False
    return True


def thaw(value: Any) -> Any:
    """A plain mutable deep copy of a (frozen or plain) lossless value."""
    if isinstance(value, _DICTS):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, _LISTS):
        return [thaw(item) for item in value]
    return value


def json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON sees it: ``True`` never equals ``1``, ``1`` equals ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, _DICTS) and isinstance(b, _DICTS):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, _LISTS) and isinstance(b, _LISTS):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    numbers = (int, float)
    if isinstance(a, numbers) and isinstance(b, numbers):
        return a == b
    return type(a) is type(b) and a == b


def compact(value: Any) -> str:
    """Compact JSON text, as JavaScript's ``JSON.stringify`` writes it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
