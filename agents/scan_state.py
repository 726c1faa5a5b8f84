"""The scanner's state: the block or result report open and its kept bytes, and the items made of them.

:class:`~agents.scanner.Scanner` reads regions of lines into this state, which is held here between
regions (:attr:`ScanState.line`, the open block or report, a code fence open in the prose, a tentative
block open over them) and turned into items: a block or report emitted, an error for one not terminated
or over the size limit.
"""

from __future__ import annotations

from enum import Enum, auto

from agents.items import ErrorItem, Found, UnreadReportItem, block_item, report_item
from agents.lines import Fence, Heading
from agents.report_end import ReportEnd
from agents.tentative import Tentative
from bus.envelope import EnvelopeType

__all__ = ["ScanState", "State"]

_T = EnvelopeType


class State(Enum):
    OUTSIDE = auto()
    BLOCK = auto()
    REPORT = auto()


class ScanState:
    """What the scanner holds between regions, and the items it completes; :meth:`drain` takes them."""

    def __init__(self, max_block_bytes: int, context: str, end: str) -> None:
        self._limit = max_block_bytes
        self._context = context
        self._end = end  # what the end of input is, for a block it leaves open
        self._out: list[Found] = []
        self.line = 1
        """The line number of the next region's first line (the parser counts the lines it drops)."""
        self._state = State.OUTSIDE
        self._fence: Fence | None = None  # a code fence open in the prose
        self._tent: Tentative | None = None  # a tentative block open over the state, which waits for it
        self._decided = (-1, False)  # the last tentative tag line decided: its offset, whether it opens
        # the open block or report
        self._type = _T.STOP_WORK
        self._agent = b""
        self._start_line = 0
        self._start_offset = 0
        self._indent = 0
        self._body = bytearray()  # kept bytes, from stream offset _body_start
        self._body_start = 0
        self._region = b""  # the region being scanned
        self._seg = 1  # where the open body's bytes begin in it
        self._discard = False
        self._ends = ReportEnd(None)  # where the open report ends
        self._heading = Heading.CONTRACT  # how the open report's heading may start one
        self._prefix: UnreadReportItem | None = None  # an extended section's start read (see _emit_report)

    def drain(self) -> list[Found]:
        """The items completed since the last call."""
        out, self._out = self._out, []
        return out

    def _open(self, line: int, body_start: int, seg: int) -> None:
        self._start_line = line
        self._body = bytearray()
        self._body_start = body_start
        self._seg = seg
        self._discard = False

    def _check_size(self, end: int) -> None:
        """Report an open body grown past the limit once, then drop its bytes as they come."""
        if not self._discard and end - self._body_start > self._limit:
            if self._state is not State.REPORT or self._heading is Heading.CONTRACT:  # others may be prose
                self._error(f"larger than {self._limit} bytes; skipped")
            self._discard = True
            self._body = bytearray()
            self._ends.pending = None

    def _where(self) -> str:
        if self._state is State.REPORT:
            agent = self._agent.decode(errors="replace")
            return f"result report '{agent}' at line {self._start_line}{self._context}"
        return f"{self._type.value} block at line {self._start_line}{self._context}"

    def _error(self, message: str) -> None:
        kind = _T.RESULT if self._state is State.REPORT else self._type
        where = self._where()
        self._out.append(
            ErrorItem(
                line=self._start_line, offset=self._start_offset, message=f"{where}: {message}", type=kind
            )
        )

    def _emit_block(self, body: bytes) -> None:
        line, offset = self._start_line, self._start_offset
        item = block_item(self._type, body, indent=self._indent, line=line, offset=offset, where=self._where)
        if item is not None:
            self._out.append(item)

    def _emit_report(self, content: bytes | None) -> None:
        """Emit the open report's item; ``content`` None: its bytes were dropped (over the size limit). A
        section that ran over headings (:meth:`ReportEnd.runs_over`) is what it reads as up to the first
        of them when the whole reads as less: its own later sections may undo it (an empty ``## Status``
        after ``**Status:** SUCCESS``), and only its start is left over the size limit."""
        item = None if content is None else self._report_item(content)
        prefix = self._prefix
        if prefix is not None and not (
            isinstance(item, UnreadReportItem) and item.findings >= prefix.findings
        ):
            item = prefix
        if item is not None:
            self._out.append(item)

    def _report_item(self, content: bytes) -> Found | None:
        return report_item(
            content,
            heading=self._heading,
            line=self._start_line,
            offset=self._start_offset,
            where=self._where,
            context=self._context,
        )
