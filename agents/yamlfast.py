"""Plain YAML without the event stream: the core schema of plain scalars, and a reader of the usual
shapes of signal bodies.

:func:`read` takes the block shapes the protocol's signals are written in (seed 000) and nothing else:

- ``key: value`` lines, the value a plain scalar on one line (resolved by :func:`plain`);
- ``key: |`` literal blocks (clip chomping, indentation taken from the first line);
- ``key:`` followed by a block sequence, indented or at the key's own column, of plain scalars or of
  mappings of that same shape (``questions:`` / ``  - question_id: Q1`` / ``    text: ...``), or by a
  nested mapping; an empty value when neither follows;
- every line ending in a newline; no comments, quotes, flow collections, anchors, aliases, tags,
  directives, tabs, blank lines outside literal blocks, or multi-line plain scalars.

Within that shape the result is exactly what the YAML event stream gives (a differential property test
holds them equal, and on every signal of the protocol's documents); for anything outside it, however
harmless, :func:`read` returns ``None`` and the caller loads the text through the safe YAML loader.
No aliases means nothing to expand, and nesting is bounded by the caller's ``max_depth``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Final

__all__ = ["Value", "WrittenFloat", "WrittenInt", "plain", "read", "resolve"]

Value = str | int | float | bool | None | list["Value"] | dict["Value", "Value"]

# The YAML 1.2 core schema in one pattern; the group that matched picks the conversion.
_CORE_SCHEMA: Final = re.compile(
    r"(~|null|Null|NULL|)|(true|True|TRUE)|(false|False|FALSE)|([-+]?[0-9]+)|0o([0-7]+)|0x([0-9a-fA-F]+)"
    r"|([-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?)|([-+]?)\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)()"
)


def _based(base: int) -> Callable[[str], int]:
    """The conversion of octal or hexadecimal digits, which ``int()`` takes however many there are: one
    of more digits than Python writes in decimal raises ``ValueError`` (and stays text), as decimal
    digits do, since no envelope could carry it (JSON writes it in decimal)."""

    def convert(digits: str) -> int:
        number = int(digits, base)
        str(number)  # the ValueError of int(), the other way
        return number

    return convert


_CONVERT: Final[dict[int, Callable[[str], Value]]] = {
    1: lambda _: None,
    2: lambda _: True,
    3: lambda _: False,
    4: int,
    5: _based(8),
    6: _based(16),
    7: float,
    8: lambda v: float(f"{v}inf"),
    9: lambda _: float("nan"),
}
_SPECIAL_START: Final = frozenset("~nNtTfF0123456789+-.")  # how any non-string plain scalar starts

# what the reader refuses anywhere: tabs, CR and other line breaks, BOM, what YAML rejects
_NOT_SIMPLE: Final = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufeff\ufffe\uffff]")
# ``key:`` and its value (``None`` or empty when there is none; trailing spaces are the reader's to drop);
# a key of at most 1024 characters, as the loader's (libyaml's limit on a simple key)
_ENTRY: Final = re.compile(r"([A-Za-z_][A-Za-z0-9_]{0,1023}):(?: +(.*))?")
# the characters a plain scalar may not start with, and the keys the core schema does not read as text
_INDICATORS: Final = frozenset("-?:,[]{}#&*!|>'\"%@` ")
_NOT_TEXT_KEYS: Final = frozenset(("true", "True", "TRUE", "false", "False", "FALSE", "null", "Null", "NULL"))
_MAX_NESTING: Final = 8
# A line of the flattest shape: ``key: value``, the value starting with no indicator. What else a value
# may not hold (``: ``, `` #``, a final ``:`` or space) is checked on the whole text at once.
_FLAT_LINE: Final = re.compile(
    r"^([A-Za-z_][A-Za-z0-9_]{0,1023}): +([^-?:,\[\]{}#&*!|>'\"%@` \n][^\n]*)\n", re.MULTILINE
)


class WrittenInt(int):
    """An integer read from a plain scalar, which remembers how it was written: ``str()`` gives that
    text (``0755``, ``0x1f``, ``1234567``), so a text or id field keeps what the author wrote (an agent id
    of digits stays a string, ``0755`` keeps its zero). Everywhere else it is the number."""

    text: str

    def __str__(self) -> str:
        return self.text


class WrittenFloat(float):
    """A float read from a plain scalar, which remembers how it was written (``1.10``, ``8e12345``);
    see :class:`WrittenInt`."""

    text: str

    def __str__(self) -> str:
        return self.text


def plain(value: str) -> Value:
    """Resolve a plain (unquoted, untagged) scalar by the YAML 1.2 core schema; a number remembers its
    text (:class:`WrittenInt`, :class:`WrittenFloat`)."""
    resolved = resolve(value)
    if type(resolved) is int:
        written: WrittenInt | WrittenFloat = WrittenInt(resolved)
    elif type(resolved) is float:
        written = WrittenFloat(resolved)
    else:
        return resolved
    written.text = value
    return written


def resolve(value: str) -> Value:
    """What the YAML 1.2 core schema reads a plain scalar as, in Python's own types."""
    if (value and value[0] not in _SPECIAL_START) or ":" in value or " " in value:
        return value  # what the schema reads as anything but text starts otherwise and has neither
    try:
        if value.isdigit() and value.isascii():
            return int(value)
        match = _CORE_SCHEMA.fullmatch(value)
        if match is None or match.lastindex is None:
            return value
        return _CONVERT[match.lastindex](match.group(match.lastindex))
    except ValueError:  # more digits than int() converts: keep the text
        return value


