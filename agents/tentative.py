"""A tentative block: an opening tag with text after it on its line, until the lines after it tell what it is.

``[STOP_WORK] - blocked on npm`` may open a signal whose body follows, or be prose that explains the
protocol ("[STOP_WORK] is what I print when blocked"). The scanner keeps the lines after such a tag line,
unread, until something decides it:

- its own closing tag, alone on its line, around a body that is a valid signal: a block, read as any
  other. The closing tag says a block was meant and the valid body that it was a signal; anything less
  may be prose explaining the protocol ("[STOP_WORK] opens it, [/STOP_WORK] closes it", an example with
  made-up fields), which must not become an error that blocks an agent;
- anything else first (a closing tag of another type or with text after it, a body that is not a valid
  signal, another opening tag, a result report's heading or a heading of level 1 or 2 as far left as the
  tag line, a body over the size limit, the end of input): prose. A heading indented deeper than the tag
  line is a line of its body (in a YAML block scalar); a tag line is not (a deeper one too ends the block
  as prose, which keeps the rescans linear: a signal whose block scalar holds ``[PROGRESS] x`` is read
  only after a tag alone on its line).

Either way the scanner then scans the kept lines again from the tag line, which it now knows to open a
block or not: nothing after a prose mention is lost, and since a tentative block ends at the next tag
line, the lines it kept are scanned again once, when it is decided. The text after the tag is never part
of the body.
"""

from __future__ import annotations

from agents.blocks import BlockError, decode_body
from agents.lines import TYPE_OF_TAG, Hit

__all__ = ["Tentative"]


class Tentative:
    """An open tentative block: its tag line and the complete lines after it, kept until it is decided."""

    __slots__ = ("at", "body_start", "indent", "indent_width", "kept", "kind", "line")

    def __init__(self, hit: Hit, tag_line: bytes) -> None:
        """``tag_line``: the tag line with the newline before it and its own."""
        assert hit.tag is not None
        self.kind = TYPE_OF_TAG[hit.tag]
        self.at = hit.at
        """The stream offset of the tag line's first byte."""
        self.line = hit.line
        self.indent = len(hit.indent)
        self.indent_width = len(hit.indent.expandtabs(4))
        self.body_start = hit.next_at
        """The stream offset of its body: the line after the tag line (the text after the tag is not in
        it)."""
        self.kept = bytearray(tag_line)
        """A region: a newline, then its tag line and the complete lines after it."""

    def over(self, end: int, limit: int) -> bool:
        """Whether its body, up to stream offset ``end``, is over ``limit`` bytes: then it is prose."""
        return end - self.body_start > limit

    def keep(self, lines: bytes) -> None:
        """Keep the next complete lines of its body."""
        self.kept += lines

    def decided_by(self, hit: Hit, rest: memoryview, limit: int) -> bool | None:
        """What a candidate line after it decides: None when it is a line of its body (a fence, a heading
        that starts no report), else whether it is a block. ``rest``: the lines between those kept and
        this one; ``limit``: the most bytes its body may have."""
        if hit.tag is None:
            if len(hit.indent.expandtabs(4)) > self.indent_width:
                return None  # a line of a block scalar in the body
            # a heading as far left as the tag: not in a YAML body (a report's heading, or one that ends
            # the report the tag line is in)
            return False if hit.report() is not None or hit.is_heading else None
        return hit.close and hit.alone and not self.over(hit.at, limit) and self._closed_by(hit.tag, rest)

    def _closed_by(self, tag: bytes, rest: memoryview) -> bool:
        """Whether its closing tag ``tag`` makes it a block, its body being the lines kept and ``rest``:
        only a valid signal does (an invalid one would be an error that blocks an agent, for what may be
        prose explaining the protocol with made-up fields)."""
        if TYPE_OF_TAG[tag] is not self.kind:
            return False
        body = bytes(self.kept[1 + self.body_start - self.at :]) + rest
        try:
            decode_body(self.kind, body, indent=self.indent)
        except BlockError:
            return False
        return True
