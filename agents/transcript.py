"""Claude Code transcripts (JSONL output files), and the parser of any output; :mod:`agents.transcript_format`
tells the formats apart.

A background agent's output file (seed 004, ``outputFile``) is its transcript: one JSON object per line
with ``type`` ``user`` or ``assistant`` (other types are bookkeeping and ignored), ``sessionId``,
``agentId``, ``isSidechain`` and ``message.content``, a string or a list of blocks typed ``text``,
``tool_use``, ``tool_result`` (or ``thinking``...). Only the ``text`` of ``assistant`` messages is the
agent's output: the user prompt (which carries the signal templates), tool inputs and tool results are
not, so a template or a quoted signal there is never taken for a signal. ``isSidechain`` does not
filter: a subagent's file holds only its own (sidechain) messages, and a main session's file is that
session's output. ``claude -p --output-format json`` prints one ``result`` entry, whose ``result`` is the
answer's text, and ``stream-json`` the same after the assistant's messages: a result's text is read only
when no assistant text came since the last result (it repeats the last message's), and its
``session_id`` is the session's, as ``sessionId`` is. A result that is an error (``is_error: true``, or a
``subtype`` such as ``error_max_turns`` or ``error_during_execution``) also says that the agent's turn
failed, with its ``errors`` (or its ``result``, an API error's text) as why: a
:class:`~agents.items.TurnFailedItem`. ``claude -p`` may exit 0 after one (an API error), so its exit
status alone would not tell. An interactive session's transcript has no ``result``: there an API error
(Claude Code gave up retrying, or the error is not one it retries) is an ``assistant`` entry flagged
``isApiErrorMessage``, whose text is the error (``API Error: 529 {...}``), and it is that turn's failure
too, read at that entry. ``stream-json`` writes that entry as well, before the ``result`` that repeats
it: the failure is read once, at the entry, and the error result that ends the same turn says nothing
more.

Each assistant text is parsed on its own by a :class:`~agents.parser.Parser` (a signal or a report does
not span two messages; one still open at the end of its text is an error). The items it yields are
placed on the transcript: ``line`` is the JSONL line of the message, and ``offset`` is the byte offset of
that JSONL line plus the UTF-8 offset of the item within the message's texts (the texts of one line
counted one after the other). A JSON string is never shorter than the UTF-8 of its value, so offsets
stay inside their JSONL line: unique in the transcript, and the same however it is chunked, which keeps
envelope ids deterministic. Codex CLI's ``exec --json`` output is read the same way, its agent messages
as the texts (:mod:`agents.codex_output`).
"""

from __future__ import annotations

from typing import Any, Final

from agents.codex_output import CodexReader
from agents.items import TurnFailedItem, UnreadReportItem
from agents.jsonl_reader import DEFAULT_MAX_LINE_BYTES, AssistantText, JsonlReader, Read, session_id_of
from agents.parser import DEFAULT_MAX_BLOCK_BYTES, ErrorItem, Found, Item, Parser
from agents.transcript_format import LINE_FORMATS, Detector, Format, detect_format
from agents.unread import UnreadReports

__all__ = [
    "DEFAULT_MAX_LINE_BYTES",
    "DETECT_LIMIT",
    "AnyParser",
    "AssistantText",
    "Format",
    "TranscriptParser",
    "TranscriptReader",
    "detect_format",
]

DETECT_LIMIT: Final = 1 << 20
"""Bytes :class:`AnyParser` buffers at most before it settles on a format."""
# A block left open at the end of an assistant text: the transcript may go on, but each text is read alone.
_END_OF_TEXT: Final = "end of its text: a signal does not span two of the agent's texts"


