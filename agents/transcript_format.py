"""How the output of an agent is told: plain text or a Claude Code transcript (JSONL), from its first lines."""

from __future__ import annotations

import contextlib
import re
from enum import StrEnum
from typing import Any, Final

import orjson

from agents.lenient_json import loads_lenient

__all__ = ["BOM", "Detector", "Format", "detect_format", "replaced"]

BOM: Final = b"\xef\xbb\xbf"


class Format(StrEnum):
    AUTO = "auto"
    TEXT = "text"
    CLAUDE_JSONL = "claude-jsonl"


def detect_format(first_bytes: bytes, *, final: bool = False) -> Format:
    """The format of an output from its first bytes; :attr:`Format.AUTO` while they do not decide.

    A transcript's first non-blank character is ``{``: anything else is text at once. Then its first
    non-empty lines are looked at, each a transcript entry (a JSON object with a ``type`` of a transcript's,
    or a ``type`` and a session id, a message or a uuid: see :data:`_ENTRY_KEYS`) or not:
    a first line that is an entry decides for a transcript; otherwise (a damaged or cut first line, a
    JSON object of something else) two entries among the first three lines do, and two lines that are
    not entries decide for text. ``final`` says no more bytes will come (end of input, or enough
    buffered): a last line still incomplete is judged on what there is, and with fewer lines than that
    an entry wins a tie.
    """
    return Detector().decide(first_bytes, final=final)


class Detector:
    """:func:`detect_format` over a buffer that only grows: lines judged once are not read again."""

    _LINES: Final = 3

    def __init__(self) -> None:
        self._pos = 0  # the start of the first line not judged yet
        self._entries = 0
        self._others = 0

    def decide(self, head: bytes | bytearray, *, final: bool) -> Format:
        while True:
            end = head.find(b"\n", self._pos)
            line = bytes(head[self._pos : len(head) if end < 0 else end])
            text = (line.removeprefix(BOM) if self._pos == 0 else line).strip()
            if self._pos == 0 and end < 0 and not final and line and BOM.startswith(line):
                return Format.AUTO  # a byte order mark cut short: the next bytes tell what it is
            if not (self._entries or self._others) and text[:1] not in (b"", b"{"):
                return Format.TEXT
            if end < 0 and not (final and text):
                break
            self._pos = len(head) if end < 0 else end + 1
            if text and (found := self._count(_is_entry(text, complete=end >= 0))) is not Format.AUTO:
                return found
        if not final:
            return Format.AUTO
        return Format.CLAUDE_JSONL if self._entries and self._entries >= self._others else Format.TEXT

    def _count(self, entry: bool) -> Format:
        if entry and not (self._entries or self._others):
            return Format.CLAUDE_JSONL  # a first line that is an entry decides at once
        if entry:
            self._entries += 1
        else:
            self._others += 1
        if 2 * self._entries > self._LINES:
            return Format.CLAUDE_JSONL
        if 2 * self._others > self._LINES:
            return Format.TEXT
        return Format.AUTO


_ENTRY_TYPES: Final = frozenset({"user", "assistant", "system", "summary", "result"})
_ENTRY_KEYS: Final = ("message", "sessionId", "session_id", "uuid", "leafUuid", "messageId")
"""A transcript entry's ``type`` is one of :data:`_ENTRY_TYPES`, or it has one of these keys: a structured
log line such as ``{"type": "log", "msg": ...}`` is no entry."""


def _is_entry(line: bytes, *, complete: bool) -> bool:
    """Whether a (stripped) line is a transcript entry; an incomplete one (cut by the buffering limit)
    is judged by its start."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        if not complete:
            return (
                line[:1] == b"{"
                and b'"type"' in line
                and any(f'"{name}"'.encode() in line for name in (*_ENTRY_TYPES, *_ENTRY_KEYS))
            )
        value = loads_lenient(line)
        if value is None:
            value = replaced(line)  # a byte of invalid UTF-8 makes no transcript plain text
    if not isinstance(value, dict) or "type" not in value:
        return False
    kind = value["type"]
    return (isinstance(kind, str) and kind in _ENTRY_TYPES) or any(key in value for key in _ENTRY_KEYS)


def replaced(data: bytes) -> Any:
    """The line read with each byte of invalid UTF-8 as ``?`` (a signal in it is not lost); None when that
    does not make it JSON either. One byte for one keeps a text no longer than its line (offsets)."""
    try:
        data.decode()
    except UnicodeDecodeError:
        text = _ESCAPED.sub("?", data.decode(errors="surrogateescape"))
        with contextlib.suppress(orjson.JSONDecodeError):
            return orjson.loads(text)
    return None


_ESCAPED: Final = re.compile("[\udc80-\udcff]")
"""The bytes ``surrogateescape`` could not decode, one code point each."""
