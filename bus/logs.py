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
    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        fields = " ".join(f"{n}={getattr(record, n)}" for n in _FIELDS if hasattr(record, n))
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
    ``json``, a plain :class:`logging.Formatter` format instead of timestamped lines with their fields.
    """
    handler = logging.StreamHandler(sys.stderr)
    if json:
        formatter: logging.Formatter = JsonFormatter()
    elif text_format is not None:
        formatter = logging.Formatter(text_format)
    else:
        formatter = _TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    handler.setFormatter(formatter)
    if context:
        handler.addFilter(_Context(context))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
