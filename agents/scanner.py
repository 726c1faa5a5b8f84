"""The parser's scanner: regions of complete lines of agent output into signal, report and error items.

:class:`~agents.parser.Parser` cuts the bytes it is fed into regions of complete lines; a :class:`Scanner`
reads them in stream order and keeps what lies between them: outside any block, in a signal block, in a
result report, and a tentative block open over any of these but a block (:mod:`agents.tentative`). The
rules it follows are the parser's (see :mod:`agents.parser`); what it keeps, and the items it makes of
it, are its state's (:mod:`agents.scan_state`).

A region is a newline followed by complete lines, so the expressions of :mod:`agents.lines` are anchored
on newlines, and only candidate lines (tags, fences, headings of level 1 to 3) are looked at; the bytes of
an open block or report are kept between them. Some lines are decided only by the lines after them (a bare
fence that may end a report, a tentative tag line): the lines kept since are then scanned again, before
the rest of the region, which is resumed, never copied.
"""

from __future__ import annotations

import re

from agents.items import UnreadReportItem
from agents.lines import (
    HASHES_GROUP,
    HEADING_2,
    HEADING_GROUP,
    HIT,
    MAX_TAG_LINE,
    TAG_GROUP,
    TAG_LINE,
    TYPE_OF_TAG,
    Fence,
    Heading,
    Hit,
    closing_tag,
    ends_block,
    tentative,
)
from agents.report_end import End, ReportEnd
from agents.scan_state import ScanState, State
from agents.tentative import Tentative
from agents.titles import is_placeholder

__all__ = ["Scanner"]

_MAPPING = re.compile(rb":(?:[ \t\r]|$)", re.MULTILINE)
"""What any YAML mapping holds (``key: value``, ``key:``): a body without it cannot be a signal."""

# What a decision gives back to scan again: a region of lines (or b""), the stream offset of its first
# line, then where the region being scanned resumes (the index of the newline before its next line).
_Rewind = tuple[bytes, int, int]


