"""The lines the parser acts on: signal tags, code fences and headings of level 1 to 3, found by one regex.

Every region the parser scans starts with a newline, so the expressions are anchored on it and the regex
engine tries line starts only. A :class:`Hit` is one such line, with what the parser needs to know of it.
"""

from __future__ import annotations

import re
from enum import Enum, auto
from typing import Final

from agents.blocks import SIGNAL_TYPES, TERMINAL_ESCAPE, without_escapes
from bus.envelope import EnvelopeType

__all__ = [
    "HASHES_GROUP",
    "HEADING_2",
    "HEADING_GROUP",
    "HIT",
    "LOOSE_RESULT_HEADING",
    "MAX_TAG_LINE",
    "RESULT_HEADING",
    "TAG_GROUP",
    "TAG_LINE",
    "TYPE_OF_TAG",
    "Fence",
    "Heading",
    "Hit",
    "closing_tag",
    "ends_block",
    "heading_text",
    "may_be_report",
    "tentative",
]

MAX_TAG_LINE: Final = 4096
"""The longest line that can be a tag, heading or fence line; also the most kept of a prose line."""
_TAGS: Final = b"|".join(t.value.encode() for t in SIGNAL_TYPES)
TYPE_OF_TAG: Final = {t.value.encode(): t for t in SIGNAL_TYPES}
"""The signal type a tag names (``b"STOP_WORK"`` -> ``EnvelopeType.STOP_WORK``)."""
# Agents print tags in Markdown emphasis (``**[STOP_WORK]**``) or, through a terminal, with escape
# sequences (colour, a spinner's cursor moves and line erasing ``\x1b[1G\x1b[0K``, a title, the character
# set ``\x1b(B`` of ``tput sgr0``, a saved cursor ``\x1b7``: CSI, OSC and every other escape): around a
# tag these mean nothing else, so they are allowed there (any mix, on either side; one character class, so
# that a long run of ``*`` is matched in one way only, not in exponentially many). A tag line is any line
# that starts with a tag: what follows the tag is for the parser to weigh (see :func:`tentative`). A
# closing tag may be followed by text (``[/STOP_WORK] Waiting for the parent``): it ends an open block of
# its type; outside one it is prose, like any other line (see the parser).
_DECO: Final = rb"(?:[*_]|" + TERMINAL_ESCAPE + rb")*"
# Escape sequences inside the brackets too (``[\x1b[1mSTOP_WORK\x1b[0m]``: a highlighter that colours the
# word); and a heading may be coloured (``\x1b[1m## Auditor Result\x1b[0m``): escape sequences before
# its hashes, and in its text, which :func:`heading_text` takes off. So may a fence (a highlighter's
# ``\x1b[36m```bash\x1b[0m``), as the report parser, which takes escapes off, reads it.
_ESCAPES: Final = rb"(?:" + TERMINAL_ESCAPE + rb")*+"  # possessive: one way to match a run
# The full-width forms of the brackets and the slash (``［STOP_WORK］``, as a CJK input method writes
# them) are theirs too.
_OPEN, _SLASH, _CLOSE = rb"(?:\[|\xef\xbc\xbb)", rb"(/|\xef\xbc\x8f)", rb"(?:\]|\xef\xbc\xbd)"
_NAME: Final = _ESCAPES + _SLASH + rb"?" + _ESCAPES + rb"(" + _TAGS + rb")" + _ESCAPES  # ``/STOP_WORK``
_TAG: Final = _DECO + _OPEN + _NAME + _CLOSE + rb"[^\n]*(?=\n)"
_LONE: Final = re.compile(_ESCAPES + _CLOSE + _DECO + rb"[ \t]*\r?")
"""A tag's line after its name: nothing but its bracket, emphasis, escape sequences and spaces."""
# Anchored on the newline before a line (each scanned region starts with one), so the regex engine
# only tries line starts; the groups: indent, "/", tag | fence marker, info | hashes, heading text.
# (The lookahead is for speed: it ends the try at a prose line's first character.)
HIT: Final = re.compile(
    rb"\n([ \t]*)(?=[\[*_\x1b`~#\xef])(?:"
    + (_TAG + rb"|" + _ESCAPES + rb"(`{3,}|~{3,})([^\n]*)|" + _ESCAPES + rb"(#{1,3})[ \t]([^\n]*))")
)
TAG_GROUP: Final = 3  # the group of HIT a tag line ends with (``m.lastindex``)
HASHES_GROUP: Final = 6  # the groups of HIT with a heading's hashes and its text
HEADING_GROUP: Final = 7
TAG_LINE: Final = re.compile(rb"\n([ \t]*)" + _TAG)  # the tag lines of HIT, with the same groups
RESULT_HEADING: Final = re.compile(rb"[ \t]*(\S(?:.*\S)?)[ \t]+[Rr]esult[ \t#]*\r?")
"""The text of a ``## <Agent> Result`` heading (the agent's name in group 1)."""
LOOSE_RESULT_HEADING: Final = re.compile(rb"[ \t]*\**+(\S(?:.*\S)?)[ \t]+(?i:result)[ \t*:#]*\r?")
"""The text of a heading of level 2 that may start a report (``## **Auditor Result**``, ``## Auditor
RESULT:``): one only if it reads as a report (a valid status and a summary)."""


