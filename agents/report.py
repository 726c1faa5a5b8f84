"""Parsing a ``## <Agent Name> Result`` report (the result contract of seeds 001/002).

The report is split into ``###`` sections and those into ``####`` sub-sections; headings inside code
fences are content. The contract's sections fill the fields of :class:`~bus.results.ResultReport`;
any other section, and each sub-section of ``### Findings``, is kept as a :class:`Section` with its
Markdown tables. Every table with a ``File:Line`` (or ``Location``) column and a severity or issue
column becomes :class:`~bus.findings.Finding` rows (:mod:`agents.cells`), with the evidence paragraph
that starts with the finding's id in bold (``**SEC-001: ...**``) when the report has one. Status and
Summary, the two sections every report needs, are also read from a heading that carries the value
(``### Status: PARTIAL``) and, when the report has no such section, from a labelled line before its
first section (``**Status:** SUCCESS``), as agents often write them.

Only a missing or unknown status and a missing summary make a report invalid (:class:`ReportError`).
Lesser defects (a confidence that is not a number, an unknown severity, ``Recoverable`` neither true nor
false) leave that value unset and are listed in ``violations``, so a report is never dropped for them.
"""

from __future__ import annotations

import re
from typing import Final

from pydantic import ValidationError

from agents.blocks import describe_errors
from agents.cells import NONE, bare, cell, column, findings, severity, split_location
from agents.markdown import (
    HEADING,
    Line,
    Part,
    list_items,
    parse_tables,
    split_cells,
    split_sections,
)
from agents.report_confidence import ConfidenceParts
from agents.titles import STATUS, key, label, labelled_parts, section_key
from bus.display import quoted
from bus.errors import ProtocolError
from bus.findings import Finding
from bus.results import (
    ConfidenceReport,
    ErrorDetails,
    Issue,
    Reference,
    ResultBlocker,
    ResultReport,
    ResultStatus,
    Section,
    Table,
    says_nothing,
)

__all__ = ["ReportError", "parse_report"]

_REPORT_HEADING: Final = re.compile(r" {0,3}##[ \t]+\**+(\S(?:.*\S)?)[ \t]+(?i:result)[ \t*:#]*")
"""``## <Agent> Result``, also in any case, in bold or with a colon."""
_EVIDENCE_START: Final = re.compile(r"\s*\*\*([A-Za-z]+[-_]?\d+)\b")
_TRUE: Final = frozenset({"true", "yes", "y"})
_FALSE: Final = frozenset({"false", "no", "n"})


class ReportError(ProtocolError):
    """The report cannot be accepted; ``line`` is 1-based within the report (its heading is 1)."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


def parse_report(text: str) -> ResultReport:
    """Parse one report, from its ``## <Agent> Result`` heading to its end."""
    lines = text.replace("\r\n", "\n").split("\n")
    heading = _REPORT_HEADING.fullmatch(lines[0].rstrip())
    if heading is None:
        raise ReportError("not a '## <Agent Name> Result' heading", 1)
    name = heading.group(1)
    agent = bare(name) or name.strip("*_ \t")  # `## 🔒 Auditor Result` is the Auditor's
    if not agent.strip():  # `## _ Result`: emphasis around nothing
        raise ReportError("the heading names no agent", 1)
    builder = _Builder(agent)
    preamble, parts = split_sections(list(enumerate(lines[1:], start=2)), 3)
    labelled, preamble = labelled_parts(preamble, {section_key(part.title) for part in parts})
    for part in labelled:
        builder.add(part)
    if any(t.strip() for _, t in preamble):
        section = _section(Part("", 2, preamble))
        builder.sections.append(section)
        builder.fallback.extend(section.tables)  # an issue table after `**Summary:** ...` lines
    for part in parts:
        builder.add(part)
    return builder.build()


def _section(part: Part) -> Section:
    return Section(title=part.title, text=part.text, tables=parse_tables(part.lines))


def _items(lines: list[Line]) -> list[tuple[int, list[str]]]:
    """The list items of a section, without the "None" placeholders of empty sections."""
    return [
        (n, texts)
        for n, texts in list_items(lines)
        if texts[0].lower().strip(" .*") not in NONE and not says_nothing(texts[0])
    ]


