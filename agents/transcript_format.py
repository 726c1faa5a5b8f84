"""How the output of an agent is told from its first lines: plain text, a Claude Code transcript (JSONL) or
Codex CLI's ``exec --json`` output (JSONL)."""

from __future__ import annotations

import contextlib
import re
from enum import StrEnum
from typing import Any, Final

import orjson

from agents.lenient_json import loads_lenient

__all__ = ["BOM", "LINE_FORMATS", "Detector", "Format", "detect_format", "replaced"]

BOM: Final = b"\xef\xbb\xbf"


class Format(StrEnum):
    AUTO = "auto"
    TEXT = "text"
    CLAUDE_JSONL = "claude-jsonl"
    CODEX_JSONL = "codex-jsonl"


LINE_FORMATS: Final = frozenset({Format.CLAUDE_JSONL, Format.CODEX_JSONL})
"""The JSONL formats: each line is read on its own, so a reading can restart at a line's start."""


def detect_format(first_bytes: bytes, *, final: bool = False) -> Format:
    """The format of an output from its first bytes; :attr:`Format.AUTO` while they do not decide.

    JSONL output's first non-blank character is ``{``: anything else is text at once. Then its first
    non-empty lines are looked at, each an entry of a format or not: Codex CLI's (a JSON object whose
    ``type`` is one of its events, :data:`_CODEX_EVENTS`, or ``error`` with a text ``message``) or a Claude
    Code transcript's (a ``type`` of a transcript's, or a ``type`` and a session id, a message or a uuid:
    see :data:`_ENTRY_KEYS`). A first line that is an entry decides for its format; otherwise (a damaged
    or cut first line, a JSON object of something else) two entries among the first three lines do (the
    format most of them are, the first one's on a tie), and two lines that are not entries decide for
    text. ``final`` says no more bytes will come (end of input, or enough buffered): a last line still
    incomplete is judged on what there is, and with fewer lines than that entries win a tie.
    """
    return Detector().decide(first_bytes, final=final)


class Detector:
    """:func:`detect_format` over a buffer that only grows: lines judged once are not read again."""

    _LINES: Final = 3

    def __init__(self) -> None:
        self._pos = 0  # the start of the first line not judged yet
        self._entries: list[Format] = []  # the format of each entry judged, in order
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
            if text and (found := self._count(_entry_format(text, complete=end >= 0))) is not Format.AUTO:
                return found
        if not final:
            return Format.AUTO
        return self._most() if self._entries and len(self._entries) >= self._others else Format.TEXT

    def _count(self, entry: Format | None) -> Format:
        if entry is not None and not (self._entries or self._others):
            return entry  # a first line that is an entry decides at once
        if entry is not None:
            self._entries.append(entry)
        else:
            self._others += 1
        if 2 * len(self._entries) > self._LINES:
            return self._most()
        if 2 * self._others > self._LINES:
            return Format.TEXT
        return Format.AUTO

    def _most(self) -> Format:
        """The format most entries are; of two as many, the one seen first."""
        return max(self._entries, key=self._entries.count)


_ENTRY_TYPES: Final = frozenset({"user", "assistant", "system", "summary", "result"})
_ENTRY_KEYS: Final = ("message", "sessionId", "session_id", "uuid", "leafUuid", "messageId")
"""A transcript entry's ``type`` is one of :data:`_ENTRY_TYPES`, or it has one of these keys: a structured
log line such as ``{"type": "log", "msg": ...}`` is no entry."""
_CODEX_EVENTS: Final = frozenset(
    {
        "thread.started",
        "turn.started",
        "turn.completed",
        "turn.failed",
        "item.started",
        "item.updated",
        "item.completed",
    }
)
"""The event types of Codex CLI's ``exec --json`` output; its ``error`` event is told by its ``message``, a
text where a transcript entry's is an object."""


def _entry_format(line: bytes, *, complete: bool) -> Format | None:
    """The format of which a (stripped) line is an entry, if any; an incomplete one (cut by the buffering
    limit) is judged by its start."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        if not complete:
            return _cut_entry_format(line)
        value = loads_lenient(line)
        if value is None:
            value = replaced(line)  # a byte of invalid UTF-8 makes no JSONL output plain text
    if not isinstance(value, dict) or "type" not in value:
        return None
    kind = value["type"]
    if isinstance(kind, str) and kind in _CODEX_EVENTS:
        return Format.CODEX_JSONL
    if kind == "error" and isinstance(value.get("message"), str):
        return Format.CODEX_JSONL
    if (isinstance(kind, str) and kind in _ENTRY_TYPES) or any(key in value for key in _ENTRY_KEYS):
        return Format.CLAUDE_JSONL
    return None


def _cut_entry_format(line: bytes) -> Format | None:
    if line[:1] != b"{" or b'"type"' not in line:
        return None
    if any(f'"{name}"'.encode() in line for name in _CODEX_EVENTS):
        return Format.CODEX_JSONL
    if any(f'"{name}"'.encode() in line for name in (*_ENTRY_TYPES, *_ENTRY_KEYS)):
        return Format.CLAUDE_JSONL
    return None


def replaced(data: bytes) -> Any:
    """The line read with each byte of invalid UTF-8 as ``?`` (a signal in it is not lost), and a lone
    surrogate escape in it as U+FFFD (:func:`loads_lenient`); None when that does not make it JSON either.
    One byte for one keeps a text no longer than its line (offsets)."""
    try:
        data.decode()
    except UnicodeDecodeError:
        text = _ESCAPED.sub("?", data.decode(errors="surrogateescape"))
        with contextlib.suppress(orjson.JSONDecodeError):
            return orjson.loads(text)
        return loads_lenient(text)
    return None


_ESCAPED: Final = re.compile("[\udc80-\udcff]")
"""The bytes ``surrogateescape`` could not decode, one code point each."""
