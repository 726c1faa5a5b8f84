"""The incremental parser of agent output: text signals and result reports, from bytes of any chunking.

A :class:`Parser` is fed the raw bytes an agent prints, in chunks of any size, and yields
:data:`Found` values: a :class:`SignalItem` per valid signal block, a :class:`ResultItem` per valid
``## <Agent> Result`` report, an :class:`ErrorItem` for anything malformed, and an
:class:`UnreadReportItem` for a section that reads as a report under a heading that is not a report's
(:mod:`agents.unread` holds it). Feeding a text in one
piece or split at any points yields the same items, with the same ``line`` (1-based line of the opening
tag or heading) and ``offset`` (byte offset of the block's first byte: the tag line's first byte after
its indentation, or the first ``#`` of the heading), so envelope ids derived from offsets are
deterministic.

Recognition rules:

- An opening tag ``[STOP_WORK]`` (likewise CLARIFICATION_NEEDED, DELEGATE_WORK, COMPLETION_REPORT,
  PROGRESS) alone on its line opens a block; indentation and a trailing CR are allowed, so a block may sit
  in a ```yaml fence or a list item, and so are Markdown emphasis (``**[STOP_WORK]**``) and terminal escape
  sequences around the tag. An inline mention ("I will emit [STOP_WORK] if ...") is prose, and so is a tag in
  inline code or a quote, or a heading (``### [STOP_WORK]``: a protocol explained). The body is dedented
  by the opening tag's indentation and ends at the matching closing tag, which may have text after it; a
  closing tag outside a block is prose.
- An opening tag with other text after it on its line (``[STOP_WORK] - blocked on npm``) opens a
  tentative block (:mod:`agents.tentative`): a block, read as any other, when its own closing tag comes
  next, alone on its line, around a body that is a valid signal; prose, with no item (never an error),
  when anything else comes first (another tag line, a closing tag with text after it, a body that is no
  valid signal, a heading of level 1 or 2 as far left as the tag line, the size limit, the end of input).
  The text after the tag is not part of the body. Its lines are kept until it is decided, then scanned
  again from its tag line, taken as decided, so that nothing after a mention is lost: the items after that
  line wait for the decision. Inside a block such a line is part of the body; inside a report, one that
  makes a block ends the report, one that is prose is part of it.
- An opening tag while a block is open ends the open block with an error (it was never terminated) and
  starts the new block: agents do not nest signals, and dropping the new, probably complete, block to
  keep waiting for a terminator that may never come would lose a valid signal. A closing tag of another
  type also ends the open block with an error, and so does a ``## <Agent> Result`` heading no further
  right than the block's tag (a YAML body holds none: it would be a comment), which starts its report.
- A block still open at :meth:`Parser.close` is an error, never a partial signal.
- A block that is not a valid signal and whose ``agent_id`` and ``timestamp`` are both ``<placeholders>``
  is a signal template (an agent echoing its prompt, or quoting the protocol): it yields nothing.
- A report starts at a ``## <Agent> Result`` heading, or at one written otherwise (``## **Auditor
  Result**``, ``## Auditor RESULT:``), which makes a report only if it reads as one: anything wrong with
  it means prose. A report of ``[Agent Name]`` (a quoted template) yields nothing, or an
  :class:`UnreadReportItem` when filled in (a summary without ``[placeholders]``). A heading of level 1 to
  3 whose last word is ``Result`` or ``Results`` otherwise (``## Auditor Results``, ``# Auditor Result``,
  ``## Result ✅``) starts no report; what it holds, read as a report's sections, is an
  :class:`UnreadReportItem` when it reads as one, and prose either way. It runs to the next heading of
  level 1 or 2 (one of level 3 also to the next of level 3), the next opening tag, or the end of input;
  headings inside code fences do not end it. A section of level 1 that starts outside code fences runs
  over the headings of level 2 that start nothing, read as its sections (``# Tester Result`` over ``##
  Status``: a report a level up), and one of level 3 over those of level 3 (``### Tester Result`` over
  ``### Status`` as over ``#### Status``), or as far as the first of them when the whole reads as less. A
  report that starts inside a fence (the seeds show reports inside ```markdown fences) also ends at that
  fence's closing line. A bare fence line there is ambiguous (it may open a code block inside the report),
  so it is taken as the end only once the lines after it show it (a heading or a fence with an info string
  inside the supposed code block, a signal, the end of input, or the size limit); the bytes after it are
  then scanned again.

A carriage return not followed by a line feed ends a line, as it does in YAML and Markdown: a program
that draws a progress line (``Scanning 20%\r``) and then prints a tag puts the tag at the start of a
line on the terminal, and so it is here (offsets do not change; line numbers count such lines). One
followed by another is a space, so ``\r\r\n`` (a CRLF through a terminal) ends one line. Any
terminal escape sequence is allowed around a tag (a spinner's ``\x1b[1G\x1b[0K``, a window title), as
colour codes are; text before a tag that cursor moves alone erased (no CR) still makes its line prose.

A UTF-8 byte order mark at the very start of the output (some editors and Windows tools write one) is
skipped, so the first line can still be a tag line; offsets still count its three bytes, as they are
offsets in the output as it is (a file adapter's read offsets are the same). Anywhere else it is prose.

Limits: a block or report body over ``max_block_bytes`` is reported once and its bytes are dropped as
they arrive (a tentative block's makes it prose, so at most that much of it is kept). A line longer than
:data:`MAX_TAG_LINE` is never a tag, heading or fence line, so outside blocks at most that much of a
partial line is kept. Only block bodies and reports are decoded; invalid UTF-8 is an error naming the
line in a block, a violation of the report (read as U+FFFD) in a report, and prose outside them is never
decoded.

The parser cuts its input into lines; :mod:`agents.scanner` reads them by these rules.
"""

