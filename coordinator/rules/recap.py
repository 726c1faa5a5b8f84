"""Recaps: a dated question or stop that an agent prints again once it was answered or resolved.

Agents resumed with an answer often quote what they asked (``I had asked: [CLARIFICATION_NEEDED] ...``),
and the parser reads a quoted block as a signal. Applied again, it would open questions the agent no
longer waits on: the group would end in ``review`` with questions left unanswered. The same signal is
known by its fields, timestamp included (as a delegation request is known by its id): an agent's record
keeps the fingerprints of the latest :data:`SETTLED_KEPT` it was answered or resolved on, and the same
block again is rejected as a recap. An undated one is applied again: without its time, the same
question asked anew looks the same.
"""

from __future__ import annotations

from typing import Final

from bus.signals import ClarificationNeeded, StopWork, recap_key
from coordinator.rules.step import Rejected
from coordinator.state import AgentRecord

__all__ = ["SETTLED_KEPT", "refuse_recap", "settled"]

SETTLED_KEPT: Final = 8


def settled(record: AgentRecord, *signals: ClarificationNeeded | StopWork) -> tuple[str, ...]:
    """The record's ``settled`` once ``signals`` are answered or resolved."""
    keys = [key for signal in signals if (key := recap_key(signal)) is not None]
    return (*record.settled, *keys)[-SETTLED_KEPT:] if keys else record.settled


def refuse_recap(record: AgentRecord, signal: ClarificationNeeded | StopWork) -> None:
    """Reject ``signal`` if the agent was answered or resolved on the same one before."""
    key = recap_key(signal)
    if key is not None and key in record.settled:
        what = "questions were answered" if isinstance(signal, ClarificationNeeded) else "stop was resolved"
        raise Rejected(f"the same {what} before (dated {signal.timestamp}): a recap, not applied again")
