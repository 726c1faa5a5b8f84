"""The confidence of a result report: its score, seed 001's verified/inferred breakdown and its Confidence
Justification, wherever the report puts them (``### Confidence``, ``### Confidence Breakdown``,
``### Confidence Justification``, or the last two inside the first, as a heading or a bold label)."""

from __future__ import annotations

import re
from typing import Final

from pydantic import ValidationError

from agents.cells import number
from agents.markdown import Part
from bus.display import quoted
from bus.results import ConfidenceJustification, ConfidenceReport

__all__ = ["ConfidenceParts"]

# Possessive (`*+`, `?+`) where runs of spaces meet: a line of agent output may hold a megabyte of them,
# and backtracking into every split of a run is quadratic.
_SCORE: Final = re.compile(
    r"(?:(?:overall\s++)?(?:confidence|score)\s*+[:=]\s*+)?(\d{1,3}(?:\.\d+)?)\s*+(?:%|/\s*+100)?+"
    r"\s*+(?:\(([^)]*+)\))?+\s*+(?:[-–—:|]\s*+(.*))?",  # 85 (High) - why
    re.IGNORECASE,
)
_BREAKDOWN: Final = re.compile(
    r"\b(verified|inferred|combined)(?:[ _]confidence)?\s*[:=]\s*(\d{1,3}(?:\.\d+)?)"
    r"(?![\d.]|\s*(?:of|out of)\b|\s*/\s*(?!100\b)\d)",  # a count (`verified: 2 of 3`) is no score
    re.IGNORECASE,
)
_NESTED_JUSTIFICATION: Final = re.compile(
    r"(?:#{4,6}\s++)?+(?:\*\*)?+\s*+confidence justification\s*+:?+\s*+(?:\*\*)?+\s*+:?+", re.IGNORECASE
)
"""A Confidence Justification inside the Confidence section: a heading under it, or a label alone on its
line."""
_JUSTIFICATION: Final = re.compile(
    r"\s*+[-*•]?+\s*+(score|evidence count|verification method|(?:potential )?blind spots)\s*+:\s*+(.*)",
    re.IGNORECASE,
)


class ConfidenceParts:
    """Collects a report's confidence sections; what is wrong with them goes to ``violations``."""

    def __init__(self, violations: list[str]) -> None:
        self.violations = violations
        self.score: tuple[float, str] | None = None
        """The score and the words that justify it."""
        self.breakdown: dict[str, float] = {}
        self.detailed: ConfidenceJustification | None = None
        self._unread: tuple[str, str] | None = None
        """A Confidence section that gave no score: its first line (a violation unless the breakdown or the
        justification, wherever they come, give one) and its words."""

    def section(self, part: Part) -> Part | None:
        """Read ``### Confidence``; the Confidence Justification it holds, if any, for :meth:`justification`."""
        own = part.lines
        at = next((i for i, (_, t) in enumerate(own) if _NESTED_JUSTIFICATION.fullmatch(t.strip())), None)
        nested = None if at is None else Part(part.title, own[at][0], own[at + 1 :])
        lines = [t.replace("**", "").strip() for _, t in (own if at is None else own[:at]) if t.strip()]
        score: float | None = None
        why: list[str] = []  # the justification: the score's own words, then every other line
        for index, line in enumerate(lines):
            breakdown = _BREAKDOWN.search(line)
            match = _SCORE.fullmatch(line) if index == 0 else None
            if match is not None:  # `88 - why`, which may name the breakdown too: `(verified: 90, ...)`
                score = float(match.group(1))
                why += [" - ".join(x.strip() for x in match.group(2, 3) if x and x.strip())]
                self._read_breakdown(line)
            elif breakdown is not None:
                kind = breakdown.group(1).lower()
                self.breakdown[kind] = float(breakdown.group(2))
                reason = line[breakdown.end() :].strip(" \t()-–—:|")
                why += [f"{kind}: {reason}"] if reason else []
            else:
                why.append(line)
        words = "\n".join(x for x in why if x)
        if score is None:  # a breakdown or justification elsewhere may give it: see :meth:`report`
            self._unread = (lines[0] if lines else "", words)
        else:
            self.score = (score, words)
        return nested

    def breakdown_section(self, part: Part) -> None:
        """Seed 001's Confidence Breakdown as a section of its own: its verified, inferred and combined
        confidences (a score, when there is no Confidence section)."""
        for _, line in part.lines:
            self._read_breakdown(line.replace("**", ""))

    def _read_breakdown(self, line: str) -> None:
        """Every ``kind: number`` of the breakdown a line names."""
        self.breakdown |= {b.group(1).lower(): float(b.group(2)) for b in _BREAKDOWN.finditer(line)}

    def justification(self, part: Part) -> None:
        """Read the Confidence Justification's labelled lines."""
        values: dict[str, str] = {}
        for _, line in part.lines:
            match = _JUSTIFICATION.fullmatch(line.replace("**", "").rstrip())
            if match is not None:
                values[match.group(1).lower().removeprefix("potential ")] = match.group(2).strip()
        score = number(values.get("score", ""))
        if "score" in values and (score is None or not 0 <= score <= 100):
            self.violations.append(f"Confidence Justification score {quoted(values['score'])} is not 0-100")
            score = None
        self.detailed = ConfidenceJustification(
            score=score,
            evidence_count=values.get("evidence count"),
            verification_method=values.get("verification method"),
            blind_spots=values.get("blind spots"),
        )

    def report(self) -> ConfidenceReport | None:
        """The report's confidence, if it gives a score (or a breakdown or justification that does)."""
        score = self.score
        if score is None:
            given = (
                self.detailed.score if self.detailed and self.detailed.score else _combined(self.breakdown)
            )
            if given is not None:
                score = (given, self._unread[1] if self._unread else "")
            elif self._unread is not None:
                self.violations.append(f"Confidence {quoted(self._unread[0])} is not a score from 0 to 100")
        if score is None:
            return None
        try:
            return ConfidenceReport(
                score=score[0],
                justification=score[1],
                verified=self.breakdown.get("verified"),
                inferred=self.breakdown.get("inferred"),
                combined=self.breakdown.get("combined"),
                detailed=self.detailed,
            )
        except ValidationError:
            self.violations.append(f"Confidence {score[0]:g} (or its breakdown) is outside 0-100")
            return None


def _combined(breakdown: dict[str, float]) -> float | None:
    """The score a breakdown gives: its combined confidence, else seed 001's (verified + inferred) / 2."""
    if "combined" in breakdown:
        return breakdown["combined"]
    if {"verified", "inferred"} <= breakdown.keys():
        return (breakdown["verified"] + breakdown["inferred"]) / 2
    return None
