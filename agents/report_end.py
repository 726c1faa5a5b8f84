"""Where a result report being read ends, from its candidate lines (opening tags, fences, headings).

A report ends before the next heading of level 1 or 2 outside the code fences inside it, and before the
next opening tag. One that starts inside a fence (the seeds show reports inside ```markdown fences) also
ends at that fence's closing line; but a bare fence line there may as well open a code block inside the
report, so it stays pending until the lines after it show which: a heading or a fence with an info string
inside the supposed code block, or an opening tag, mean it closed the report (the scanner's end of input
and size limit settle it too); a bare fence that closes the supposed code block means it did not.

A section under a heading that may title a report (:attr:`~agents.lines.Heading.UNREAD`) ends the same
way, and also before a heading in a fence of its own that starts a report. One of level 1 that starts
outside code fences runs over the headings of level 2 that start nothing (``# Auditor Result`` over ``##
Status``: a report's sections a level up); once it has, a heading in its fences that may title a report
ends it too, as it did when the section ended at the first heading it now runs over. One of level 3
starts only outside code fences and runs over the headings of level 3 that start nothing (``### Auditor
Result`` over ``### Status``, as over ``#### Status``); it ends before one that may title a report, and
before any heading of level 1 or 2, in its fences too, so that what follows it is read as it was before
such sections were read.
"""

from __future__ import annotations

from enum import Enum, auto
from typing import Final

from agents.lines import Fence, Heading, Hit

__all__ = ["End", "ReportEnd"]

_RUNS_OVER: Final = {1: 2, 3: 3}
"""The level of the headings a section of a level runs over (see the module)."""


class End(Enum):
    """What a line means for the report it is in."""

    BEFORE = auto()
    """The report ends before the line."""
    WITH = auto()
    """The line ends the report and is its last: the closing line of the fence it started in."""
    PENDING = auto()
    """The pending bare fence closed the fence the report started in: the report ends there."""


class ReportEnd:
    """The fences of one open report, and the bare fence that may have ended it."""

    __slots__ = ("extended", "fence", "heading", "level", "outer", "pending")

    def __init__(self, outer: Fence | None, heading: Heading = Heading.CONTRACT, level: int = 2) -> None:
        """``outer``: the fence open in the prose where the report starts, if any; ``heading`` and
        ``level``: the report's heading."""
        self.outer = outer
        self.heading = heading
        self.level = level
        self.extended = False
        """The section has run over a heading (see :meth:`runs_over`)."""
        self.fence: Fence | None = None
        """A fence open inside the report."""
        self.pending: tuple[int, int, int] | None = None
        """A bare fence that may close ``outer``: its stream offset, the next line's, and that line's
        number."""

    @property
    def fence_after(self) -> Fence | None:
        """The fence open in the prose after a report that ended before a line."""
        return self.fence or self.outer

    def runs_over(self, hit: Hit) -> bool:
        """Whether the hit is a heading that the open section runs over (see the module); the section is
        then :attr:`extended`."""
        over = (
            hit.level == _RUNS_OVER.get(self.level)
            and self.outer is None
            and self.fence is None
            and hit.report() is None
        )
        self.extended |= over
        return over

    def at(self, hit: Hit, *, read_past: bool) -> End | None:
        """What a candidate line means for the report's end (None: it is part of the report). A report
        ``read_past`` (a template, or one over the size limit: its bytes are not kept) ends at its outer
        fence's closing line at once, since what it would have held does not matter."""
        if hit.tag is not None:
            if not hit.opens:
                return None
            return End.BEFORE if self.pending is None else End.PENDING
        if hit.fence is not None:  # a template (quoted, most often in a fence) ends with its fence at once
            return self._fence_line(hit, read_past=read_past or self.heading is Heading.TEMPLATE)
        return self._heading_line(hit) if hit.is_heading or hit.level == 3 else None

    def _heading_line(self, hit: Hit) -> End | None:
        if self.fence is None:
            return End.BEFORE
        if self.level == 3:  # in its fences too, so what follows is read as before (see the module)
            return End.BEFORE if hit.is_heading else None
        if self.pending is not None:
            return End.PENDING
        if self.heading is Heading.UNREAD and (report := hit.report()) is not None:
            # in a fence of the section: a report is not the section's, nor one more section that may
            # title a report once the section ran over a heading (it would have ended before that one)
            return End.BEFORE if report[1] is not Heading.UNREAD or self.extended else None
        return None

    def _fence_line(self, hit: Hit, *, read_past: bool) -> End | None:
        if self.fence is not None:
            if hit.closes(self.fence):
                self.fence = self.pending = None
            elif hit.info and self.pending is not None:
                return End.PENDING
            return None
        if hit.closes(self.outer):
            if read_past:
                return End.WITH
            self.pending = (hit.at, hit.next_at, hit.line + 1)
        self.fence = (hit.fence[0], len(hit.fence)) if hit.fence else None
        return None