def _is_resolution(line: str) -> bool:
    return line.strip().lower().startswith("resolution:")


class _Builder:
    """Collects the sections of one report into the fields of :class:`ResultReport`."""

    def __init__(self, agent: str) -> None:
        self.agent = agent
        self.status: ResultStatus | None = None
        self.summary: str | None = None
        self.sections: list[Section] = []
        self.references: list[Reference] = []
        self.issues: list[Issue] = []
        self.next_steps: list[str] = []
        self.blockers: list[ResultBlocker] = []
        self.error: ErrorDetails | None = None
        self.attempted: list[str] = []
        self.root_cause: str | None = None
        self.recovery: list[str] = []
        self.violations: list[str] = []
        self.confidence = ConfidenceParts(self.violations)
        self.tables: list[Table] = []  # every table of the sections, searched for findings
        self.fallback: list[Table] = []
        """The tables before the first section and in the summary: searched for findings only when the
        others have none (a summary's table of the findings repeats the ones of ``### Findings``)."""
        self.evidence: dict[str, str] = {}
        self.seen: set[str] = set()

    def add(self, part: Part) -> None:
        name = key(part.title)
        inline = label(part.title)  # `### Status: SUCCESS`
        if name not in _HANDLERS and inline is not None:
            name = inline.key
            part = Part(inline.title, part.line, [(part.line, inline.value), *part.lines])
        handler = _HANDLERS.get(name)
        if handler is not None and name in self.seen:
            self.violations.append(f"duplicate section '### {part.title}' (line {part.line}); first one used")
            handler = None
        self.seen.add(name)
        self._collect_evidence(part.lines)
        if handler is None:
            section = _section(part)
            self.sections.append(section)
            self.tables.extend(section.tables)
        else:
            handler(self, part)
            if name == "summary":
                self.fallback.extend(parse_tables(part.lines))

    def _collect_evidence(self, lines: list[Line]) -> None:
        # each paragraph's lines kept in a list and joined once: a text grown a line at a time is copied
        # whole for each line (a paragraph of a million lines took minutes)
        paragraphs: dict[str, list[str]] = {}
        current: list[str] | None = None
        for _, line in lines:
            start = _EVIDENCE_START.match(line)
            if start is not None:
                current = paragraphs[start.group(1)] = []
            elif HEADING.fullmatch(line.rstrip()):
                current = None
            if current is not None:
                current.append(line + "\n")
        self.evidence |= {name: "".join(kept) for name, kept in paragraphs.items()}

    def status_(self, part: Part) -> None:
        value = next((t.strip() for _, t in part.lines if t.strip()), "")
        match = STATUS.match(bare(value))
        if match is None:
            raise ReportError(f"status {quoted(value)} is not SUCCESS, PARTIAL or FAILED", part.line)
        self.status = ResultStatus(match.group(1).upper())

    def summary_(self, part: Part) -> None:
        self.summary = part.text

    def findings_(self, part: Part) -> None:
        preamble, subsections = split_sections(part.lines, 4)
        if any(t.strip() for _, t in preamble):
            subsections.insert(0, Part(part.title, part.line, preamble))
        for sub in subsections:
            section = _section(sub)
            self.sections.append(section)
            self.tables.extend(section.tables)

    def references_(self, part: Part) -> None:
        for table in parse_tables(part.lines):
            item = column(table.headers, ("item", "name"))
            where = column(table.headers, ("location", "fileline", "file"))
            why = column(table.headers, ("relevance", "why", "notes", "description"))
            for row in table.rows:
                location = cell(row, where if where is not None else 1)
                file, line = split_location(location)
                self.references.append(
                    Reference(
                        item=cell(row, item if item is not None else 0),
                        location=location,
                        relevance=cell(row, why if why is not None else 2),
                        file=file,
                        line=line,
                    )
                )

    def confidence_(self, part: Part) -> None:
        nested = self.confidence.section(part)
        if nested is not None and "confidence justification" not in self.seen:
            self.seen.add("confidence justification")
            self.confidence.justification(nested)

    def breakdown_(self, part: Part) -> None:
        self.confidence.breakdown_section(part)

    def justification_(self, part: Part) -> None:
        self.confidence.justification(part)

    def issues_(self, part: Part) -> None:
        self.tables.extend(parse_tables(part.lines))
        for _, texts in _items(part.lines):
            head, *fields = split_cells(texts[0])
            title, _, description = head.partition(": ")
            raw = next((f.split(":", 1)[1] for f in fields if f.lower().startswith("severity:")), "")
            description = "\n".join([description.strip(), *texts[1:]]).strip()
            level = severity(raw, f"issue {quoted(title)}", self.violations)
            self.issues.append(Issue(title=title.strip("*` "), description=description, severity=level))

    def next_steps_(self, part: Part) -> None:
        self.next_steps = [" ".join(texts) for _, texts in _items(part.lines)]

    def blockers_(self, part: Part) -> None:
        for _, texts in _items(part.lines):
            description, _, resolution = texts[0].partition("| Resolution:")
            rest = [t for t in texts[1:] if not _is_resolution(t)]
            later = [t.split(":", 1)[1].strip() for t in texts[1:] if _is_resolution(t)]
            self.blockers.append(
                ResultBlocker(
                    description="\n".join([description.strip(), *rest]),
                    resolution="\n".join(x for x in (resolution.strip(), *later) if x),
                )
            )

    def error_details_(self, part: Part) -> None:
        pairs = [(cell(row, 0), cell(row, 1)) for table in parse_tables(part.lines) for row in table.rows]
        for _, texts in _items(part.lines):  # or "- Type: X" lines
            aspect, colon, value = texts[0].partition(":")
            if colon:
                pairs.append((aspect, value))
        values = {key(k).replace(" ", ""): v.strip() for k, v in pairs}
        recoverable: bool | None = None
        raw = values.get("recoverable", "")
        if raw.lower() in _TRUE | _FALSE:
            recoverable = raw.lower() in _TRUE
        elif raw:
            self.violations.append(f"Error Details: Recoverable {quoted(raw)} is neither true nor false")
        self.error = ErrorDetails(
            type=values.get("type"),
            message=values.get("message"),
            occurred_at=values.get("occurredat"),
            recoverable=recoverable,
        )

    def attempted_(self, part: Part) -> None:
        self.attempted = [" ".join(texts) for _, texts in _items(part.lines)]

    def root_cause_(self, part: Part) -> None:
        self.root_cause = part.text

    def recovery_(self, part: Part) -> None:
        self.recovery = [" ".join(texts) for _, texts in _items(part.lines)]

    def build(self) -> ResultReport:
        if self.status is None:
            raise ReportError("missing '### Status' section")
        if not self.summary:
            raise ReportError("missing or empty '### Summary' section")
        confidence = self.confidence.report()
        try:
            return self._report(confidence)
        except ValidationError as exc:  # what the checks above miss is an error too, never a crash
            raise ReportError(describe_errors(exc)) from None

    def _findings(self, score: float | None) -> list[Finding]:
        found = findings(self.tables, self.agent, self.evidence, self.violations, score)
        if found or not self.fallback:
            return found
        return findings(self.fallback, self.agent, self.evidence, self.violations, score)

    def _report(self, confidence: ConfidenceReport | None) -> ResultReport:
        return ResultReport(
            agent=self.agent,
            status=self.status,
            summary=self.summary,
            sections=self.sections,
            findings=self._findings(confidence.score if confidence is not None else None),
            key_references=self.references,
            confidence=confidence,
            issues=self.issues,
            next_steps=self.next_steps,
            blockers=self.blockers,
            error=self.error,
            attempted_actions=self.attempted,
            root_cause=self.root_cause,
            recovery_options=self.recovery,
            violations=self.violations,
        )


_HANDLERS: Final = {
    "status": _Builder.status_,
    "summary": _Builder.summary_,
    "findings": _Builder.findings_,
    "key references": _Builder.references_,
    "confidence": _Builder.confidence_,
    "confidence breakdown": _Builder.breakdown_,
    "confidence justification": _Builder.justification_,
    "issues": _Builder.issues_,
    "next steps": _Builder.next_steps_,
    "blockers": _Builder.blockers_,
    "error details": _Builder.error_details_,
    "attempted actions": _Builder.attempted_,
    "root cause analysis": _Builder.root_cause_,
    "root cause": _Builder.root_cause_,
    "recovery options": _Builder.recovery_,
}
