"""The bits of Markdown structure a result report is read with: sections, code fences, tables, lists.

Lines are ``(number, text)`` pairs so every piece keeps the line it came from. Code fences follow
CommonMark closely enough for agent output: a fence opens with three or more backticks or tildes
(backtick fences take no backtick in their info string) and closes with a bare fence of the same
character at least as long; headings and tables inside a fence are content.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from bus.results import Table

__all__ = [
    "HEADING",
    "Fence",
    "Line",
    "Part",
    "fence_after",
    "list_items",
    "parse_tables",
    "releveled",
    "split_cells",
    "split_sections",
]

Line = tuple[int, str]
"""A line number (1-based, in whatever text the lines came from) and the line's text."""
Fence = tuple[str, int]
"""An open code fence: its marker character and length."""

HEADING: Final = re.compile(r" {0,3}(#{1,6})[ \t]++((?:[^ \t#]|[ \t#]++[^ \t#])*+)[ \t#]*+")
"""A heading line (rstripped): its ``#``s and its title without the closing ``#``s. Written to match in
linear time: a lazy title before ``[ \t#]*`` tried every split of a long run of spaces (quadratic)."""
_FENCE: Final = re.compile(r"[ \t]*(`{3,}|~{3,})(.*)")
_DELIMITER: Final = re.compile(r"\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)*\|?")
_CELL_SPLIT: Final = re.compile(r"(?<!\\)\|")
_LIST_ITEM: Final = re.compile(r"( ?)(?:[-*+•]|\d+[.)])\s+(.*)")


@dataclass
class Part:
    """A heading's section: its title, the line of the heading, and the lines up to the next one."""

    title: str
    line: int
    lines: list[Line] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "\n".join(text for _, text in self.lines).strip()


def fence_after(fence: Fence | None, line: str) -> tuple[Fence | None, bool]:
    """The fence open after ``line`` (given the one open before it), and whether it is a fence line."""
    match = _FENCE.fullmatch(line)
    if match is None:
        return fence, False
    marker, info = match.group(1), match.group(2).strip()
    if marker[0] == "`" and "`" in info:
        return fence, False
    if fence is None:
        return (marker[0], len(marker)), True
    closes = marker[0] == fence[0] and len(marker) >= fence[1] and not info
    return (None if closes else fence), True


def releveled(text: str, moves: Mapping[int, int]) -> str:
    """``text`` with each heading outside code fences whose level ``moves`` has at the level it gives."""
    lines = text.split("\n")
    fence: Fence | None = None
    for index, line in enumerate(lines):
        outside = fence is None
        fence, is_fence = fence_after(fence, line)
        if outside and not is_fence and line.lstrip(" ").startswith("#"):
            heading = HEADING.fullmatch(line.rstrip())
            if heading is not None and len(heading.group(1)) in moves:
                level = moves[len(heading.group(1))]
                lines[index] = line[: heading.start(1)] + "#" * level + line[heading.end(1) :]
    return "\n".join(lines)


def split_sections(lines: list[Line], level: int) -> tuple[list[Line], list[Part]]:
    """The lines before the first heading of ``level``, and one part per such heading."""
    preamble: list[Line] = []
    parts: list[Part] = []
    fence: Fence | None = None
    for number, line in lines:
        outside = fence is None
        fence, is_fence = fence_after(fence, line)
        heading = HEADING.fullmatch(line.rstrip()) if outside and not is_fence else None
        if heading is not None and len(heading.group(1)) == level:
            parts.append(Part(heading.group(2).strip(), number))
        else:
            (parts[-1].lines if parts else preamble).append((number, line))
    return preamble, parts


def parse_tables(lines: list[Line]) -> list[Table]:
    """The Markdown tables among ``lines`` (outside code fences), cells without code marks."""
    tables: list[Table] = []
    run: list[str] = []
    fence: Fence | None = None
    for _, line in [*lines, (0, "")]:
        outside = fence is None
        fence, is_fence = fence_after(fence, line)
        if outside and not is_fence and line.strip().startswith("|"):
            run.append(line.strip())
            continue
        if len(run) >= 2 and _DELIMITER.fullmatch(run[1]):
            tables.append(Table(headers=_cells(run[0]), rows=[_cells(row) for row in run[2:]]))
        run = []
    return tables


def _cells(row: str) -> list[str]:
    row = row.strip()
    row = row[1:] if row.startswith("|") else row
    row = row[:-1] if row.endswith("|") and not row.endswith("\\|") else row
    return [cell.replace("\\|", "|").replace("`", "").strip() for cell in _CELL_SPLIT.split(row)]


def split_cells(text: str) -> list[str]:
    """``a | b \\| c`` -> ``["a", "b | c"]`` (a list item's ``|``-separated fields)."""
    return [cell.replace("\\|", "|").strip() for cell in _CELL_SPLIT.split(text)]


def list_items(lines: list[Line]) -> list[tuple[int, list[str]]]:
    """Top-level list items (bullets or numbers): their line and their text lines, stripped.

    Lines after an item that are not themselves a top-level item (continuations, nested lists) belong
    to it; text before the first item is not part of any.
    """
    items: list[tuple[int, list[str]]] = []
    for number, line in lines:
        item = _LIST_ITEM.fullmatch(line)
        if item is not None:
            items.append((number, [item.group(2).strip()]))
        elif items and line.strip():
            items[-1][1].append(line.strip())
    return items
