"""The subagent result contract (seeds 001 and 002) and its error form.

A result report is Markdown (``## <Agent> Result`` / ``### Status`` / ...). The parser in ``agents``
turns it into :class:`ResultReport`; agent-specific sections (Entry Points, Files Created, Compliance
Check, ...) are kept as structured tables, and issue tables with a ``File:Line`` column also become
:class:`~bus.findings.Finding` rows.
"""

from __future__ import annotations

import re
from typing import Final

from pydantic import Field

from bus.fields import Confidence, LenientEnum, Model, NonBlankText
from bus.findings import Finding, Severity

__all__ = [
    "ConfidenceJustification",
    "ConfidenceReport",
    "ErrorDetails",
    "Issue",
    "Reference",
    "ResultBlocker",
    "ResultReport",
    "ResultStatus",
    "Section",
    "Table",
    "says_nothing",
]

_NOTHING: Final = re.compile(
    r"(?:\[[ xX]?\]\s*)?(?:none|n/?a|nothing|no (?:issues?|blockers?|next steps?|findings?|known \w+))"
    r"(?:\s+(?:identified|found|reported|known|so far|at this time|yet|currently|to report|blocking))*\W*",
    re.IGNORECASE,
)


def says_nothing(text: str) -> bool:
    """Whether a list item of a report's section says there is nothing to list (``None``, ``- [ ] None
    identified``, ``No blockers at this time``) rather than listing something (``None of the tests
    run``)."""
    return _NOTHING.fullmatch(text.strip(" \t*_`.")) is not None


class ResultStatus(LenientEnum):  # ``success`` or ``Partial`` match too, as a signal's values do
    SUCCESS = "SUCCESS"
    PARTIAL = "PARTIAL"
    FAILED = "FAILED"


class Table(Model):
    """A Markdown table: its header cells and its rows, cell text with Markdown code marks removed."""

    headers: list[str]
    rows: list[list[str]]


class Section(Model):
    """A section of the report the contract leaves to the agent (``#### Entry Points`` ...)."""

    title: str
    text: str = ""
    tables: list[Table] = Field(default_factory=list)


class Reference(Model):
    """A row of the Key References table; ``file``/``line`` are split out of ``location``."""

    item: str
    location: str
    relevance: str = ""
    file: str | None = None
    line: int | None = None
    verified: bool | None = None


class ConfidenceJustification(Model):
    score: Confidence | None = None
    evidence_count: str | None = None
    verification_method: str | None = None
    blind_spots: str | None = None


class ConfidenceReport(Model):
    score: Confidence
    justification: str = ""
    verified: Confidence | None = None
    inferred: Confidence | None = None
    combined: Confidence | None = None
    detailed: ConfidenceJustification | None = None


class Issue(Model):
    title: str
    description: str = ""
    severity: Severity | None = None


class ResultBlocker(Model):
    description: str
    resolution: str = ""


class ErrorDetails(Model):
    type: str | None = None
    message: str | None = None
    occurred_at: str | None = None
    recoverable: bool | None = None


class ResultReport(Model):
    """A parsed ``## <Agent> Result`` report."""

    agent: NonBlankText
    status: ResultStatus
    summary: NonBlankText
    sections: list[Section] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    key_references: list[Reference] = Field(default_factory=list)
    confidence: ConfidenceReport | None = None
    issues: list[Issue] = Field(default_factory=list)
    next_steps: list[str] = Field(default_factory=list)
    blockers: list[ResultBlocker] = Field(default_factory=list)
    error: ErrorDetails | None = None
    attempted_actions: list[str] = Field(default_factory=list)
    root_cause: str | None = None
    recovery_options: list[str] = Field(default_factory=list)
    violations: list[str] = Field(default_factory=list)