class Scanner(ScanState):
    """The items of the regions :meth:`run` is given, in stream order; :meth:`close` at the end."""

    def keeps_line(self, end: int) -> bool:
        """Whether a partial line too long to be a tag line (ending, so far, at stream offset ``end``) is
        part of an open body within the size limit; if not, it is dropped, and past the limit what is
        open is decided first (a tentative block is prose, a report may end at its pending fence)."""
        while True:
            if self._tent is not None:
                if not self._tent.over(end, self._limit):
                    return True
                self._rescan(self._decide(False))
                continue
            if self._state is State.OUTSIDE or self._discard:
                return False
            if end - self._body_start <= self._limit:
                return True
            if self._state is State.REPORT and self._ends.pending is not None:
                self._rescan(self._resolve())
                continue
            self._check_size(end)
            return False

    def closes(self, line: bytes | bytearray) -> bool:
        """Whether ``line`` (the partial line) is the closing tag of the open block, so that what may
        follow it on its line changes nothing: text after a closing tag is nothing."""
        return self._state is State.BLOCK and self._tent is None and closing_tag(line) is self._type

    def close(self) -> None:
        """End of input, after the last region: a tentative block is prose, a block still open an error,
        a report ends."""
        while self._tent is not None or (self._state is State.REPORT and self._ends.pending is not None):
            self._rescan(self._decide(False) if self._tent is not None else self._resolve())
        if self._state is State.BLOCK and not self._discard:
            self._error(f"not terminated ({self._end})")
        elif self._state is State.REPORT:
            self._emit_report(None if self._discard else bytes(self._body))
        self._state = State.OUTSIDE

    def run(self, region: bytes, base: int) -> None:
        """Scan a region, and what decisions in it give back to scan again before the rest of it. The
        rest is resumed, never copied: a decision per line must not cost the length of the region."""
        todo = [(region, base, 0)]
        while todo:
            region, base, start = todo.pop()
            rewind = self._scan(region, base, start)
            if rewind is not None:
                again, again_base, resume = rewind
                if resume < len(region) - 1:
                    todo.append((region, base, resume))
                if again:
                    todo.append((again, again_base, 0))

    def _rescan(self, rewind: _Rewind) -> None:
        """Scan what a decision taken after the last region gives back (that region is all kept)."""
        again, base, _ = rewind
        if again:
            self.run(again, base)

    def _scan(self, region: bytes, base: int, start: int) -> _Rewind | None:
        """Handle the candidate lines of ``region`` (``\\n`` + complete lines, the first at stream offset
        ``base``) from index ``start`` (a newline) on."""
        self._region = region
        self._seg = start + 1
        pos, line = start + 1, self.line
        resume = start
        while (m := HIT.search(region, resume)) is not None:
            resume = m.end()
            is_tag = m.lastindex == TAG_GROUP
            maybe = is_tag and tentative(m)
            if self._state is State.BLOCK and (maybe or not is_tag) and not ends_block(m, self._indent):
                continue  # fences, headings and tags with text after them mean nothing inside a block
            if m.end(HASHES_GROUP) - m.start(HASHES_GROUP) == 3 and not self._third_level(m):
                continue  # a heading of level 3 is a report's section, or may start a section in the prose
            start = m.start()
            end = region.find(b"\n", resume)
            if end - start > MAX_TAG_LINE + 1:
                continue
            line += region.count(b"\n", pos, start + 1)
            pos = start + 1
            if self._tent is not None:
                rewind = self._tentative_hit(Hit(m, base, end, line))
            elif is_tag and not maybe and self._state is not State.REPORT:
                tagged = self._tag(m, base + start, end, line)  # the usual hit, taken without a Hit
                if isinstance(tagged, int):
                    resume = tagged
                    continue
                return tagged
            else:
                rewind = self._hit(self._decided_hit(Hit(m, base, end, line)))
            if rewind is not None:
                return rewind
        self.line = line + region.count(b"\n", pos)
        return self._keep(region, base + len(region) - 1)

    def _keep(self, region: bytes, end: int) -> _Rewind | None:
        """At the end of a region (``end``: its stream end), keep the open body's bytes, or decide what
        its size decides."""
        if self._tent is not None:
            if self._tent.over(end, self._limit):
                return self._decide(False)
            self._tent.keep(region[self._seg :])
            self._seg = len(region)
        elif self._state is State.BLOCK and not self._discard:
            self._body += region[self._seg :]
            self._seg = len(region)
            self._check_size(end)
        elif self._state is State.REPORT and not self._discard:
            if self._ends.pending is not None and end - self._body_start > self._limit:
                return self._resolve()
            self._body += region[self._seg :]
            self._seg = len(region)
            self._check_size(end)
        return None

    def _hit(self, hit: Hit) -> _Rewind | None:
        """A fence or heading line outside a block, or any line in a report, or a tentative tag line; or
        a result report's heading in a block (:func:`~agents.lines.ends_block`)."""
        if self._state is State.BLOCK:
            prose = self._unterminated(hit)
            if prose is not None:
                return prose
        if hit.tentative:
            return self._open_tentative(hit)
        if self._state is State.REPORT:
            rewind = self._report_hit(hit)
            if rewind is not None or self._state is State.REPORT:
                return rewind
            if hit.fence is not None:
                return None  # the report consumed its closing fence
        self._outside(hit)
        return None

    def _unterminated(self, hit: Hit) -> _Rewind | None:
        """End the open block at a report's heading, with its error (or the size limit's, as at a tag)."""
        if hit.at - self._body_start > self._limit:
            self._check_size(hit.at)
        message = f"not terminated before the result report at line {hit.line}"
        prose = self._not_terminated(hit.start - 1, message)
        self._state = State.OUTSIDE
        return prose

    def _not_terminated(self, end: int, message: str) -> _Rewind | None:
        """The open block ends at the newline ``end`` in the region without its closing tag: an error,
        but for a body that holds no mapping at all, which is no signal the agent failed to finish but a
        drawing of the protocol whose tags stand alone on their lines (seed 003's diagrams). That is
        prose: its lines are given back to be scanned as prose, as a tentative block's are, and then the
        line that ended it. (They hold no closing tag, which would have closed the block, so a tag line
        in them cannot be taken for a block again.)"""
        if self._discard:
            return None
        body = bytes(self._body) + self._region[self._seg : end + 1]
        if _MAPPING.search(body) is not None:
            self._error(message)
            return None
        self._state = State.OUTSIDE
        self.line = self._start_line + 1
        return (b"\n" + body if body else b""), self._body_start, end

    def _outside(self, hit: Hit) -> None:
        """A line outside a block or report: a tag opens a block, a fence opens or closes a code block, a
        report's heading opens a report."""
        if hit.tag is not None:
            if hit.opens:
                self._open_block(hit.tag, len(hit.indent), hit.at, hit.next_at, hit.end + 1, hit.line)
        elif hit.fence is not None:
            self._toggle_fence(hit)
        elif (report := hit.report()) is not None:
            self._open_report(hit, *report)

    def _toggle_fence(self, hit: Hit) -> None:
        """A fence line in the prose: it closes the open code fence, or opens one (inside an open fence,
        a fence that does not close it is the code's)."""
        assert hit.fence is not None
        self._fence = None if hit.closes(self._fence) else self._fence or (hit.fence[0], len(hit.fence))

    def _third_level(self, m: re.Match[bytes]) -> bool:
        """Whether a heading of level 3 may mean something here: in the prose outside code fences, one
        that may title a report written a level down; in a section under such a heading, any."""
        if self._tent is not None:
            return False
        if self._state is State.OUTSIDE:
            return self._fence is None and b"esult" in m.group(HEADING_GROUP).lower()  # a cheap look first
        return self._state is State.REPORT and self._ends.level == 3

    def _decided_hit(self, hit: Hit) -> Hit:
        """The hit, a tentative tag line taken as what the lines after it were found to make it."""
        if hit.tentative and self._decided[0] == hit.at:
            hit.tentative = False
            hit.opens = self._decided[1]
        return hit

    def _open_tentative(self, hit: Hit) -> _Rewind | None:
        """A tentative tag line outside a block: the state waits (a report keeps its bytes up to the line)
        while the lines after it are kept, until they decide it."""
        if self._state is State.REPORT:
            rewind = self._report_limits(hit)
            if rewind is not None:
                return rewind
            if not self._discard:
                self._body += self._region[self._seg : hit.start]
        self._tent = Tentative(hit, self._region[hit.start - 1 : hit.end + 1])
        self._seg = hit.end + 1
        return None

    def _tentative_hit(self, hit: Hit) -> _Rewind | None:
        """A candidate line while a tentative block is open: it may decide it."""
        assert self._tent is not None
        # A view of the lines since those kept, not a copy: only a closing tag reads them, and a copy for
        # every fence or heading of a long body made its scan quadratic.
        rest = memoryview(self._region)[self._seg : hit.start]
        block = self._tent.decided_by(hit, rest, self._limit)
        return None if block is None else self._decide(block)

    def _decide(self, block: bool) -> _Rewind:
        """Close the tentative block, a block or prose: its lines are scanned again from its tag line,
        which is then taken as decided, and then the rest of the region."""
        assert self._tent is not None
        tent, self._tent = self._tent, None
        self._decided = (tent.at, block)
        self.line = tent.line
        return bytes(tent.kept), tent.at, self._seg - 1

    def _tag(self, m: re.Match[bytes], at: int, end: int, line: int) -> int | _Rewind:
        """A tag line (stream offset ``at``, ending at ``end`` in the region) outside a report: it opens
        a block, or ends the open one. Returns where the scan of the region goes on, or what to scan
        before it (:meth:`_not_terminated`)."""
        indent, slash, tag = m.group(1, 2, 3)
        if self._state is State.BLOCK:
            if at - self._body_start > self._limit:
                self._check_size(at)
            if self._discard:
                pass
            elif slash and TYPE_OF_TAG[tag] is not self._type:
                self._error(f"closed by [/{tag.decode()}] at line {line}")
            elif slash:
                self._emit_block(bytes(self._body) + self._region[self._seg : m.start() + 1])
            else:
                message = f"not terminated before the [{tag.decode()}] at line {line}"
                prose = self._not_terminated(m.start(), message)
                if prose is not None:
                    return prose
            if slash:
                self._state = State.OUTSIDE
                return m.end()
        elif slash:
            return m.end()  # a closing tag outside a block is prose
        self._open_block(tag, len(indent), at, at - m.start() + end, end + 1, line)
        return self._whole_block(tag, at - m.start(), end) or m.end()

    def _whole_block(self, tag: bytes, base: int, end: int) -> int | None:
        """The block just opened (its tag line ending at ``end``), when its own closing tag is the next
        tag line of the region: emitted at once, and the scan goes on after that tag (the lines between
        are nothing to a block). ``None`` leaves the block to the scan."""
        region = self._region
        close = TAG_LINE.search(region, end)
        while close is not None and tentative(close):
            close = TAG_LINE.search(region, close.end())  # a line of the body
        if (
            close is None
            or HEADING_2.search(region, end, close.start()) is not None  # it may end the block: see _scan
            or not close.group(2)
            or close.group(3) != tag
            or region.find(b"\n", close.end()) - close.start() > MAX_TAG_LINE + 1
            or base + close.start() - self._body_start > self._limit
        ):
            return None
        self._emit_block(region[end + 1 : close.start() + 1])
        self._state = State.OUTSIDE
        return close.end()

    def _open_block(self, tag: bytes, indent: int, at: int, body_start: int, seg: int, line: int) -> None:
        """Open a block at the tag line at stream offset ``at``; its body starts at ``body_start``
        (``seg`` in the region)."""
        self._state = State.BLOCK
        self._type = TYPE_OF_TAG[tag]
        self._open(line, body_start, seg)
        self._start_offset = at + indent
        self._indent = indent

    def _open_report(self, hit: Hit, agent: bytes, heading: Heading) -> None:
        self._state = State.REPORT
        self._agent = agent
        if heading is not Heading.UNREAD and is_placeholder(agent.decode(errors="replace")):
            heading = Heading.TEMPLATE
        self._heading = heading
        self._prefix = None
        self._open(hit.line, hit.at, hit.start)
        self._start_offset = hit.at + len(hit.indent)
        self._ends, self._fence = ReportEnd(self._fence, heading, hit.hashes), None

    def _report_limits(self, hit: Hit) -> _Rewind | None:
        """Check a report's size at a hit: over the limit, a pending bare fence ends it."""
        if self._ends.pending is not None and hit.at - self._body_start > self._limit:
            return self._resolve()
        self._check_size(hit.at)
        return None

    def _report_hit(self, hit: Hit) -> _Rewind | None:
        """Track a report's end; leaves the REPORT state when the hit ends it."""
        rewind = self._report_limits(hit)
        if rewind is not None:
            return rewind
        first = not self._ends.extended
        if self._ends.runs_over(hit):
            if first and not self._discard:
                prefix = self._report_item(self._before(hit))
                self._prefix = prefix if isinstance(prefix, UnreadReportItem) else None
            return None
        end = self._ends.at(hit, read_past=self._discard)
        if end is End.PENDING:
            return self._resolve()
        if end is not None:
            self._end_report(hit, self._ends.fence_after if end is End.BEFORE else None)
        return None

    def _end_report(self, hit: Hit, fence: Fence | None) -> None:
        self._emit_report(None if self._discard else self._before(hit))
        self._state = State.OUTSIDE
        self._fence = fence

    def _resolve(self) -> _Rewind:
        """The pending bare fence closed the report's enclosing fence: end the report there, and scan
        again the lines after that fence line (those kept, then the rest of the region)."""
        assert self._ends.pending is not None
        at, next_at, line = self._ends.pending
        body, start, seg = self._body, self._body_start, self._seg
        kept = start + len(body)  # the stream offset of the region's bytes from seg
        self._emit_report(bytes(body[: at - start]) + self._region[seg : seg + max(0, at - kept)])
        self._state = State.OUTSIDE
        self._fence = self._ends.pending = None
        self.line = line
        if next_at < kept:
            return b"\n" + bytes(body[next_at - start :]), next_at, seg - 1
        return b"", next_at, seg - 1 + next_at - kept

    def _before(self, hit: Hit) -> bytes:
        """The open body's bytes up to the hit's line."""
        return bytes(self._body) + self._region[self._seg : hit.start]
