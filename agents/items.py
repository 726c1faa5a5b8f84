"""What parsing agent output yields: a signal, a result report, or an error, each located in the output."""

from __future__ import annotations

from typing import Final

from agents.blocks import SignalPayload
from bus.envelope import EnvelopeType
from bus.fields import Model, trusted_instance
from bus.results import ResultReport

__all__ = ["ErrorItem", "Item", "ResultItem", "SignalItem", "signal_item"]


class SignalItem(Model):
    """A valid signal block; ``line``/``offset`` locate its opening tag."""

    type: EnvelopeType
    payload: SignalPayload
    line: int
    offset: int


class ResultItem(Model):
    """A valid result report; ``line``/``offset`` locate its ``## ... Result`` heading."""

    report: ResultReport
    line: int
    offset: int


class ErrorItem(Model):
    """A malformed block or report (or transcript line); ``type`` names the block when known."""

    line: int
    offset: int
    message: str
    type: EnvelopeType | None = None


Item = SignalItem | ResultItem | ErrorItem

_SIGNAL_FIELDS: Final = frozenset(SignalItem.model_fields)


def signal_item(kind: EnvelopeType, payload: SignalPayload, line: int, offset: int) -> SignalItem:
    """``SignalItem(type=kind, payload=payload, line=line, offset=offset)`` without validating again
    values that are valid: the payload was just validated by its model, the rest is the parser's own."""
    data = {"type": kind, "payload": payload, "line": line, "offset": offset}
    return trusted_instance(SignalItem, data, set(_SIGNAL_FIELDS))
