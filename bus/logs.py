"""Logging for the long-running commands: readable lines by default, one JSON object per line with
``--log-json``. Decisions are logged one line each with their agent and group ids as fields, so logs can
be filtered per agent or group; a process that serves one agent (an adapter) puts its ids on every line.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

from bus.display import one_line

__all__ = ["PLAIN_FORMAT", "JsonFormatter", "setup_logging"]

_FIELDS = (
    "agent_id",
    "group_id",
    "shard",
    "decision",
    "envelope_id",
    "type",
    "request_id",
    "pid",
    "exit_code",
)
PLAIN_FORMAT = "subagent-bus: %(message)s"
"""The text lines of the agent-side commands (adapters, launcher): the message alone, no fields."""


class JsonFormatter(logging.Formatter):
    """``{"ts", "level", "logger", "message", ...fields}``; fields come from ``extra={...}``."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in _FIELDS:
            if hasattr(record, name):
                data[name] = getattr(record, name)
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(data, default=str).decode()


class _TextFormatter(logging.Formatter):
    """One line per record (a traceback follows on its own lines): ids and texts an agent sent may hold
    newlines or escape sequences, which are shown escaped rather than starting a line of their own."""

    def __init__(self, fmt: str, *, fields: bool) -> None:
        super().__init__(fmt)
        self.fields = fields

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 (logging's name)
        record.message = one_line(record.message)
        return super().formatMessage(record)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        if not self.fields:
            return line
        fields = " ".join(f"{n}={one_line(str(getattr(record, n)))}" for n in _FIELDS if hasattr(record, n))
        return f"{line} {fields}" if fields else line


class _Context(logging.Filter):
    """Gives every record the process's fields (an adapter's agent and group), unless it has its own."""

    def __init__(self, fields: Mapping[str, object]) -> None:
        super().__init__()
        self.fields = dict(fields)

    def filter(self, record: logging.LogRecord) -> bool:
        for name, value in self.fields.items():
            if not hasattr(record, name):
                setattr(record, name, value)
        return True


def setup_logging(
    *,
    json: bool = False,
    level: str = "INFO",
    context: Mapping[str, object] | None = None,
    text_format: str | None = None,
) -> None:
    """Configure the root logger to write to stderr.

    ``context``: fields set on every line (ids the whole process shares). ``text_format``: without
    ``json``, a :class:`logging.Formatter` format instead of timestamped lines with their fields.
    """
    handler = logging.StreamHandler(sys.stderr)
    if json:
        formatter: logging.Formatter = JsonFormatter()
    elif text_format is not None:
        formatter = _TextFormatter(text_format, fields=False)
    else:
        formatter = _TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s", fields=True)
    handler.setFormatter(formatter)
    if context:
        handler.addFilter(_Context(context))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
