"""What a session log's client already knows of the log: the events it appended itself.

An agent loop reads its log back before every model turn, to derive the history the
model sees. Most of what it reads is what the same client appended a moment before (its
task, the model's answers, the tool results); only events other processes appended in
between (an ask's record, a ``run_code`` program's sub-calls) are news. An
:class:`EventMirror` keeps each event a client appended at the index its writer
acknowledged, so a read asks the writer only from the first index this client does not
hold. It is bounded: the oldest events are dropped past ``keep`` (a read that reaches back
further asks the writer).
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["EventMirror"]


class EventMirror:
    """Events by index, as far as this client knows them (see the module docs)."""

    def __init__(self, keep: int = 1024) -> None:
        if keep < 1:
            raise ValueError(f"keep must be at least 1; got {keep}")
        self._keep = keep
        self._start = 0  # index of self._events[0]
        self._events: list[Any] = []  # None: an index this client does not hold
        self.length = 0
        """The log's length as this client last learned it (its acknowledged appends, its reads)."""

    def remember(self, indexes: Sequence[int], events: Sequence[Any]) -> None:
        """``events`` were acknowledged at ``indexes`` (events are never ``None``)."""
        for index, event in zip(indexes, events):
            self._put(index, event)

    def fill(self, start: int, events: Sequence[Any]) -> None:
        """``events`` were read from the log starting at index ``start``."""
        for offset, event in enumerate(events):
            self._put(start + offset, event)

    def gap(self, since: int) -> int | None:
        """The first index from ``since`` to :attr:`length` this client does not hold
        (``None``: it holds them all)."""
        if since < self._start and since < self.length:
            return since
        for index in range(max(since, self._start), self.length):
            if self._events[index - self._start] is None:
                return index
        return None

    def read(self, since: int) -> list[Any]:
        """The events from ``since`` to :attr:`length` (only when :meth:`gap` is ``None``)."""
        if self.gap(since) is not None:
            raise LookupError(f"events from {since} are not all held here; read them from the log")
        return self._events[max(0, since - self._start):]

    def _put(self, index: int, event: Any) -> None:
        if event is None:
            raise ValueError("a logged event is never None")
        if index < self._start:
            return  # older than what is kept
        end = self._start + len(self._events)
        if index >= end:
            self._events.extend([None] * (index - end + 1))
        self._events[index - self._start] = event
        self.length = max(self.length, index + 1)
        extra = len(self._events) - self._keep
        if extra > 0:
            del self._events[:extra]
            self._start += extra
