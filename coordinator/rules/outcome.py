"""What applying one envelope produces: the new state and the envelopes to publish."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from enum import StrEnum
from typing import NamedTuple

from bus.envelope import Envelope
from coordinator.state import GroupState

__all__ = ["Emit", "Outcome", "Target"]


class Target(StrEnum):
    """The stream of the group's shard an emitted envelope goes to."""

    EVENTS = "events"
    """Decisions, for any subscriber."""
    INBOX = "inbox"
    """Directives for one agent: the inbox of ``envelope.agent_id``."""
    TASKS = "tasks"
    """Launch requests (approved delegations, retries) for launchers."""
    FINDINGS = "findings"
    """The append-only findings stream."""


class Emit(NamedTuple):
    """One envelope to publish, and where."""

    target: Target
    envelope: Envelope


class Outcome(NamedTuple):
    """The result of :func:`coordinator.rules.apply`.

    ``state`` is the group's new state; ``emits`` the envelopes to publish, in order, in the same
    transaction that stores ``state`` and acknowledges the entry. ``rejected`` is the reason an entry could
    not be applied (an answer for an agent without open questions, an unknown request id, ...): then
    ``emits`` holds only a ``rejected`` decision and ``state`` differs from the input only in remembering
    the entry's id, so a redelivery is dropped like any duplicate.

    ``agents_touched`` and ``findings_touched`` name the records of ``state.agents`` / ``state.findings``
    the step (or, applied in a :class:`~coordinator.rules.run.Run`, the run so far) may have replaced;
    the others are the input's own objects. They let the store write what changed without comparing
    whole maps.
    """

    state: GroupState
    emits: list[Emit]
    rejected: str | None = None
    agents_touched: AbstractSet[str] = frozenset()
    findings_touched: AbstractSet[str] = frozenset()
    duplicate: bool = False
    """The entry's envelope id was applied before (it is in the window): nothing changed."""
