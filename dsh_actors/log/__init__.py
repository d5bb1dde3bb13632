"""The session log: durable, append-only, msgpack-framed events (no Ray here)."""

from .events import (
    EVENT_DOCS,
    EVENT_TYPES,
    InvalidEventError,
    check_event,
    context_message_event,
    derive_messages,
    replay_cards,
    tool_result_event,
)
from .frames import HEADER, FrameFile, FsyncPolicy, LogCorruptError, LogScan, read_records, scan_log

__all__ = [
    "EVENT_DOCS",
    "EVENT_TYPES",
    "HEADER",
    "FrameFile",
    "FsyncPolicy",
    "InvalidEventError",
    "LogCorruptError",
    "LogScan",
    "check_event",
    "context_message_event",
    "derive_messages",
    "replay_cards",
    "read_records",
    "scan_log",
    "tool_result_event",
]
