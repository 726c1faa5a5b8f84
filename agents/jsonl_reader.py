"""JSON Lines output read incrementally: the agent's texts of each complete line, placed on the output.

:class:`JsonlReader` cuts the bytes into lines (in bounded memory: a line over the limit is skipped with
an error), reads each as a JSON object (leniently: see :mod:`agents.lenient_json` and
:func:`~agents.transcript_format.replaced`) and hands it to :meth:`JsonlReader._entry`, which a format's
reader defines (:mod:`agents.transcript` for Claude Code, :mod:`agents.codex_output` for Codex CLI), and
which may also say that the agent's turn failed (:class:`~agents.items.TurnFailedItem`). A line is read
only once its newline (or the end of the output) came, so a reading started at a line's start yields
exactly what a reading of the whole output yields from there.
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

from agents.items import ErrorItem, TurnFailedItem
from agents.lenient_json import loads_lenient, not_json
from agents.transcript_format import BOM, replaced
from bus.display import cut
from bus.fields import Model

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "MAX_FAILURE_CHARS",
    "AssistantText",
    "JsonlReader",
    "Read",
    "session_id_of",
]

DEFAULT_MAX_LINE_BYTES: Final = 16 << 20
"""JSONL lines longer than this are skipped with an error (a line holds one message)."""
_SESSION_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}")
"""What a session or thread id an output names may be (a UUID, ``thread_...``): it goes into a resume
command (``--resume {session_id}``), where one that starts with ``-``, or holds spaces or control
characters, would be read as an option the agent's output chose."""


def session_id_of(value: object) -> str | None:
    """``value`` as a session id; None for anything else (see :data:`_SESSION_ID`)."""
    return value if isinstance(value, str) and _SESSION_ID.fullmatch(value) else None


MAX_FAILURE_CHARS: Final = 4000
"""What a program says of a failed turn is cut to this many characters: a server's error may quote a
whole response."""


class AssistantText(Model):
    """One text of the agent's own; ``offset`` is where its first byte is counted, ``start`` where its
    JSONL line starts."""

    text: str
    line: int
    offset: int
    start: int


Read = AssistantText | ErrorItem | TurnFailedItem
"""What reading a JSONL line yields."""


class JsonlReader:
    """Incremental JSONL reader yielding the agent's texts (and errors for malformed lines)."""

    def __init__(self, *, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, first_line: int = 1) -> None:
        """``first_line`` is the number of the first line fed (a reading resumed mid-output)."""
        self.max_line_bytes = max_line_bytes
        self.session_id: str | None = None
        """The first session id seen (what a resume needs)."""
        self.agent_id: str | None = None
        """The first agent id seen."""
        self.answered_at: tuple[int, int] | None = None
        """(offset, line) a reading resumed must start from to read what comes next as this one does;
        None when the start of the first incomplete line will do."""
        self._partial = bytearray()  # the current line, unless it is being skipped
        self._length = 0  # bytes of the current line so far
        self._pos = 0  # offset of the current line
        self._line = first_line
        self._skipping = False
        self._last = 0  # offset of the last byte of the line being read
        self._out: list[Read] = []

    def feed(self, chunk: bytes) -> list[Read]:
        """Consume the next bytes; returns the texts (and errors) of the lines they complete."""
        start = 0
        end = chunk.find(b"\n")
        while end >= 0:
            self._append(chunk[start:end])
            self._complete(newline=True)
            start = end + 1
            end = chunk.find(b"\n", start)
        self._append(chunk[start:])
        out, self._out = self._out, []
        return out

    def close(self) -> list[Read]:
        """End of input: a last line without a newline still counts."""
        if self._length:
            self._complete(newline=False)
        out, self._out = self._out, []
        return out

    def _entry(self, entry: dict[str, Any], line: int, offset: int) -> None:
        """Read one line's object: append its texts (and errors) to ``_out``."""
        raise NotImplementedError

    def _text(self, text: str, line: int, offset: int, start: int) -> None:
        self._out.append(AssistantText(text=text, line=line, offset=offset, start=start))

    def _error(self, line: int, offset: int, why: str) -> None:
        self._out.append(ErrorItem(line=line, offset=offset, message=f"JSONL line {line}: {why}"))

    def _failed(self, line: int, message: str) -> None:
        """The line being read says the agent's turn failed: placed on its last byte, past its texts (a
        JSON string is longer than its value), so that its envelope id is its own."""
        said = cut(message, MAX_FAILURE_CHARS)
        self._out.append(TurnFailedItem(message=said, line=line, offset=self._last))

    def _append(self, data: bytes) -> None:
        self._length += len(data)
        if self._skipping:
            return
        self._partial += data
        if len(self._partial) > self.max_line_bytes:
            self._error(self._line, self._pos, f"longer than {self.max_line_bytes} bytes; skipped")
            self._partial = bytearray()
            self._skipping = True

    def _complete(self, *, newline: bool) -> None:
        line, offset, data, skipped = self._line, self._pos, bytes(self._partial), self._skipping
        self._last = offset + self._length - 1
        self._line += 1
        self._pos += self._length + newline
        self._length = 0
        self._partial = bytearray()
        self._skipping = False
        if offset == 0:
            data = data.removeprefix(BOM)  # orjson refuses one; offsets still count it
        if skipped or not data.strip():
            return
        try:
            entry = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            entry = loads_lenient(data)
            if entry is None:
                entry = replaced(data)
            if entry is None:
                self._error(line, offset, _why(data, exc))
                return
        if not isinstance(entry, dict):
            self._error(line, offset, "not a JSON object")
            return
        self._entry(entry, line, offset)


def _why(data: bytes, exc: orjson.JSONDecodeError) -> str:
    try:
        data.decode()
    except UnicodeDecodeError as bad:
        return f"not valid UTF-8 (byte {bad.start})"
    return not_json(exc)
