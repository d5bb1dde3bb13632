"""A span exporter that appends finished spans to a file as JSON lines (``DSH_TRACE_FILE``).

Each line is one span: ``name``, ``trace_id``, ``span_id``, ``parent_id`` (hex; ``None``
for a root), ``start_ns``, ``end_ns``, ``status``, ``attributes``, ``pid``. Every process
of a run may append to the same file: each span is one ``write`` on a file opened for
appending, so lines never interleave.
"""

from __future__ import annotations

import json
import os
from typing import Any, Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


class JsonLinesSpanExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            context, parent = span.get_span_context(), span.parent
            if context is None:
                continue
            line: dict[str, Any] = {
                "name": span.name, "trace_id": f"{context.trace_id:032x}", "span_id": f"{context.span_id:016x}",
                "parent_id": f"{parent.span_id:016x}" if parent is not None else None,
                "start_ns": span.start_time, "end_ns": span.end_time, "status": span.status.status_code.name,
                "attributes": dict(span.attributes or {}), "pid": os.getpid(),
            }
            os.write(self._fd, (json.dumps(line, default=str) + "\n").encode())
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        try:
            os.close(self._fd)
        except OSError:
            pass