from __future__ import annotations

import re
from typing import Final

from agents.blocks import SIGNAL_TYPES, SignalPayload, describe_errors
from agents.items import ErrorItem, Found, Item, ResultItem, SignalItem, UnreadReportItem
from agents.lines import MAX_TAG_LINE
from agents.scanner import Scanner

__all__ = [
    "DEFAULT_MAX_BLOCK_BYTES",
    "MAX_TAG_LINE",
    "SIGNAL_TYPES",
    "ErrorItem",
    "Found",
    "Item",
    "Parser",
    "ResultItem",
    "SignalItem",
    "SignalPayload",
    "UnreadReportItem",
    "describe_errors",
    "parse_text",
]

DEFAULT_MAX_BLOCK_BYTES: Final = 1 << 20
_BOM: Final = b"\xef\xbb\xbf"
_LONE_CR: Final = re.compile(rb"\r(?!\n)")
_CR_BEFORE_CR: Final = re.compile(rb"\r(?=\r)")


def _lines_of(chunk: bytes) -> bytes:
    """The chunk with each carriage return that ends a line on its own made a line feed (same length, so
    offsets stay the output's). Counting first is two passes in C: CRLF output pays nothing more.

    A carriage return followed by another is a space: ``\r\r\n`` (CRLF through a terminal, which adds a
    CR to each LF: output kept by ``script``, or a container's with a TTY) ends one line, as the terminal
    shows it, not two with a blank line between, which would cut a report's table and its summary."""
    if b"\r" in chunk and chunk.count(b"\r") != chunk.count(b"\r\n"):
        if b"\r\r" in chunk:
            chunk = _CR_BEFORE_CR.sub(b" ", chunk)
        return _LONE_CR.sub(b"\n", chunk)
    return chunk


