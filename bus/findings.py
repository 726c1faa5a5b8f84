"""A finding: one issue an agent reports about a place in the code (seeds 001/002)."""

from __future__ import annotations

import re
from typing import Any, Final, Self

from pydantic import Field, field_validator, model_validator

from bus.fields import Confidence, LenientEnum, Model, NonBlankText, Text

__all__ = ["IMPORTED_SOURCE", "Finding", "Severity", "derive_category"]

IMPORTED_SOURCE: Final = "findings:"
"""How the ``source`` of a finding imported from a file begins (``findings:<path>``): published by whoever
runs ``import-findings``, often long after, it is no sign of life of the agent it names."""


class Severity(LenientEnum):
    """Severities seen in the seeds, most severe first.

    The result contract names critical/important/minor; the seeds' prose also says high/medium/low, so
    both scales are accepted and ranked on one line (see :attr:`rank`).
    """

    CRITICAL = "critical"
    HIGH = "high"
    IMPORTANT = "important"
    MEDIUM = "medium"
    MINOR = "minor"
    LOW = "low"
    INFO = "info"

    @property
    def rank(self) -> int:
        """0 for the most severe; lower is worse."""
        return _RANKS[self]  # looked up: listing the members each time costs more than a merged view's rest


_RANKS: Final = {severity: rank for rank, severity in enumerate(Severity)}


_ID_PREFIX = re.compile(r"^([A-Za-z]+)[-_]?\d+")


def derive_category(finding_id: str | None, title: str) -> str:
    """The category used to deduplicate a finding that names none.

    The seeds' issue tables have no category column, but their ids carry one (``SEC-001`` -> ``SEC``);
    without an id prefix the category is ``general``.
    """
    if finding_id:
        match = _ID_PREFIX.match(finding_id.strip())
        if match:
            return match.group(1).upper()
    return "general"


MAX_LINE: Final = 2**31 - 1
"""The highest line number a finding may name: more than any file has, and within every JSON reader's
integers."""


class Finding(Model):
    """One reported issue; the unit of the append-only findings stream and of deduplication."""

    id: str | None = None
    title: NonBlankText
    file: str | None = None
    line: int | None = Field(default=None, ge=1, le=MAX_LINE)
    category: str = ""
    severity: Severity | None = None
    confidence: Confidence | None = None
    agent: str = ""
    evidence: Text | None = None
    verified: bool | None = None

    @field_validator("category", mode="before")
    @classmethod
    def _no_category(cls, value: Any) -> Any:
        return "" if value is None else value

    # After validation, not before: a model validator that runs first makes pydantic hand it the input
    # as a Python dict, a third of the cost of decoding a finding from JSON.
    @model_validator(mode="after")
    def _defaults(self) -> Self:
        fields = self.__dict__  # read once: each attribute read of a model goes through its __getattr__
        if not fields["category"] or fields["category"].isspace():
            fields["category"] = derive_category(fields["id"], fields["title"])
            self.__pydantic_fields_set__.add("category")
        if fields["agent"].isspace():  # no name: as if none were given (a blank reporter is no one)
            fields["agent"] = ""
        file = fields["file"]
        if file is not None and not file.strip():
            # A blank file names no place: taken as one, every finding "at :3" would merge into one.
            fields["file"] = None
        return self

    @property
    def location(self) -> str:
        """``file:line`` (or just the file, or ``""``)."""
        if self.file is None:
            return ""
        return f"{self.file}:{self.line}" if self.line is not None else self.file
