"""The cells of a result report's Markdown tables: columns found by their header, locations, numbers and
severities read leniently, and the rows of an issue table turned into :class:`~bus.findings.Finding`.

Lenient means a cell that cannot be read leaves its value unset and adds a line to the report's
``violations``, so that a report is never dropped for one bad cell.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final, NamedTuple

from pydantic import ValidationError

from bus.display import quoted
from bus.findings import MAX_LINE, Finding, Severity
from bus.results import Table

__all__ = [
    "NONE",
    "bare",
    "cell",
    "column",
    "findings",
    "names_no_line",
    "number",
    "severity",
    "split_location",
]

_MARKS: Final = frozenset(" \t*`_.:")
_MARK_CATEGORIES: Final = frozenset({"So", "Sk", "Mn", "Cf", "Zs"})
"""Symbols (emoji), modifiers, combining marks (an emoji's variation selector), format characters."""
NONE: Final = frozenset({"none", "n/a", "na", "nothing", "no issues", "no blockers", "-"})
"""What an empty section or cell says instead of being empty."""

_NOTHING: Final = NONE | {"—", "–"}
"""What a cell of a row with no finding in it says."""
_CONFIDENCE: Final = ("confidence", "conf")
_WHERE: Final = ("fileline", "location", "file", "path")
"""The headers of a finding's place: ``file:line`` in one cell, or a file with a ``Line`` column."""
_LOCATION: Final = re.compile(r"(\S+?):(-?\d+)(?:[-:]\d+)?\b.*")
_SPACED: Final = re.compile(r"([^:]++):(\d++)(?:[-:]\d++)?+")
"""``src/my file.ts:3``: a path with spaces, then its line and nothing else (see :func:`_located`)."""
_WORDED: Final = re.compile(
    r"(\S+?)(?:[:#]L|,?\s++\(?(?:lines?\s*+|L))(\d++)(?:\s*+[-–]\s*+L?\d++)?+\)?+", re.I
)
"""``src/a.py line 3``, ``src/a.py, line 3``, ``src/a.py (lines 3-5)``, ``src/a.py L3``, ``src/a.py:L3``,
``src/a.py#L3``: a path and its line in words (see :func:`_located`)."""
_EXTENSION: Final = re.compile(r"\.\w+$")
_WORDED_EXTENSION: Final = re.compile(r"\.[A-Za-z]\w*$")
"""An extension that starts with a letter: ``v1.2 line 3`` and ``fig.2 L3`` are prose."""
_NOT_A_LINE: Final = re.compile(r"(?::L?|#L|\s\(?(?:lines?\s*|L))(-\d+|0+|\d{10,})\b", re.I)
"""A line number no file has, in any form :func:`_located` reads (``:0``, ``line 0``, ``#L99999999999``)."""


_URL: Final = re.compile(r"[A-Za-z][\w+.-]*://\S*")
_LINK: Final = re.compile(r"\[([^\]]*+)\]\(\s*+<?+([^)\s>]*+)>?+(?:\s++\"[^\"]*+\")?+\s*+\)")
"""``[text](path "title")``; possessive, so that a run of spaces is never split every way (quadratic)."""
_ANCHOR: Final = re.compile(r"#L(\d+)(?:-L?\d+)?$")


def split_location(location: str) -> tuple[str | None, int | None]:
    """``src/a.ts:45`` -> (``src/a.ts``, 45); a bare path has no line; a word or prose has neither.

    A Markdown link names its place twice: ``[src/a.ts:45](src/a.ts#L45)`` and ``[a.ts](src/a.ts#L45)``
    are both ``src/a.ts``, 45. A relative target is the path (the text may be a short name); a URL's is
    not (``https://host/repo/blob/main/src/a.ts``), so then the text's path is; the line is the target's
    ``#L45`` anchor, else the text's.
    """
    location = location.replace("`", "").strip()
    link = _LINK.fullmatch(location)
    if link is not None:
        return _linked(link.group(1), link.group(2))
    return _located(location)


def names_no_line(location: str) -> bool:
    """Whether ``location`` gives a line number that no file has (``a.py:0``, ``a.py:99999999999``), which
    :func:`split_location` reads as no line."""
    return _NOT_A_LINE.search(location) is not None


def _linked(text: str, target: str) -> tuple[str | None, int | None]:
    file, line = _located(text.strip())
    anchor = _ANCHOR.search(target)
    path, _, _ = target.partition("#")
    if path and "://" not in path:
        file = _located(path)[0] or file
    if anchor is not None and 1 <= _integer(anchor.group(1)) <= MAX_LINE:
        line = _integer(anchor.group(1))
    return file, line if file is not None else None


def _located(location: str) -> tuple[str | None, int | None]:
    # A URL's colon is its scheme's and its port's, never a line's (``http://localhost:3000/login``); an
    # anchor may still name one (``https://host/repo/blob/main/a.ts#L45``). Only a cell that is a URL:
    # ``src/db/users.ts:42 (https://cwe.mitre.org/...)`` is a file and its line.
    url = _URL.fullmatch(location) is not None
    match = (None if url else _LOCATION.fullmatch(location) or _spaced(location)) or _worded(location)
    if match is not None:
        path, line = match.group(1), _integer(match.group(2))
        if 1 <= line <= MAX_LINE:
            return path, line
        if " " in path:  # a path with spaces, known as one by its line
            return path, None
    path = match.group(1) if match else location
    if path and " " not in path and path.lower() not in NONE and ("/" in path or "." in path.strip(".")):
        return path, None
    return None, None


def _integer(digits: str) -> int:
    """The number ``digits`` (a sign before them or not) write; one of more digits than ``int()`` reads
    (4300) is beyond any line, and read as one past :data:`~bus.findings.MAX_LINE`."""
    try:
        return int(digits)
    except ValueError:
        return -MAX_LINE - 1 if digits.startswith("-") else MAX_LINE + 1


def _spaced(location: str) -> re.Match[str] | None:
    """A path with spaces and its line: prose has spaces too, so only the whole text as ``path:line``,
    the path with a directory or an extension, counts (``My Documents/a.py:7``, ``src/my file.ts:3``)."""
    match = _SPACED.fullmatch(location)
    if match is None:
        return None
    path = match.group(1)
    return match if path == path.strip() and ("/" in path or _EXTENSION.search(path)) else None


def _worded(location: str) -> re.Match[str] | None:
    """A path and its line in words: only a path with a directory or an extension counts (``step 3``
    and ``see line 3`` are prose)."""
    match = _WORDED.fullmatch(location)
    if match is None:
        return None
    path = match.group(1)
    return match if "/" in path or _WORDED_EXTENSION.search(path) else None


def number(text: str) -> float | None:
    """``87``, ``87.5`` or ``87%``; None for anything else."""
    try:
        return float(text.strip().rstrip("%").strip())
    except ValueError:
        return None


def _norm(header: str) -> str:
    return re.sub(r"[^a-z]", "", header.lower())


def column(headers: list[str], names: tuple[str, ...]) -> int | None:
    """The index of the first of ``names`` among the headers (compared in lower case, letters only)."""
    normalized = [_norm(h) for h in headers]
    return next((normalized.index(n) for n in names if n in normalized), None)


_EMPHASIS: Final = re.compile(r"(\*{1,2})([^*\s](?:[^*]*[^*\s])?)\1")


def cell(row: list[str], index: int | None) -> str:
    """The cell at ``index`` without Markdown emphasis around it (``**SEC-001**``); empty when there is
    no such column or the row is short."""
    text = row[index] if index is not None and index < len(row) else ""
    emphasis = _EMPHASIS.fullmatch(text)
    return emphasis.group(2) if emphasis else text


def bare(text: str) -> str:
    """``text`` without the marks agents put around a value: spaces, emphasis, code marks and emoji
    (``**✅ SUCCESS**``, ``🔴 Critical``). Brackets stay: ``[SUCCESS | FAILED]`` is a template's."""
    start, end = 0, len(text)
    while start < end and _is_mark(text[start]):
        start += 1
    while end > start and _is_mark(text[end - 1]):
        end -= 1
    return text[start:end]


def _is_mark(char: str) -> bool:
    return char in _MARKS or unicodedata.category(char) in _MARK_CATEGORIES


def severity(raw: str, what: str, violations: list[str]) -> Severity | None:
    """The severity a cell names; an unknown one is a violation of ``what`` and reads as none."""
    raw = bare(raw).lower()
    if not raw:
        return None
    try:
        return Severity(raw)
    except ValueError:
        violations.append(f"{what}: unknown severity {quoted(raw)}")
        return None


def findings(
    tables: list[Table],
    agent: str,
    evidence: dict[str, str],
    violations: list[str],
    confidence: float | None = None,
) -> list[Finding]:
    """The findings of every issue table (a location column and a severity or issue column), each with
    the evidence paragraph that starts with its id, when there is one. A table without a Confidence
    column gives its findings ``confidence``, the report's own (seed 001's worked example combines the
    agents' confidences); a blank cell of that column is no confidence."""
    found: list[Finding] = []
    for table in tables:
        if not _places(table.headers):
            continue
        if column(table.headers, ("severity", "issue", "finding")) is None:
            continue
        columns = _columns(table.headers)  # once a table: a row's cells are not its headers' count
        for row in table.rows:
            finding = _finding(columns, row, agent, evidence, violations)
            if finding is not None and columns.confidence is None and confidence is not None:
                finding = finding.model_copy(update={"confidence": confidence})
            if finding is not None:
                found.append(finding)
    return found


def _says_nothing(text: str) -> bool:
    """A cell that is blank, says there is nothing (``-``, ``None found``), or is a ``[placeholder]``."""
    text = text.strip(" *_`").lower()
    bracketed = len(text) > 1 and text[0] == "[" and text[-1] == "]" and "](" not in text
    return not text or bracketed or text in _NOTHING or text.removesuffix(" found") in _NOTHING


def _places(headers: list[str]) -> bool:
    """Whether a table names places: a ``file:line`` column, or a file column beside a line or severity
    column (``| Issue | File | Change |`` is a change log)."""
    if column(headers, ("fileline", "location")) is not None:
        return True
    return column(headers, ("file", "path")) is not None and column(headers, ("line", "severity")) is not None


def _with_line(place: str, line_cell: str, name: str, violations: list[str]) -> str:
    """The place of a ``| File | Line |`` row as ``file:line``: a line cell that says nothing (``N/A``,
    ``-``) or names no line (``L5`` does: 5) leaves the file as it is, the latter with a violation."""
    written = line_cell.replace("`", "").strip()
    number = re.sub(r"^(?:lines?\s*|L)(?=\d)", "", written, flags=re.IGNORECASE)
    if _says_nothing(written) or split_location(place)[1] is not None:
        return place
    glued = f"{place}:{number}"
    if split_location(glued)[1] is None and not _NOT_A_LINE.search(glued):  # (that one is said below)
        violations.append(f"{name}: line {quoted(written)} is not a line number: kept without one")
        return place
    return glued


class _Columns(NamedTuple):
    """Where an issue table has each field of a finding (None: no such column)."""

    id: int | None
    where: int | None
    line: int | None
    title: int
    severity: int | None
    category: int | None
    confidence: int | None


def _columns(headers: list[str]) -> _Columns:
    id_ = column(headers, ("id", "issueid", "findingid"))
    where = column(headers, _WHERE)
    line_column = column(headers, ("line", "lines", "lineno", "linenumber"))
    title = column(headers, ("issue", "finding", "title", "description", "problem"))
    if title is None:
        title = next(i for i in range(len(headers)) if i not in (id_, where, line_column))
    level = column(headers, ("severity",))
    category = column(headers, ("category", "type", "kind"))
    return _Columns(id_, where, line_column, title, level, category, column(headers, _CONFIDENCE))


def _finding(
    columns: _Columns, row: list[str], agent: str, evidence: dict[str, str], violations: list[str]
) -> Finding | None:
    id_, where, line_column, title = columns.id, columns.where, columns.line, columns.title
    if _says_nothing(cell(row, title)) and _says_nothing(cell(row, where)):
        return None  # the template's row left in (`| [SEC-001] | [What is wrong] |`), `| 1 | None | - |`
    ident = cell(row, id_) or None
    if not cell(row, title).strip():
        violations.append(f"finding {quoted(ident or cell(row, where))} has no title: left out")
        return None
    name = f"finding {quoted(ident or cell(row, title))}"
    place = cell(row, where).replace("`", "").strip()
    place = _with_line(place, cell(row, line_column), name, violations)
    file, line = split_location(place)
    if line is None and names_no_line(place):
        violations.append(
            f"{name}: {quoted(place)} names no line (lines are 1 to {MAX_LINE}): kept without one"
        )
    level = severity(cell(row, columns.severity), name, violations)
    category = cell(row, columns.category).strip() or None
    raw = cell(row, columns.confidence)
    confidence = number(raw) if raw else None
    if raw and (confidence is None or not 0 <= confidence <= 100):
        violations.append(f"{name}: confidence {quoted(raw)} is not 0-100")
        confidence = None
    try:
        return Finding(
            id=ident,
            title=cell(row, title),
            file=file,
            line=line,
            severity=level,
            category=category,
            confidence=confidence,
            agent=agent,
            evidence=evidence.get(ident or "", "").strip() or None,
        )
    except ValidationError as exc:
        violations.append(f"{name}: {exc.errors()[0]['msg']}")
        return None
