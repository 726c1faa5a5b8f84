"""What holds an agent that a directive answers: an open blocker, open questions, delegates it waits for
(or a blocking request of its own that waits for a human). One directive answers one of them, and the
agent is resumed only once none is left."""

from __future__ import annotations

from typing import Any, Final

from bus.events import AgentState
from bus.signals import Independence
from coordinator.rules.trusted import evolve
from coordinator.state import AgentRecord, DelegationStatus, GroupState

__all__ = ["held", "still_held", "waits_for_delegation"]


def held(record: AgentRecord, state: GroupState) -> AgentState | None:
    """The state of what still holds an agent, if anything: an open blocker, open questions, delegates it
    waits for or a blocking request of its own that waits for a human."""
    if record.blocker is not None:
        return AgentState.BLOCKED
    if record.questions is not None:
        return AgentState.AWAITING_CLARIFICATION
    if waits_for_delegation(record, state):
        return AgentState.DELEGATING
    return None


_WAIT_FOR: Final = {
    AgentState.BLOCKED: "your blocker is resolved",
    AgentState.AWAITING_CLARIFICATION: "your questions are answered",
    AgentState.DELEGATING: "the work you wait for is done",
}


def still_held(record: AgentRecord, state: GroupState, then: str, **settled: Any) -> str | None:
    """The instructions of a directive that settles one thing the agent waits on (``settled``: the record
    changes that settle it) while another still holds it: to wait, and ``then`` once resumed; None when
    nothing else holds it (``then`` alone goes)."""
    holder = held(evolve(record, **settled), state)
    if holder is None:
        return None
    return f"Do not go on yet: you will be resumed once {_WAIT_FOR[holder]}. Then: {then}"


def waits_for_delegation(record: AgentRecord, state: GroupState) -> bool:
    """Whether the agent waits for a delegate, or for a human to decide a blocking request of its own."""
    return bool(record.waiting_on) or any(
        d.requester_id == record.agent_id
        and d.status is DelegationStatus.PENDING_HUMAN
        and d.request.independence is Independence.BLOCKS_CURRENT_WORK
        for d in state.delegations.values()
    )