def tentative(m: re.Match[bytes]) -> bool:
    """Whether a tag line of :data:`HIT` or :data:`TAG_LINE` is an opening tag with other text after it
    on its line (``[STOP_WORK] - blocked on npm``): a block or prose, as the lines after it tell."""
    return m.group(2) is None and _LONE.fullmatch(m.string, m.end(3), m.end()) is None


HEADING_2: Final = re.compile(rb"\n[ \t]*" + _ESCAPES + rb"##[ \t]")
"""A heading of level 2, which may end a block (:func:`ends_block`)."""


def heading_text(m: re.Match[bytes]) -> bytes:
    """The text of a heading line of :data:`HIT`, without escape sequences (a colour reset after it)."""
    return without_escapes(m.group(HEADING_GROUP))


def closing_tag(line: bytes | bytearray) -> EnvelopeType | None:
    """The signal type of a (partial) line that is a closing tag, text after it or not."""
    if not 0 < len(line) <= MAX_TAG_LINE:
        return None
    m = TAG_LINE.match(b"\n" + line + b"\n")
    return TYPE_OF_TAG[m.group(3)] if m is not None and m.group(2) is not None else None


def ends_block(m: re.Match[bytes], indent: int) -> bool:
    """Whether a line of :data:`HIT` inside a block whose tag is indented by ``indent`` is a result
    report's heading (``## Auditor Result``) no further right than the tag: no YAML body holds one (it
    would be a comment), so the block was never terminated (agents forget a PROGRESS block's closing
    tag), and the report is read."""
    hashes, before = m.group(HASHES_GROUP, 1)
    if hashes is None or len(hashes) != 2:
        return False
    heading = heading_text(m)
    return (
        len(before) <= min(indent, 3)  # a heading (see Hit.level), no further right than the tag
        and b"\t" not in before
        and may_be_report(heading)
        and RESULT_HEADING.fullmatch(heading) is not None
    )


def may_be_report(heading: bytes) -> bool:
    """Whether a heading's text can be a report's: it ends in ``result`` (checked before the expressions
    above, which would try every split of a long line of spaces)."""
    return heading.rstrip(b" \t\r*:#")[-6:].lower() == b"result"


def _unread_heading(heading: bytes) -> bool:
    """Whether a heading's text titles what may be a report written otherwise than under a report's
    heading: its last word, past any emoji or punctuation, is ``Result`` or ``Results`` (``Auditor
    Results``, ``Result ✅``, ``**Results:**``)."""
    text = heading.decode(errors="replace")
    end = len(text)
    while end and not text[end - 1].isalnum():  # linear: one step back per character
        end -= 1
    word = text[max(0, end - 8) : end].lower()
    cut = end - 7 if word.endswith("results") else end - 6 if word.endswith("result") else -1
    return cut >= 0 and (cut == 0 or not text[cut - 1].isalnum())


