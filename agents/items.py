"""What parsing agent output yields: a signal, a result report, an error, or a failed turn the agent's
program reported, each located in the output, and how a closed block or report becomes one."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from agents.blocks import BlockError, SignalPayload, decode_body, is_template, without_escapes
from agents.lines import Heading
from agents.markdown import releveled
from agents.report import ReportError, parse_report
from agents.titles import keeps_placeholders
from bus.envelope import EnvelopeType
from bus.fields import Model, trusted_instance
from bus.results import ResultReport

__all__ = [
    "ErrorItem",
    "Found",
    "Item",
    "ResultItem",
    "SignalItem",
    "TurnFailedItem",
    "UnreadReportItem",
    "block_item",
    "report_item",
    "signal_item",
]


class SignalItem(Model):
    """A valid signal block; ``line``/``offset`` locate its opening tag."""

    type: EnvelopeType
    payload: SignalPayload
    line: int
    offset: int


class ResultItem(Model):
    """A valid result report; ``line``/``offset`` locate its ``## ... Result`` heading."""

    report: ResultReport
    line: int
    offset: int


class ErrorItem(Model):
    """A malformed block or report (or transcript line); ``type`` names the block when known."""

    line: int
    offset: int
    message: str
    type: EnvelopeType | None = None


class TurnFailedItem(Model):
    """The agent's program said in its JSONL output that the agent's turn failed (Codex CLI's
    ``turn.failed``, a Claude Code ``result`` that is an error, or its entry flagged
    ``isApiErrorMessage``): ``message`` says so in its words.
    ``line``/``offset`` locate the last byte of that JSONL line, where no text of the line is placed."""

    message: str
    line: int
    offset: int


class UnreadReportItem(Model):
    """A section that reads as a result report under a heading that is not a report's (``## Auditor
    Results``): no report, but held until the agent's end (see :mod:`agents.unread`). ``line``/``offset``
    locate its heading."""

    heading: str
    findings: int
    line: int
    offset: int
    template: bool = False
    """Its heading names a template's placeholder (``## [Agent Name] Result``)."""
    reread_from: int | None = None
    """In a transcript, the offset of its JSONL line: where a fresh parser reads it again (an adapter
    restarted from a checkpoint must, to hold it again)."""


Item = SignalItem | ResultItem | ErrorItem | TurnFailedItem
"""What parsing agent output yields."""
Found = Item | UnreadReportItem
"""What the text parser finds: an :data:`Item`, or a section to hold (:class:`UnreadReportItem`)."""

_SIGNAL_FIELDS: Final = frozenset(SignalItem.model_fields)
_MOVES: Final = {1: {2: 3}, 3: {4: 3, 5: 4, 6: 5}}
"""Where the headings of a section under a heading of level 1 or 3 go, to be read as a report's (whose
sections are of level 3, their sub-sections of level 4)."""


def signal_item(kind: EnvelopeType, payload: SignalPayload, line: int, offset: int) -> SignalItem:
    """``SignalItem(type=kind, payload=payload, line=line, offset=offset)`` without validating again
    values that are valid: the payload was just validated by its model, the rest is the parser's own."""
    data = {"type": kind, "payload": payload, "line": line, "offset": offset}
    return trusted_instance(SignalItem, data, set(_SIGNAL_FIELDS))


def block_item(
    kind: EnvelopeType, body: bytes, *, indent: int, line: int, offset: int, where: Callable[[], str]
) -> SignalItem | ErrorItem | None:
    """The item of a closed block (tag at ``line``): its signal, or an error whose message starts with
    ``where()`` (only an error needs it); None for a template (see :func:`~agents.blocks.is_template`)."""
    try:
        payload = decode_body(kind, body, indent=indent, first_line=line + 1)
    except BlockError as exc:
        if is_template(body):
            return None
        return ErrorItem(line=line, offset=offset, message=f"{where()}: {exc.message}", type=kind)
    return signal_item(kind, payload, line, offset)


def report_item(
    content: bytes, *, heading: Heading, line: int, offset: int, where: Callable[[], str], context: str = ""
) -> ResultItem | ErrorItem | UnreadReportItem | None:
    """The item of a report (heading at ``line``): the report, or an error whose message starts with
    ``where()``. Under a heading written otherwise than the contract's, a report that does not read as
    one is prose: None; under one that is not a report's (:attr:`Heading.UNREAD`), one that does is an
    :class:`UnreadReportItem`, and so is a template's filled in (:attr:`Heading.TEMPLATE`). Invalid UTF-8
    is read as U+FFFD and named in the report's violations (``context`` follows its line), since the rest
    of a report is worth more than a byte. Terminal escape sequences (a coloured status) are taken off."""
    text = without_escapes(content).decode(errors="replace")
    title, _, body = text.partition("\n")
    unread = heading is Heading.UNREAD or heading is Heading.TEMPLATE
    if unread:  # its sections may be a level up (`# Auditor Result` over `## Status`) or down
        marks = title.lstrip(" ")
        moves = _MOVES.get(len(marks) - len(marks.lstrip("#")))
        text = "## Unread Result\n" + (releveled(body, moves) if moves else body)
    try:
        report = parse_report(text)
    except ReportError as exc:
        if heading is not Heading.CONTRACT:  # only the exact heading says a report was meant
            return None
        at = f" (line {line + exc.line - 1})" if exc.line is not None else ""
        return ErrorItem(
            line=line, offset=offset, message=f"{where()}: {exc.message}{at}", type=EnvelopeType.RESULT
        )
    try:
        content.decode()
    except UnicodeDecodeError as exc:
        bad = line + content.count(b"\n", 0, exc.start)
        violation = f"invalid UTF-8 at line {bad}{context} (read as U+FFFD)"
        report = report.model_copy(update={"violations": [*report.violations, violation]})
    if heading is Heading.TEMPLATE and keeps_placeholders(report.summary):
        return None  # the template, quoted or echoed
    if unread:
        return UnreadReportItem(
            heading=title.strip(),
            findings=len(report.findings),
            line=line,
            offset=offset,
            template=heading is Heading.TEMPLATE,
        )
    return ResultItem(report=report, line=line, offset=offset)
