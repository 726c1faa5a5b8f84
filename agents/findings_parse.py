"""Findings written as JSON by hand or by a script: one object, an array of objects, or JSON lines of
:class:`~bus.findings.Finding` fields, validated with messages that say where each error is.

Two other names agents give a finding's fields are read too (the seeds give the shared findings file no
schema): ``location`` (``"src/a.ts:8"``, split as a report's Location column is) for ``file`` and
``line``, and ``description`` for a ``title`` that is missing.

A key given twice in one object (``{"confidence": 90, "confidence": 10}``) is an error of its finding:
a JSON parser keeps one of the values without a word, and which one a script meant is not known
(:mod:`agents.json_keys`).
"""

from __future__ import annotations

import posixpath
from typing import Any, Final

import orjson
from pydantic import ValidationError

from agents.cells import names_no_line, split_location
from agents.json_keys import keys_given_twice, twice_message
from agents.lenient_json import not_json
from agents.parser import describe_errors
from bus.display import quoted
from bus.findings import MAX_LINE, Finding

__all__ = ["LeftOut", "finding_of", "located_findings", "parse_findings", "refuse_boolean_numbers"]

_FIELDS: Final = frozenset(Finding.model_fields)


class LeftOut:
    """The fields left out of findings (see :func:`finding_of`), each with the number of findings it was
    left out of: 20 names at most, each cut to 80 characters, and the others counted together, so that
    a file of made-up names takes bounded memory and one line to report."""

    NAMES: Final = 20

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        """By name; ``""`` counts the names beyond the first 20."""

    def __bool__(self) -> bool:
        return bool(self.counts)

    def add(self, names: list[str]) -> None:
        """Count the fields left out of one finding."""
        for name in dict.fromkeys(name[:80] for name in names):
            key = name if name in self.counts or len(self.counts) < self.NAMES else ""
            self.counts[key] = self.counts.get(key, 0) + 1

    def note(self) -> str:
        """``left out fields that are not a finding's: 'cwe' (2 lines), ...``, one finding per line."""
        counts = ", ".join(
            f"{repr(name) if name else 'others'} ({n:,} line{'s' if n > 1 else ''})"
            for name, n in self.counts.items()
        )
        return f"left out fields that are not a finding's: {counts}"


_NUMBERS: Final = ("line", "confidence")
"""A finding's number fields, where JSON's true and false are refused rather than read as 1 and 0."""


def refuse_boolean_numbers(value: dict[str, Any], where: str = "") -> None:
    """``ValueError`` for a finding's ``line`` or ``confidence`` given as true or false (``where``: the
    finding's path in a larger input, ``findings[0].``), which pydantic would take for 1 or 0."""
    for name in _NUMBERS:
        if isinstance(value.get(name), bool):
            raise ValueError(f"{where}{name}: a number, not {str(value[name]).lower()}")


def finding_of(value: Any, agent: str, ignored: list[str] | None = None) -> Finding:
    """A finding from one decoded JSON value; ``ValueError`` with a readable reason otherwise.

    A field that is not a finding's is an error, or, given ``ignored``, left out and its name added there.
    """
    if not isinstance(value, dict):
        raise ValueError(f"not a JSON object but {type(value).__name__}")
    refuse_boolean_numbers(value)
    if "group_id" in value:  # what `findings --json` writes with each finding: the command's group decides
        value = {name: item for name, item in value.items() if name != "group_id"}
    value = _renamed(value)
    given = value.get("agent")
    if not given or (isinstance(given, str) and given.isspace()):
        value = {**value, "agent": agent}
    if ignored is not None and not value.keys() <= _FIELDS:
        ignored += [name for name in value if name not in _FIELDS]
        value = {name: item for name, item in value.items() if name in _FIELDS}
    try:
        return Finding.model_validate(value)
    except ValidationError as exc:
        raise ValueError(describe_errors(exc)) from None
    except RecursionError:  # a text field of lists or objects is folded into text, a level a frame or two
        raise ValueError("a field nests arrays and objects too deeply to read") from None


def _renamed(value: dict[str, Any]) -> dict[str, Any]:
    """``value`` with its ``location`` as ``file`` and ``line`` (:func:`_place`), and a ``description``
    as the ``title`` it lacks. Anything else stays as it is."""
    location, description, file = value.get("location"), value.get("description"), value.get("file")
    no_file = file is None or (isinstance(file, str) and not file.strip())  # a blank one is none either
    named = isinstance(description, str) and value.get("title") is None
    if location is None and not named:
        return value
    value = dict(value)
    if location is not None:
        path, line = _place(location, None if no_file else file, value.get("line"))
        del value["location"]
        value["file"] = path
        if value.get("line") is None and line is not None:
            value["line"] = line
    if named:
        value["title"] = value.pop("description")
    return value


