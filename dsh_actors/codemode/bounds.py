"""The host's side of a run, bounded the same way on every backend.

The host process (on Ray, the node's executor: every agent's calls run there) must not be
exhausted or stalled by one program. The pieces each backend's host code uses:

- :class:`CallGate` admits a sub-call only when its arguments (measured as JSON text, not
  yet parsed or copied), the calls in flight and their bytes are within the run's caps,
  and refuses an oversized result; a refused call fails alone, with a code in its text.
- :class:`Ledger` keeps printed lines within ``max_log_bytes``, a line costing its bytes
  plus one, and :class:`LogLines` assembles printed chunks into lines without ever
  re-joining what it already holds.
- :class:`HostMeter` measures the host CPU spent on a run's traffic (decoding frames,
  assembling logs, admitting calls), which counts against the run's compute budget.
- :func:`cap_value` / :func:`cap_error` cut texts on a code-point boundary.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from typing import Any, Iterator

from .contract import CodeRuntimeConfig

__all__ = ["TRUNCATED", "VALUE_MARKER", "CallGate", "HostMeter", "Ledger", "LogLines", "cap_error", "cap_value",
           "arguments_for", "utf8_size", "valid_text"]

TRUNCATED = "[dsh-code-runtime] log capture truncated at {n} bytes"
VALUE_MARKER = "… [truncated]"


def valid_text(text: str) -> str:
    """``text`` as valid Unicode: a lone surrogate (a program may print or return one) is
    replaced, so what leaves a run can be encoded anywhere (JSON, msgpack, the log)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def arguments_for(binding: object, text: str, meter: "HostMeter") -> Any:
    """A call's arguments as ``binding`` takes them: the JSON text the program sent, when
    it takes that (the Code Mode bridge does: it parses them when the call's turn comes, so
    a queued call holds only its text); else parsed now, on ``meter``'s account."""
    if getattr(binding, "takes_json", False) is True:
        return text
    with meter.charge():
        return json.loads(text)


def utf8_size(text: str) -> int:
    """``len(text.encode("utf-8"))`` without making the copy for ASCII text."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


class Ledger:
    """The run's printed lines within its log budget; forged or stray output counts too."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.logs: list[str] = []
        self.full = False

    def room(self) -> int:
        """Bytes a next line may still have (its newline's byte aside)."""
        return max(0, self.limit - self.used - 1)

    def add(self, text: str) -> None:
        if self.full:
            return
        size = utf8_size(text) + 1  # an empty line costs its newline: the budget bounds lines too
        if self.used + size > self.limit:
            self.truncate()
            return
        self.used += size
        self.logs.append(valid_text(text))

    def truncate(self) -> None:
        """Record the truncation marker; nothing more is kept."""
        if not self.full:
            self.logs.append(TRUNCATED.format(n=self.limit))
            self.full = True


class LogLines:
    """Printed chunks as ledger lines, one per line, in order.

    Only the new chunk is searched for newlines, and a line that can no longer fit the
    budget stops being kept as it grows (the ledger then records its truncation marker), so
    a 16 MB line printed in many chunks costs the host work in proportion to its size once.
    """

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self._parts: list[str] = []
        self._size = 0
        self._overflow = False

    def write(self, text: str) -> None:
        if self.ledger.full or not text:
            return
        *complete, rest = text.split("\n")
        for piece in complete:
            self._keep(piece)
            self._end_line()
            if self.ledger.full:
                return
        self._keep(rest)

    def _keep(self, piece: str) -> None:
        if self._overflow or not piece:
            return
        self._size += utf8_size(piece)
        if self._size > self.ledger.room():
            self._overflow = True  # this line will not fit: stop holding it
            self._parts.clear()
        else:
            self._parts.append(piece)

    def _end_line(self) -> None:
        if self._overflow:
            self.ledger.truncate()
        else:
            self.ledger.add("".join(self._parts))
        self._parts.clear()
        self._size = 0
        self._overflow = False

    def flush(self) -> None:
        """End a last line that had no newline."""
        if self._parts or self._overflow:
            self._end_line()


class HostMeter:
    """Host CPU seconds spent on one run's traffic (the running thread's CPU clock)."""

    def __init__(self) -> None:
        self.used_s = 0.0

    @contextmanager
    def charge(self) -> Iterator[None]:
        started = time.thread_time()
        try:
            yield
        finally:
            self.used_s += time.thread_time() - started


class CallGate:
    """Admission of a run's sub-calls, checked before their arguments are parsed or queued."""

    def __init__(self, config: CodeRuntimeConfig) -> None:
        self.max_arg = int(config.max_arg_bytes)
        self.max_result = int(config.max_result_bytes)
        self.max_calls = int(config.max_calls_in_flight)
        self.max_bytes = int(config.max_bytes_in_flight)
        self.calls = 0
        self.bytes = 0

    def admit(self, name: str, size: int) -> str | None:
        """``None`` when a call of ``size`` argument bytes may go (it is then in flight
        until :meth:`done`), else the refusal the program reads."""
        refusal = self.refusal(name, size)
        if refusal is None:
            self.calls += 1
            self.bytes += size
        return refusal

    def refusal(self, name: str, size: int) -> str | None:
        """Why a call of ``size`` argument bytes may not go now (``None``: it may)."""
        if size > self.max_arg:
            return self.text("ARGS_TOO_LARGE", name, size)
        if self.calls >= self.max_calls:
            return self.text("TOO_MANY_CALLS", name, size)
        if self.bytes + size > self.max_bytes:
            return self.text("TOO_MANY_BYTES", name, size)
        return None

    def text(self, code: str, name: str, size: int) -> str:
        """The refusal the program reads for ``code``, a call of ``size`` argument bytes."""
        if code == "ARGS_TOO_LARGE":
            return (f"Error: tools.{name}() arguments are {size} bytes as JSON, over this run's limit of "
                    f"{self.max_arg} (max_arg_bytes) [ARGS_TOO_LARGE]; pass less, e.g. a path instead of content")
        if code == "TOO_MANY_CALLS":
            return (f"Error: tools.{name}() not started: {self.max_calls} calls of this run are already in flight, "
                    f"its limit (max_calls_in_flight) [TOO_MANY_CALLS]; await some before starting more")
        return (f"Error: tools.{name}() not started: the arguments of this run's calls in flight would be over its "
                f"limit of {self.max_bytes} bytes (max_bytes_in_flight) [TOO_MANY_BYTES]; await some before "
                "starting more")

    def done(self, size: int) -> None:
        self.calls -= 1
        self.bytes -= size

    def result_refusal(self, name: str, text: str) -> str | None:
        size = utf8_size(text)
        if size <= self.max_result:
            return None
        return (f"Error: tools.{name}() returned {size} bytes, over this run's limit of {self.max_result} "
                f"(max_result_bytes) [RESULT_TOO_LARGE]; ask the tool for less")


def cap_value(text: str, cap: int) -> str:
    """A value's rendering cut on a code-point boundary with a marker; a value already cut
    (within the marker's length of slack) passes unchanged."""
    text = valid_text(text)
    if len(text) <= cap // 4:
        return text  # at most 4 bytes a code point: fits without encoding it
    data = text.encode("utf-8")
    if len(data) <= cap + len(VALUE_MARKER.encode("utf-8")):
        return text
    return data[:cap].decode("utf-8", "ignore") + VALUE_MARKER


def cap_error(text: str, cap: int) -> str:
    """An error text cut to exactly ``cap`` bytes on a code-point boundary (no marker)."""
    return valid_text(text).encode("utf-8")[:cap].decode("utf-8", "ignore")

