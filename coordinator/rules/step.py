"""The work of applying one envelope: the state as the rules change it, and what they emit.

A :class:`Step` lives only inside one call of :func:`~coordinator.rules.apply.apply`; the rules change it
freely, and the call turns it into an :class:`~coordinator.rules.outcome.Outcome`. The input state is
never mutated: every change replaces a model with an updated copy.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, TypeVar

from bus.envelope import Envelope, Payload, new_envelope
from bus.errors import BusError
from bus.events import AgentState, Decision, DecisionType
from coordinator.policy import Policy
from coordinator.rules.ids import emitted_id
from coordinator.rules.outcome import Emit, Outcome, Target
from coordinator.state import AgentRecord, GroupState

__all__ = ["MAX_DETAIL", "SOURCE", "Rejected", "Step"]

SOURCE: Final = "coordinator"
"""The ``source`` of every envelope the rules emit."""
MAX_DETAIL: Final = 2000
"""Decision details are summaries for people; longer text (an agent's whole signal) is cut here."""

P = TypeVar("P")


class Rejected(BusError):
    """Raised by a rule when the entry cannot be applied; :func:`apply` turns it into a rejected outcome."""


class Step:
    """The state being built for one envelope and the envelopes emitted so far."""

    def __init__(self, state: GroupState, envelope: Envelope, policy: Policy) -> None:
        self.initial: Final = state
        self.state = state
        self.envelope: Final = envelope
        self.policy: Final = policy
        self.emits: list[Emit] = []

    @property
    def ts(self) -> datetime:
        """The timestamp of every envelope emitted in this step: the input's own."""
        return self.envelope.ts

    def payload(self, model: type[P]) -> P:
        """The input's payload, which the dispatch guarantees to be a ``model``."""
        payload = self.envelope.payload
        if not isinstance(payload, model):
            raise Rejected(f"payload of {self.envelope.type.value} is not a {model.__name__}")
        return payload

    # -- agents -------------------------------------------------------------------------------------

    def find(self, agent_id: str) -> AgentRecord | None:
        return self.state.agents.get(agent_id)

    def agent(self, agent_id: str) -> AgentRecord:
        """A known agent; an unknown one rejects the entry."""
        record = self.state.agents.get(agent_id)
        if record is None:
            raise Rejected(f"unknown agent {agent_id!r} in group {self.state.group_id!r}")
        return record

    def put(self, record: AgentRecord) -> AgentRecord:
        self.state = self.state.model_copy(update={"agents": {**self.state.agents, record.agent_id: record}})
        return record

    def update(self, agent_id: str, **changes: Any) -> AgentRecord:
        """Replace fields of a known agent's record."""
        return self.put(self.agent(agent_id).model_copy(update=changes))

    def replace(self, **changes: Any) -> None:
        """Replace fields of the group state."""
        self.state = self.state.model_copy(update=changes)

    # -- emitting -----------------------------------------------------------------------------------

    def emit(self, target: Target, payload: Payload, agent_id: str) -> Envelope:
        envelope = new_envelope(
            payload,
            agent_id=agent_id,
            group_id=self.state.group_id,
            source=SOURCE,
            id=emitted_id(self.envelope.id, len(self.emits)),
            ts=self.ts,
        )
        self.emits.append(Emit(target=target, envelope=envelope))
        return envelope

    def direct(self, agent_id: str, payload: Payload) -> Envelope:
        """A directive into one agent's inbox."""
        return self.emit(Target.INBOX, payload, agent_id)

    def decide(
        self,
        decision: DecisionType,
        agent_id: str,
        detail: str = "",
        *,
        request_id: str | None = None,
        state: AgentState | None = None,
    ) -> None:
        """A decision event; ``state`` defaults to the agent's state after the change."""
        if state is None:
            record = self.find(agent_id)
            state = record.state if record is not None else None
        if len(detail) > MAX_DETAIL:
            detail = detail[: MAX_DETAIL - 1] + "…"
        payload = Decision(
            decision=decision, detail=detail, cause=self.envelope.id, request_id=request_id, state=state
        )
        self.emit(Target.EVENTS, payload, agent_id)

    def transition(
        self,
        agent_id: str,
        state: AgentState,
        decision: DecisionType,
        detail: str,
        *,
        request: str | None = None,
        **changes: Any,
    ) -> None:
        """Move an agent to ``state`` (with other record changes) and record the decision.

        ``request`` is the delegation request the decision is about, if any.
        """
        self.update(agent_id, state=state, **changes)
        self.decide(decision, agent_id, detail, request_id=request, state=state)

    def resume(
        self,
        agent_id: str,
        decision: DecisionType,
        detail: str,
        *,
        request: str | None = None,
        **changes: Any,
    ) -> None:
        """Back to running after a directive; timeouts count again from now (the input's timestamp)."""
        self.transition(
            agent_id, AgentState.RUNNING, decision, detail, request=request, resumed_at=self.ts, **changes
        )

    def finish(self, rejected: str | None = None) -> Outcome:
        """The outcome of the step.

        The id is remembered whether the entry was applied or rejected; an applied entry also counts for
        the group and for the agent it names (for the status view).
        """
        changes: dict[str, Any] = {
            "window": self.state.window.add(self.envelope.id, self.policy.idempotency_window)
        }
        if rejected is None:
            changes["applied"] = self.state.applied + 1
            record = self.find(self.envelope.agent_id)
            if record is not None:
                counted = record.model_copy(
                    update={"applied": record.applied + 1, "last_applied_id": self.envelope.id}
                )
                changes["agents"] = {**self.state.agents, record.agent_id: counted}
        return Outcome(state=self.state.model_copy(update=changes), emits=self.emits, rejected=rejected)
