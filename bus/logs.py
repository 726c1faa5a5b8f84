"""Logging for the long-running commands: readable lines by default, one JSON object per line with
``--log-json``. Decisions are logged one line each with their agent and group ids as fields, so logs can
be filtered per agent or group.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

__all__ = ["JsonFormatter", "setup_logging"]

_FIELDS = ("agent_id", "group_id", "shard", "decision", "envelope_id", "type")


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


def setup_logging(*, json: bool = False, level: str = "INFO") -> None:
    """Configure the root logger to write to stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter() if json else _TextFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
