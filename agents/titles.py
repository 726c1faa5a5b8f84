"""What a report's titles and labels name: the contract's sections as agents write them.

A section's title is read without emphasis, code marks, emoji and parenthesised asides (``### 📋
Summary (short):`` is the Summary). Status and Summary, the two sections every report needs, are also
written as labelled lines (``**Status:** SUCCESS``, ``- 📋 **Summary:** ...``) and as headings that
carry the value (``### Status: PARTIAL``). A report's placeholders (``[Agent Name]``, ``<agent-id>``)
tell a template from a result.
"""

from __future__ import annotations

import re
from typing import Final, NamedTuple

from agents.cells import bare
from agents.markdown import Fence, Line, Part, fence_after

__all__ = [
    "is_placeholder",
    "is_status",
    "keeps_placeholders",
    "key",
    "label",
    "labelled_parts",
    "section_key",
]

_PLACEHOLDERS: Final = frozenset({"agent name", "agent", "name", "agent-name", "agent_name", "agent type"})
_PLACEHOLDER_TEXT: Final = re.compile(r"\[[^\[\]\n]{1,80}\](?!\()|<[A-Za-z][\w -]{0,40}>")
# the word ends where a letter or digit does not follow: `PARTIAL_SUCCESS` is `PARTIAL SUCCESS`
STATUS: Final = re.compile(r"(SUCCESS|PARTIAL|FAILED)(?![^\W_])", re.IGNORECASE)
_EMOJI: Final = "[\u2190-\u2bff\ufe0f\u200d\U0001f000-\U0001faff]"
"""An emoji (or a symbol, an arrow) and what joins emoji, as agents put them before a label."""
# Possessive (`*+`, `++`) where runs of spaces meet: a line of agent output may hold a megabyte of them,
# and backtracking into every split of a run is quadratic.
_LABEL: Final = re.compile(
    r"[ \t]*+(?:>[ \t]*+)?+(?:(?:[-*+]|\d{1,3}[.)])[ \t]++)?+(?:" + _EMOJI + r"++[ \t]*+)?+\**+[ \t]*+"
    r"(?:" + _EMOJI + r"++[ \t]*+)?+(?:(?:overall|final)[ \t]++)?+"
    r"(status|summary)[ \t]*+\**+[ \t]*+:[ \t]*+\**+[ \t]*+(.*)",
    re.I,
)
"""``**Status:** SUCCESS``, ``Summary: ...``: a contract section written as a labelled line, in a list
(``-``, ``*``, ``+``, ``1.``) or a quote too, qualified (``**Overall Status:**``), or after an emoji
(``**📋 Summary:**``)."""


def is_placeholder(name: str) -> bool:
    """An agent name that is a template's placeholder (``[Agent Name]``, ``<agent>``): the report is one
    of the protocol's templates, quoted or echoed by an agent, not a result. (``[Security Auditor]`` is a
    name, filled in where the template had one.)"""
    name = name.strip("*_` ")
    bracketed = len(name) > 2 and (name[0], name[-1]) in {("[", "]"), ("<", ">")}
    return bracketed and name[1:-1].strip().lower() in _PLACEHOLDERS


def keeps_placeholders(text: str) -> bool:
    """Whether a template's text still has its placeholders (``[error category]``, ``<agent-id>``; not a
    Markdown link)."""
    return _PLACEHOLDER_TEXT.search(text) is not None


def key(title: str) -> str:
    """A section's title as the contract names it: ``### 📋 Summary:`` is the Summary."""
    title = bare(_without_parentheses(title.replace("*", "").replace("`", "")))
    return " ".join(title.lower().split())


def _without_parentheses(text: str) -> str:
    """``text`` without each ``(`` and what follows it up to the first ``)``, in one pass (an expression
    for it scanned the rest of the text again from every ``(`` without a ``)`` after it)."""
    kept: list[str] = []
    at = 0
    while (start := text.find("(", at)) != -1 and (end := text.find(")", start)) != -1:
        kept.append(text[at:start])
        at = end + 1
    kept.append(text[at:])
    return "".join(kept)


def is_status(text: str) -> bool:
    """Whether ``text`` is a status word alone (around emphasis or an emoji: ``**✅ SUCCESS**``)."""
    return STATUS.fullmatch(bare(text)) is not None


class Label(NamedTuple):
    """A contract section given with its label: ``**Status:** SUCCESS``, ``### Status: PARTIAL``."""

    key: str
    """``status`` or ``summary``."""
    title: str
    """The label as written (``STATUS``)."""
    value: str
    """What follows the colon."""


def label(text: str) -> Label | None:
    """The Status or Summary a line or a title gives with its label. A status only when its value is the
    status word alone (``Status: failed checks were fixed`` is prose), or none (``**Status:**`` over the
    word)."""
    match = _LABEL.fullmatch(text)
    if match is None:
        return None
    name, value = key(match.group(1)), match.group(2)
    if name == "status" and value.strip().strip("*") and not is_status(value.strip()):
        return None
    return Label(name, match.group(1), value)


def section_key(title: str) -> str:
    """The key of a section's title, ``### Status: PARTIAL`` being the Status section."""
    labelled = label(title)
    return labelled.key if labelled is not None else key(title)


def labelled_parts(preamble: list[Line], taken: set[str]) -> tuple[list[Part], list[Line]]:
    """The Status and Summary a report gives as labelled lines before its first section, as sections,
    unless it has them (``taken``: the keys of its sections); and the rest of the preamble. A summary runs
    to a blank line; fenced lines are content."""
    parts: list[Part] = []
    rest: list[Line] = []
    taken = set(taken)
    fence: Fence | None = None
    index = 0
    while index < len(preamble):
        number, text = preamble[index]
        outside = fence is None
        fence, is_fence = fence_after(fence, text)
        found = label(text.rstrip()) if outside and not is_fence else None
        index += 1
        if found is None or found.key in taken:
            rest.append((number, text))
            continue
        name, value = found.key, found.value.strip().rstrip("*").rstrip()
        body = [(number, value)] if value else []
        if not value and name == "status" and index < len(preamble) and is_status(preamble[index][1]):
            body, index = [preamble[index]], index + 1
        while name == "summary" and index < len(preamble) and preamble[index][1].strip():
            following = preamble[index][1]
            if _LABEL.fullmatch(following.rstrip()) or fence_after(None, following)[1]:
                break
            body.append(preamble[index])
            index += 1
        if body:
            parts.append(Part(name.capitalize(), number, body))
            taken.add(name)
        else:  # `**Summary:**` and a blank line: no summary here
            rest.append((number, text))
    return parts, rest
