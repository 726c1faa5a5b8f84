"""What applying one envelope produces: the new state and the envelopes to publish."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from datetime import datetime
from enum import StrEnum
from typing import NamedTuple

from bus.envelope import Envelope, EnvelopeType, Payload, encode_new, new_envelope, type_of
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


class Emit:
    """One envelope to publish, and where: :attr:`data`, its encoding, is made straight from its parts
    (:func:`~bus.envelope.encode_new`), and the :attr:`envelope` model only when something reads it. The
    coordinator publishes a copy of every finding and reads none of them back, so building each copy's
    model as well would cost it a third of that copy."""

    __slots__ = ("_envelope", "_parts", "agent_id", "data", "target")

    def __init__(
        self,
        target: Target,
        payload: Payload,
        agent_id: str,
        group_id: str,
        source: str,
        id: str,
        ts: datetime,
    ) -> None:
        self.target = target
        self.agent_id = agent_id
        self.data = encode_new(payload, agent_id, group_id, source, id, ts)
        self._parts = (payload, group_id, source, id, ts)
        self._envelope: Envelope | None = None

    @property
    def type(self) -> EnvelopeType:
        return type_of(self._parts[0])

    @property
    def envelope_id(self) -> str:
        """The id of the envelope :attr:`data` encodes."""
        return self._parts[3]

    @property
    def envelope(self) -> Envelope:
        """The envelope :attr:`data` encodes."""
        if self._envelope is None:
            payload, group_id, source, id, ts = self._parts
            self._envelope = new_envelope(
                payload, agent_id=self.agent_id, group_id=group_id, source=source, id=id, ts=ts
            )
        return self._envelope

    def __repr__(self) -> str:
        return f"Emit({self.target.value}, {self.data!r})"


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
    superseded: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """``(agent id, envelope ids)`` of directives in an agent's inbox that the rules now carry
    themselves, in the prompt of a session they start: acknowledged there unread, in the same
    transaction, so that no reader of the inbox delivers them a second time."""