def _place(location: object, file: object, line: object) -> tuple[str, int | None]:
    """The file and line of a finding's ``location``; ``ValueError`` when it names none, or another file
    than the ``file`` beside it (which one was meant cannot be told). A ``line`` beside it wins."""
    if not isinstance(location, str):
        raise ValueError(f"location: a text (src/a.ts:8), not {type(location).__name__}")
    place = split_location(location)
    if place[1] is None and line is None and names_no_line(location):
        raise ValueError(f"location: {quoted(location)} names no line (lines are 1 to {MAX_LINE})")
    path, number = place
    if path is None:
        raise ValueError(f"location: {quoted(location)} names no file (a path, and its line: src/a.ts:8)")
    if file is not None and _same_path(path) != _same_path(str(file)):
        raise ValueError(
            f"location: {quoted(location)} is not in the file {quoted(str(file))}: give one of them"
        )
    return path, number


def _same_path(path: str) -> str:
    """``path`` as the coordinators' merge compares it: ``./a.py`` and ``a.py`` are one file."""
    return posixpath.normpath(path.strip().replace("\\", "/"))


def parse_findings(text: str, agent: str) -> tuple[list[Finding], list[str]]:
    """The findings in ``text`` (an object, an array, or JSON lines) and the errors, by line."""
    found, errors = located_findings(text, agent)
    return [finding for _, finding in found], errors


def located_findings(text: str, agent: str) -> tuple[list[tuple[str, Finding]], list[str]]:
    """:func:`parse_findings`, each finding with where it is in ``text`` (``finding 2``, ``line 3``)."""
    try:
        whole = orjson.loads(text)
    except orjson.JSONDecodeError:
        whole = None
    else:
        values = whole if isinstance(whole, list) else [whole]
        twice = _keys_twice(text)
        return _validated(
            [
                (f"finding {i + 1}", value, twice[i] if i < len(twice) else [])
                for i, value in enumerate(values)
            ],
            agent,
        )
    found: list[tuple[str, Finding]] = []
    errors: list[str] = []
    # Lines end at LF (a CR before it is white space to JSON), as `import-findings` reads them: not at
    # U+2028 and the other breaks str.splitlines() knows, which a JSON string holds as they are.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
            if isinstance(value, dict):  # anything else is no finding, whatever its keys
                _refuse_keys_twice(keys_given_twice(line).keys)
            found.append((f"line {number}", finding_of(value, agent)))
        except orjson.JSONDecodeError as exc:
            errors.append(f"line {number}: {not_json(exc)}")
        except ValueError as exc:
            errors.append(f"line {number}: {exc}")
    return found, errors


def _validated(
    triples: list[tuple[str, Any, list[str]]], agent: str
) -> tuple[list[tuple[str, Finding]], list[str]]:
    found: list[tuple[str, Finding]] = []
    errors: list[str] = []
    for where, value, twice in triples:
        try:
            if isinstance(value, dict):
                _refuse_keys_twice(twice)
            found.append((where, finding_of(value, agent)))
        except ValueError as exc:
            errors.append(f"{where}: {exc}")
    return found, errors


def _refuse_keys_twice(keys: list[str]) -> None:
    if keys:
        raise ValueError(twice_message(keys))


def _keys_twice(text: str) -> list[list[str]]:
    """For each item of the JSON ``text`` (of an array, or its one value), the keys given more than once
    in an object of it, at any depth (none when it cannot be read: see :func:`keys_given_twice`)."""
    twice = keys_given_twice(text)
    items = twice.value if isinstance(twice.value, list) else [twice.value]
    found: list[list[str]] = [[] for _ in items]
    if not twice.found:
        return found
    owner: dict[int, int] = {}  # each object by identity: the item it is in
    for index, item in enumerate(items):
        stack = [item]
        while stack:
            node = stack.pop()
            if isinstance(node, dict):
                owner[id(node)] = index
                stack.extend(node.values())
                stack.extend(twice.hidden.get(id(node), ()))
            elif isinstance(node, list):
                stack.extend(node)
    for built, keys in twice.found:
        held = found[owner[id(built)]]
        held += [key for key in keys if key not in held]
    return found