class Parser:
    """Incremental parser: :meth:`feed` bytes as they arrive, :meth:`close` at the end of input.

    It cuts what it is fed into regions of complete lines for its :class:`~agents.scanner.Scanner`, and
    keeps the partial line: a line too long to be a tag line is dropped as it comes, unless it is part
    of an open body."""

    def __init__(
        self, *, max_block_bytes: int = DEFAULT_MAX_BLOCK_BYTES, context: str = "", end: str = "end of input"
    ) -> None:
        """``context`` follows the "at line N" of error messages (a transcript names its JSONL line), and
        ``end`` says what the end of input is to a block left open there (a transcript's message)."""
        if max_block_bytes < 1:
            raise ValueError("max_block_bytes must be positive")
        self.max_block_bytes = max_block_bytes
        self._scanner = Scanner(max_block_bytes, context, end)
        self._partial = bytearray()  # the current incomplete line
        self._pos = 0  # stream offset of the partial line
        self._skipping = False  # the partial line was too long and dropped; skip to its end
        self._closed = False
        self._head: bytes | None = b""  # the output's first bytes while they may be a split BOM
        self._cr = False  # the last chunk ended in a CR, kept back until the next byte tells what it ends

    def feed(self, chunk: bytes) -> list[Found]:
        """Consume the next bytes of output; returns the items completed by them."""
        if self._closed:
            raise ValueError("feed() after close()")
        if self._head is not None:
            head = self._head + chunk
            if len(head) < len(_BOM) and _BOM.startswith(head):
                self._head = head
                return []
            self._head = None
            chunk = head
            if head.startswith(_BOM):
                chunk = head[len(_BOM) :]
                self._pos = len(_BOM)
        chunk = self._line_ends(chunk)
        start = 0
        if self._skipping:
            start = chunk.find(b"\n") + 1
            if start == 0:
                self._pos += len(chunk)
                return self._scanner.drain()
            self._pos += start
            self._scanner.line += 1
            self._skipping = False
        last = chunk.rfind(b"\n", start)
        if last < 0:
            self._partial += chunk[start:]
        else:
            region = b"\n" + bytes(self._partial) + chunk[start : last + 1]
            self._partial = bytearray(chunk[last + 1 :])
            base = self._pos
            self._pos += len(region) - 1
            self._scanner.run(region, base)
        if len(self._partial) > MAX_TAG_LINE and not self._scanner.keeps_line(self._pos + len(self._partial)):
            self._pos += len(self._partial)
            self._partial = bytearray()
            self._skipping = True
        return self._scanner.drain()

    def _line_ends(self, chunk: bytes) -> bytes:
        """The chunk as :func:`_lines_of` makes it, less a last CR, kept back until the next byte tells
        what it ends (a line on its own, or one with the LF after it)."""
        if self._cr:
            chunk = b"\r" + chunk
        self._cr = chunk.endswith(b"\r")
        chunk = _lines_of(chunk)  # whole: a CR before the one kept back is known to be followed by a CR
        return chunk[:-1] if self._cr else chunk

    @property
    def pausing(self) -> bool:
        """Whether a pause now would end the partial line (:meth:`settle`): it is the open block's
        closing tag."""
        return not self._closed and not self._skipping and self._scanner.closes(self._partial)

    def settle(self) -> list[Found]:
        """The output paused: a partial line that is the closing tag of the open block ends it now, and
        the rest of its line, if any comes, is skipped. An agent that ends its output with a closing tag
        and no newline, then waits for its answer, would otherwise wait for ever. (What follows a closing
        tag on its line is nothing, unless it makes the line longer than :data:`MAX_TAG_LINE`, which no
        longer makes the line prose once it paused.)"""
        if not self.pausing:
            return []
        partial = bytes(self._partial)
        self._scanner.run(b"\n" + partial + b"\n", self._pos)
        self._scanner.line -= 1  # counted again when the skip reaches the line's newline
        self._pos += len(partial)
        self._partial = bytearray()
        self._skipping = True
        return self._scanner.drain()

    def close(self) -> list[Found]:
        """End of input: the last line is complete, and a block still open is an error."""
        if self._closed:
            return []
        self._closed = True
        if self._cr:
            self._partial += b"\r"
        if self._partial and not self._skipping:
            region = b"\n" + bytes(self._partial) + b"\n"
            self._partial = bytearray()
            self._scanner.run(region, self._pos)
        self._scanner.close()
        return self._scanner.drain()


def parse_text(text: str | bytes, *, max_block_bytes: int = DEFAULT_MAX_BLOCK_BYTES) -> list[Found]:
    """All the items of a complete output."""
    parser = Parser(max_block_bytes=max_block_bytes)
    data = text.encode() if isinstance(text, str) else text
    return parser.feed(data) + parser.close()