class TranscriptReader(JsonlReader):
    """Incremental reader of a Claude Code transcript yielding the assistant's texts (and errors for
    malformed lines). :attr:`session_id` is the first ``sessionId`` (or ``session_id``) seen, and
    :attr:`answered_at` the (offset, line) of the last assistant line with text since the last ``result``
    entry, whose text the next result repeats: a reading resumed there knows not to read that result."""

    _api_failed = False
    """The last entry of the turn so far is an API error: an error result after it is the same failure."""

    def _entry(self, entry: dict[str, Any], line: int, offset: int) -> None:
        if self.session_id is None:
            self.session_id = session_id_of(entry.get("sessionId", entry.get("session_id")))
        if self.agent_id is None and isinstance(entry.get("agentId"), str):
            self.agent_id = entry["agentId"]
        kind = entry.get("type")
        if kind == "result":
            self._result(entry, line, offset)
        if kind in ("user", "assistant", "result"):
            self._api_failed = False
        if kind == "assistant":
            self._assistant(entry, line, offset)

    def _assistant(self, entry: dict[str, Any], line: int, offset: int) -> None:
        message = entry.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            self._error(line, offset, "assistant message without content")
            return
        start = offset
        for block in content:
            if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
                text: str = block["text"]
                self._text(text, line, offset, start)
                self.answered_at = (start, line)
                offset += len(text.encode())
        if entry.get("isApiErrorMessage") is True:
            self._api_error(content, line)

    def _api_error(self, content: list[Any], line: int) -> None:
        """An API error that ended the turn: published whatever follows it. Claude Code writes this entry
        once it has stopped retrying, so the turn ended there; output after it is a new turn, prompted
        again (by the coordinator's answer to this very failure, most often), with nothing to take back."""
        texts = [b["text"].strip() for b in content if isinstance(b, dict) and isinstance(b.get("text"), str)]
        said = "; ".join(text for text in texts if text) or "no text"
        self._failed(line, f"Claude Code's request to the API failed: {said}")
        self._api_failed = True

    def _result(self, entry: dict[str, Any], line: int, offset: int) -> None:
        answer = entry.get("result")
        if isinstance(answer, str) and self.answered_at is None:
            self._text(answer, line, offset, offset)
        self.answered_at = None
        failure = _failure(entry)
        if failure is not None and not self._api_failed:
            self._failed(line, failure)


def _failure(result: dict[str, Any]) -> str | None:
    """What a ``result`` entry says of a failed turn, if it is an error."""
    subtype = result.get("subtype")
    named = isinstance(subtype, str) and subtype.startswith("error")
    if not named and result.get("is_error") is not True:
        return None
    errors = result.get("errors")
    said = [e.strip() for e in errors if isinstance(e, str) and e.strip()] if isinstance(errors, list) else []
    answer = result.get("result")
    if not said and isinstance(answer, str) and answer.strip():
        said = [answer.strip()]
    what = f"Claude Code's result is an error ({subtype})" if named else "Claude Code's result is an error"
    return what + (f": {'; '.join(said)}" if said else "")


class TranscriptParser:
    """Parses the agent's texts in JSONL output (a Claude Code transcript, or with ``fmt`` Codex CLI's
    ``exec --json`` output: :mod:`agents.codex_output`) into items placed on the output (see the module)."""

    def __init__(
        self,
        *,
        fmt: Format = Format.CLAUDE_JSONL,
        max_block_bytes: int = DEFAULT_MAX_BLOCK_BYTES,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        first_line: int = 1,
    ) -> None:
        self.max_block_bytes = max_block_bytes
        reader = CodexReader if fmt is Format.CODEX_JSONL else TranscriptReader
        self.reader: JsonlReader = reader(max_line_bytes=max_line_bytes, first_line=first_line)

    @property
    def session_id(self) -> str | None:
        return self.reader.session_id

    @property
    def agent_id(self) -> str | None:
        return self.reader.agent_id

    @property
    def answered_at(self) -> tuple[int, int] | None:
        return self.reader.answered_at

    def feed(self, chunk: bytes) -> list[Found]:
        return self._items(self.reader.feed(chunk))

    def close(self) -> list[Found]:
        return self._items(self.reader.close())

    def _items(self, events: list[Read]) -> list[Found]:
        items: list[Found] = []
        for event in events:
            if isinstance(event, ErrorItem | TurnFailedItem):
                items.append(event)
                continue
            parser = Parser(
                max_block_bytes=self.max_block_bytes,
                context=f" of the text on JSONL line {event.line}",
                end=_END_OF_TEXT,
            )
            data = event.text.encode()
            for item in parser.feed(data) + parser.close():
                placed = {"line": event.line, "offset": event.offset + item.offset}
                if isinstance(item, UnreadReportItem):
                    placed["reread_from"] = event.start
                items.append(item.model_copy(update=placed))
        return items


