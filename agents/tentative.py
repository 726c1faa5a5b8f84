"""A tentative block: an opening tag with text after it on its line, until the lines after it tell what it is.

``[STOP_WORK] - blocked on npm`` may open a signal whose body follows, or be prose that explains the
protocol ("[STOP_WORK] is what I print when blocked"). The scanner keeps the lines after such a tag line,
unread, until something decides it:

- its own closing tag, with a body that names one of the signal's fields as a key (``agent_id:``,
  ``details:``, ``"agent_id":`` in the JSON form) or is a valid signal: a block, read as any other (a
  signal, an error, or nothing for a template). The closing tag says a block was meant, and the fields say
  it was a signal, not a sentence between two tags ("[STOP_WORK] opens it, [/STOP_WORK] closes it");
- anything else first (a closing tag of another type or with a body that names no field, another opening
  tag, a result report's heading, a body over the size limit, the end of input): prose.

Either way the scanner then scans the kept lines again from the tag line, which it now knows to open a
block or not: nothing after a prose mention is lost, and since a tentative block ends at the next tag
line, the lines it kept are scanned again once, when it is decided. The text after the tag is never part
of the body.
"""

from __future__ import annotations

import re
from typing import Final

from agents.blocks import SIGNAL_MODELS, BlockError, decode_body
from agents.lines import TYPE_OF_TAG, Hit
from bus.envelope import EnvelopeType

__all__ = ["Tentative", "names_fields"]

# A key of the body's mapping at the start of a line: YAML (``details:``), or JSON (``{"agent_id":``, a
# key on a line of its own); a list item's keys (``- agent_id: ...``) are not the body's. The seed's JSON
# form names its own keys beside the payload's.
_FIELDS: Final = {
    kind: re.compile(
        rb"(?m)^[ \t]*\{?[ \t]*[\"']?(?:"
        + b"|".join(name.encode() for name in (*model.model_fields, "signal_type", "payload"))
        + rb")[\"']?[ \t]*:"
    )
    for kind, model in SIGNAL_MODELS.items()
}


def names_fields(kind: EnvelopeType, body: bytes) -> bool:
    """Whether a body names one of the fields of a ``kind`` signal as a key at the start of a line."""
    return _FIELDS[kind].search(body) is not None


class Tentative:
    """An open tentative block: its tag line and the complete lines after it, kept until it is decided."""

    __slots__ = ("at", "body_start", "indent", "kept", "kind", "line")

    def __init__(self, hit: Hit, tag_line: bytes) -> None:
        """``tag_line``: the tag line with the newline before it and its own."""
        assert hit.tag is not None
        self.kind = TYPE_OF_TAG[hit.tag]
        self.at = hit.at
        """The stream offset of the tag line's first byte."""
        self.line = hit.line
        self.indent = len(hit.indent)
        self.body_start = hit.next_at
        """The stream offset of its body: the line after the tag line (the text after the tag is not in it)."""
        self.kept = bytearray(tag_line)
        """A region: a newline, then its tag line and the complete lines after it."""

    def over(self, end: int, limit: int) -> bool:
        """Whether its body, up to stream offset ``end``, is over ``limit`` bytes: then it is prose."""
        return end - self.body_start > limit

    def keep(self, lines: bytes) -> None:
        """Keep the next complete lines of its body."""
        self.kept += lines

    def decided_by(self, hit: Hit, rest: bytes, limit: int) -> bool | None:
        """What a candidate line after it decides: None when it is a line of its body (a fence, a heading
        that starts no report), else whether it is a block. ``rest``: the lines between those kept and
        this one; ``limit``: the most bytes its body may have."""
        if hit.tag is None:
            return None if hit.report() is None else False
        return hit.close and not self.over(hit.at, limit) and self._closed_by(hit.tag, rest)

    def _closed_by(self, tag: bytes, rest: bytes) -> bool:
        """Whether its closing tag ``tag`` makes it a block, its body being the lines kept and ``rest``."""
        if TYPE_OF_TAG[tag] is not self.kind:
            return False
        body = bytes(self.kept[1 + self.body_start - self.at :]) + rest
        if names_fields(self.kind, body):
            return True
        try:
            decode_body(self.kind, body, indent=self.indent)
        except BlockError:
            return False
        return True