def read(text: str, max_depth: int = _MAX_NESTING) -> dict[Value, Value] | None:
    """The mapping ``text`` holds when it has one of the usual shapes (see the module), else ``None``.

    ``None`` also when the mapping nests deeper than ``max_depth`` collections, so that the loader
    reports it.
    """
    if not text.endswith("\n") or not _printable(text):
        return None
    flat = _flat(text)
    if flat is not None:
        return flat
    lines = text.split("\n")
    lines.pop()
    reader = _Reader(lines, min(max_depth, _MAX_NESTING))
    try:
        mapping = reader.mapping(0, 1, None)
    except _NotSimple:
        return None
    return mapping if mapping and reader.at == len(lines) else None


def _printable(text: str) -> bool:
    """Whether ``text`` holds none of what :data:`_NOT_SIMPLE` refuses."""
    if text.isascii():  # then the same as: no control character but the newline
        return text.replace("\n", " ").isprintable()
    return _NOT_SIMPLE.search(text) is None


def _flat(text: str) -> dict[Value, Value] | None:
    """The mapping of a text of ``key: value`` lines only (no literal, no collection), else ``None``."""
    pairs = _FLAT_LINE.findall(text)
    if (
        len(pairs) != text.count("\n")  # a line of another shape: each match is one whole line
        or text.count(": ") != len(pairs)  # one per line is the key's
        or " #" in text
        or ":\n" in text
        or " \n" in text
    ):
        return None
    flat: dict[Value, Value] = {
        key: plain(value) if value[0] in _SPECIAL_START else value for key, value in pairs
    }
    if len(flat) != len(pairs) or not _NOT_TEXT_KEYS.isdisjoint(flat):
        return None  # a duplicate key (the loader's error), or one the schema does not read as text
    return flat


class _NotSimple(Exception):
    """The text leaves the shapes :func:`read` takes."""


def _lead(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _scalar(value: str) -> Value:
    """A one-line plain scalar (trailing spaces already removed)."""
    if not value or value[0] in _INDICATORS or ": " in value or " #" in value or value[-1] == ":":
        raise _NotSimple
    return plain(value)


class _Reader:
    """Reads block collections from ``lines``; ``at`` is the next line to read."""

    __slots__ = ("at", "limit", "lines")

    def __init__(self, lines: list[str], limit: int) -> None:
        self.lines = lines
        self.at = 0
        self.limit = limit

    def mapping(self, indent: int, depth: int, first: re.Match[str] | None) -> dict[Value, Value]:
        """The block mapping whose keys sit at column ``indent`` (``first``: its entry already read,
        on the line of a sequence's ``-``)."""
        if depth > self.limit:
            raise _NotSimple
        out: dict[Value, Value] = {}
        if first is not None:
            self._entry(out, first, indent, depth)
        lines = self.lines
        pad = " " * indent
        while self.at < len(lines):
            line = lines[self.at]
            match = _ENTRY.fullmatch(line, indent)
            if match is None or not line.startswith(pad):
                if _lead(line) < indent:
                    break
                raise _NotSimple
            self.at += 1
            self._entry(out, match, indent, depth)
        return out

    def _entry(self, out: dict[Value, Value], match: re.Match[str], indent: int, depth: int) -> None:
        key, value = match.groups()
        if key in out or key in _NOT_TEXT_KEYS:
            raise _NotSimple  # a duplicate is the loader's error to report
        if value and value[-1] == " ":
            value = value.rstrip(" ")
        if not value:
            out[key] = self._nested(indent, depth)
        elif value == "|":
            out[key] = self._literal(indent)
        else:
            out[key] = _scalar(value)

    def _nested(self, indent: int, depth: int) -> Value:
        """The value of a ``key:`` at column ``indent``: a collection on the next lines, or none."""
        if self.at == len(self.lines):
            return None
        line = self.lines[self.at]
        lead = _lead(line)
        if line.startswith("-", lead) and lead >= indent:
            return self._sequence(lead, depth + 1)
        if lead > indent:
            return self.mapping(lead, depth + 1, None)
        return None

    def _sequence(self, indent: int, depth: int) -> list[Value]:
        """The block sequence whose ``-`` sit at column ``indent``."""
        if depth > self.limit:
            raise _NotSimple
        items: list[Value] = []
        lines = self.lines
        while self.at < len(lines):
            line = lines[self.at]
            lead = _lead(line)
            if lead != indent or not line.startswith("-", indent):
                if lead <= indent:
                    break  # the next key of the mapping this sequence is the value of
                raise _NotSimple
            rest = line[indent + 1 :]
            if not rest.startswith(" ") or rest[1:2] in ("", " "):
                raise _NotSimple
            self.at += 1
            match = _ENTRY.fullmatch(rest, 1)
            if match is not None:
                items.append(self.mapping(indent + 2, depth + 1, match))
            else:
                items.append(_scalar(rest[1:].rstrip(" ")))
        return items

    def _literal(self, parent: int) -> str:
        """A ``|`` block scalar of a key at column ``parent``, from the line after its header."""
        lines = self.lines
        first = lines[self.at] if self.at < len(lines) else ""
        indent = _lead(first)
        if indent <= parent or indent == len(first):
            raise _NotSimple
        content: list[str] = []
        while self.at < len(lines):
            line = lines[self.at]
            lead = _lead(line)
            if lead == len(line):  # blank
                if lead > indent:
                    raise _NotSimple
                content.append("")
            elif lead <= parent:
                break
            elif lead < indent:
                raise _NotSimple
            else:
                content.append(line[indent:])
            self.at += 1
        while content[-1] == "":
            content.pop()
        return "\n".join(content) + "\n"