class AnyParser:
    """A parser for any format; with :attr:`Format.AUTO` it buffers the first lines to decide (see
    :func:`detect_format`)."""

    def __init__(
        self,
        fmt: Format = Format.AUTO,
        *,
        max_block_bytes: int = DEFAULT_MAX_BLOCK_BYTES,
        first_line: int = 1,
        reported: bool = False,
    ) -> None:
        """``first_line`` numbers the first line of a transcript fed from its middle (a reading resumed from
        a checkpoint), so that items and messages name the transcript's lines, and ``reported`` says that
        a result report came before (:mod:`agents.unread`). Plain text is always read from its beginning."""
        self.format = fmt
        """The format being parsed; :attr:`Format.AUTO` until the first bytes decide it."""
        self.max_block_bytes = max_block_bytes
        self._first_line = first_line
        self._head = bytearray()
        self._detector = Detector()
        self._started = False  # a non-blank byte was buffered: only a newline can decide now
        self._parser: Parser | TranscriptParser | None = None
        self._unread = UnreadReports(reported=reported)
        self._fed = 0
        if fmt is not Format.AUTO:
            self._start(fmt)

    @property
    def session_id(self) -> str | None:
        """A JSONL output's session id (``sessionId``, or Codex CLI's ``thread_id``); None for text."""
        return self._parser.session_id if isinstance(self._parser, TranscriptParser) else None

    @property
    def agent_id(self) -> str | None:
        return self._parser.agent_id if isinstance(self._parser, TranscriptParser) else None

    def feed(self, chunk: bytes) -> list[Item]:
        self._fed += len(chunk)
        if self._parser is not None:
            return self._unread.items(self._parser.feed(chunk))
        self._head += chunk
        # nothing can change while a line is still incomplete (or all is blank): skip the work
        waiting = self._started or not chunk.strip()
        if waiting and b"\n" not in chunk and len(self._head) < DETECT_LIMIT:
            return []
        self._started = self._started or bool(chunk.strip())
        # the buffer itself, not a copy: a copy per read of up to DETECT_LIMIT bytes each is quadratic.
        # At the limit, exactly its first DETECT_LIMIT bytes decide, whatever the last read brought
        # beyond it: the same output read in other pieces is read in the same format.
        full = len(self._head) >= DETECT_LIMIT
        found = self._detector.decide(self._head[:DETECT_LIMIT] if full else self._head, final=full)
        if found is Format.AUTO:
            return []
        return self._start(found)

    @property
    def held(self) -> UnreadReportItem | None:
        """The section :mod:`agents.unread` holds, if any."""
        return self._unread.held

    @property
    def answered_at(self) -> tuple[int, int] | None:
        """A JSONL output's :attr:`~agents.jsonl_reader.JsonlReader.answered_at`; None for text."""
        return self._parser.answered_at if isinstance(self._parser, TranscriptParser) else None

    @property
    def reported(self) -> bool:
        """A result report was read (:mod:`agents.unread`)."""
        return self._unread.reported

    @property
    def pausing(self) -> bool:
        """Whether a pause now would end plain text's partial line (:attr:`Parser.pausing`)."""
        return isinstance(self._parser, Parser) and self._parser.pausing

    def settle(self) -> list[Item]:
        """The output paused: plain text's :meth:`Parser.settle` (a JSONL output's lines are whole)."""
        if isinstance(self._parser, Parser):
            return self._unread.items(self._parser.settle())
        return []

    def close(self) -> list[Item]:
        """End of output: the last items, and a section held by :mod:`agents.unread` named."""
        items: list[Item] = []
        if self._parser is None:
            items = self._start(self._detector.decide(bytes(self._head), final=True))
        assert self._parser is not None
        return items + self._unread.close(self._parser.close(), self._fed)

    def _start(self, fmt: Format) -> list[Item]:
        self.format = fmt
        if fmt in LINE_FORMATS:
            self._parser = TranscriptParser(
                fmt=fmt, max_block_bytes=self.max_block_bytes, first_line=self._first_line
            )
        else:
            self._parser = Parser(max_block_bytes=self.max_block_bytes)
        head, self._head = bytes(self._head), bytearray()
        return self._unread.items(self._parser.feed(head)) if head else []
