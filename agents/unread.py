"""Reports written under another heading: held until the agent finishes, then named if nothing replaced them.

Only ``## <Agent Name> Result`` (and the same written loosely, ``## **Auditor Result**``) starts a report.
A section under a heading that is not a report's but may title one (``## Security Auditor Results``,
``# Auditor Result``, ``## Result ✅``) is no report even when it reads as one: an agent's own
``## Test Results`` with a status and a summary is part of its work, not its result, and taking it for
one would record a wrong outcome. Yet an agent that finishes without printing a report the contract's
way most likely wrote it under such a heading, and its status and findings would vanish without a word.
So with a report's template filled in but for the agent's name (``## [Agent Name] Result``).

So the last such section that reads as a report is held, unless the agent printed a report before it
(then it is a recap). A report that follows (or the error of one that does not read) drops it; the
agent's completion, its ``COMPLETION_REPORT`` or the end of its output, turns it into the
:class:`~agents.items.ErrorItem` of a result report, which an adapter publishes as a lost result: a
blocker the parent sees, which leaves the group in review.

That error is placed just before what completed the agent, at the offset one byte before it (the newline
that ends the line before), or at the end of the output, one byte past its last: no item starts there,
so the envelope id derived from it is the agent's own and the same on every reading.
"""

from __future__ import annotations

from agents.items import ErrorItem, Found, Item, ResultItem, SignalItem, UnreadReportItem
from bus.envelope import EnvelopeType

__all__ = ["UnreadReports"]


class UnreadReports:
    """Holds the last :class:`UnreadReportItem` of one agent's output (see the module)."""

    __slots__ = ("_held", "_reported")

    def __init__(self, *, reported: bool = False) -> None:
        """``reported``: a report came before what this is given (a reading resumed mid-output)."""
        self._held: UnreadReportItem | None = None
        self._reported = reported  # a report was read (or meant): a recap under another heading is no loss

    @property
    def held(self) -> UnreadReportItem | None:
        return self._held

    @property
    def reported(self) -> bool:
        return self._reported

    def items(self, found: list[Found]) -> list[Item]:
        """The items of what the parser found, the held section named before a completion."""
        out: list[Item] = []
        for item in found:
            if isinstance(item, UnreadReportItem):
                self._held = None if self._reported else item
                continue
            if isinstance(item, SignalItem):
                if item.type is EnvelopeType.COMPLETION_REPORT:
                    out += self._named(item.offset - 1)
            elif isinstance(item, ResultItem) or (
                isinstance(item, ErrorItem) and item.type is EnvelopeType.RESULT
            ):
                self._held, self._reported = None, True  # a report, or one meant that does not read
            out.append(item)
        return out

    def close(self, found: list[Found], end: int) -> list[Item]:
        """The last items, and the held section named at the end of the output (``end`` bytes long)."""
        return self.items(found) + self._named(end)

    def _named(self, offset: int) -> list[Item]:
        held, self._held = self._held, None
        if held is None:
            return []
        heading = held.heading if len(held.heading) <= 80 else held.heading[:79] + "…"
        found = f"{held.findings} finding{'' if held.findings == 1 else 's'}"
        why = (
            "its heading has the template's placeholder where the agent's name goes"
            if held.template
            else "only a '## <Agent Name> Result' heading starts a report"
        )
        message = f"the section '{heading}' reads as a result report ({found}) but was not read as one: {why}"
        return [ErrorItem(line=held.line, offset=offset, message=message, type=EnvelopeType.RESULT)]
