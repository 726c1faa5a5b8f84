"""Findings written as JSON by hand or by a script: one object, an array of objects, or JSON lines of
:class:`~bus.findings.Finding` fields, validated with messages that say where each error is."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError

from agents.parser import describe_errors
from bus.findings import Finding

__all__ = ["finding_of", "located_findings", "parse_findings"]


def finding_of(value: Any, agent: str) -> Finding:
    """A finding from one decoded JSON value; ``ValueError`` with a readable reason otherwise."""
    if not isinstance(value, dict):
        raise ValueError(f"not a JSON object but {type(value).__name__}")
    if "group_id" in value:  # what `findings --json` writes with each finding: the command's group decides
        value = {name: item for name, item in value.items() if name != "group_id"}
    if not value.get("agent"):
        value = {**value, "agent": agent}
    try:
        return Finding.model_validate(value)
    except ValidationError as exc:
        raise ValueError(describe_errors(exc)) from None


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
        return _validated([(f"finding {i + 1}", value) for i, value in enumerate(values)], agent)
    found: list[tuple[str, Finding]] = []
    errors: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            found.append((f"line {number}", finding_of(orjson.loads(line), agent)))
        except orjson.JSONDecodeError as exc:
            errors.append(f"line {number}: not JSON ({exc})")
        except ValueError as exc:
            errors.append(f"line {number}: {exc}")
    return found, errors


def _validated(pairs: list[tuple[str, Any]], agent: str) -> tuple[list[tuple[str, Finding]], list[str]]:
    found: list[tuple[str, Finding]] = []
    errors: list[str] = []
    for where, value in pairs:
        try:
            found.append((where, finding_of(value, agent)))
        except ValueError as exc:
            errors.append(f"{where}: {exc}")
    return found, errors