class Heading(Enum):
    """How a heading may start a report."""

    CONTRACT = auto()
    """``## <Agent> Result``: a report, or an error when it does not read as one."""
    LOOSE = auto()
    """A report's heading written otherwise (``## **Auditor Result**``): a report if it reads as one."""
    UNREAD = auto()
    """Not a report's heading, yet it may title one (``## Auditor Results``, ``# Auditor Result``, ``###
    Auditor Result``): what it holds is no report, but is worth a word when it reads as one (see
    :mod:`agents.unread`)."""
    TEMPLATE = auto()
    """A report's heading that names a template's placeholder (``## [Agent Name] Result``, seeds 001/002):
    a template, quoted or echoed, is nothing; one filled in is worth a word, as :attr:`UNREAD`."""


Fence = tuple[int, int]
"""A code fence: its marker byte (a backtick or a tilde) and the length of its run."""


class Hit:
    """A candidate line found by :data:`HIT` in a region (``start``/``end``: its bounds there)."""

    __slots__ = (
        "alone", "at", "close", "end", "fence", "hashes", "heading", "indent", "info", "line", "opens", "start",
        "tag", "tentative",
    )  # fmt: skip

    def __init__(self, m: re.Match[bytes], base: int, end: int, line: int) -> None:
        self.start = m.start() + 1
        self.end = end
        self.at = base + self.start - 1  # stream offset of the line
        self.line = line
        self.indent, slash, self.tag, fence, info, hashes, self.heading = m.groups()
        self.close = slash is not None
        self.alone = self.tag is not None and _LONE.fullmatch(m.string, m.end(3), m.end()) is not None
        """A tag with nothing after it on its line but emphasis, colour codes and spaces."""
        self.tentative = self.tag is not None and tentative(m)
        """An opening tag with text after it, not yet known to open a block (see :func:`tentative`)."""
        self.opens = self.tag is not None and not self.close and not self.tentative
        """An opening tag that opens a block."""
        self.fence: bytes | None = fence
        self.info = (without_escapes(info) if info and b"\x1b" in info else info or b"").strip()
        if fence is not None and fence[0] == 0x60 and b"`" in self.info:
            self.fence = None  # ```inline``` code, not a fence
        self.hashes = len(hashes or b"")
        if hashes is not None and b"\x1b" in self.heading:
            self.heading = heading_text(m)

    @property
    def next_at(self) -> int:
        return self.at + self.end - self.start + 1

    @property
    def level(self) -> int:
        """The level of a heading, 0 for any other line (one indented by a tab or more than 3 spaces)."""
        return self.hashes if len(self.indent) <= 3 and b"\t" not in self.indent else 0

    @property
    def is_heading(self) -> bool:
        """A heading of level 1 or 2 (one of level 3 ends only a section of its level)."""
        return 0 < self.level <= 2

    def report(self) -> tuple[bytes, Heading] | None:
        """When the line is a heading that may start a report: the agent's name (the whole heading for
        :attr:`Heading.UNREAD`), and how."""
        if not self.level:
            return None
        if self.hashes == 2 and may_be_report(self.heading):
            name = RESULT_HEADING.fullmatch(self.heading)
            if name is not None:
                return name.group(1).strip(), Heading.CONTRACT
            name = LOOSE_RESULT_HEADING.fullmatch(self.heading)
            if name is not None:
                return name.group(1).strip(), Heading.LOOSE
        return (self.heading.strip(), Heading.UNREAD) if _unread_heading(self.heading) else None

    def closes(self, fence: Fence | None) -> bool:
        return (
            fence is not None
            and self.fence is not None
            and self.fence[0] == fence[0]
            and len(self.fence) >= fence[1]
            and not self.info
        )
