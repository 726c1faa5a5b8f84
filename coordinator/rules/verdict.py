"""The group's status (seeds 001/002) from its agents' outcomes: pure functions over its state.

Each piece of work counts once: its last attempt's outcome, unless that attempt failed and an earlier one
(declared lost: slow, not gone) completed it since. Work asked for as ``independence: optional`` is not
critical (seed 001: "Proceed with available results if non-critical, documenting the gap"): when it fails,
it is a gap the status names, not a failure that escalates the group.
"""

from __future__ import annotations

from bus.events import AgentState
from bus.results import ResultStatus
from bus.signals import Independence
from coordinator.state import AgentRecord, GroupState, GroupVerdict, ViolationRule

__all__ = ["deciding", "gaps", "optional", "unresolved_count", "verdict"]


def verdict(state: GroupState) -> GroupVerdict:
    """The group status from the outcomes of its agents' work: per piece of work, its last attempt's,
    unless that one failed and an earlier attempt (slow, not gone) has completed it since. Work that
    would go on is reviewed first while agents disagree on the severity of a merged finding, or an agent
    left a blocker unresolved."""
    deciding = _deciding_attempts(state)
    if any(record is None for record in deciding):
        return GroupVerdict.ESCALATE
    outcomes = [r.completion.status if r.completion else ResultStatus.SUCCESS for r in deciding if r]
    if ResultStatus.PARTIAL in outcomes or state.severity_conflicts > 0 or any(map(_left_blocked, deciding)):
        return GroupVerdict.REVIEW
    return GroupVerdict.CONTINUE


def unresolved_count(state: GroupState) -> int:
    """The agents whose outcome is their work's and who left a blocker unresolved."""
    return sum(map(_left_blocked, _deciding_attempts(state)))


def _left_blocked(record: AgentRecord | None) -> bool:
    rule = ViolationRule.UNRESOLVED_BLOCKER
    return record is not None and any(v.rule is rule for v in record.violations)


def deciding(state: GroupState) -> frozenset[str]:
    """The agents whose outcome is their work's (see :func:`verdict`): a blocker one of them left
    unresolved is for review; one an attempt left that a later or earlier one made good is not."""
    return frozenset(r.agent_id for r in _deciding_attempts(state) if r is not None)


def _deciding_attempts(state: GroupState) -> list[AgentRecord | None]:
    """Per piece of work, :func:`_deciding`; optional work that failed is a gap, not an outcome."""
    attempts: list[AgentRecord | None] = []
    for last in state.agents.values():
        if last.retried_by is None:
            attempt = _deciding(state, last)
            if attempt is not None or not optional(state, last):
                attempts.append(attempt)
    return attempts


def gaps(state: GroupState) -> list[str]:
    """The optional work that failed (the agents' ids, sorted: a state read back from a large Redis hash
    comes in the hash's own order): the gaps a settled group goes on with."""
    return sorted(
        a.agent_id
        for a in state.agents.values()
        if a.retried_by is None and _deciding(state, a) is None and optional(state, a)
    )


def _deciding(state: GroupState, last: AgentRecord) -> AgentRecord | None:
    """The attempt whose outcome is the outcome of the work ``last`` is the latest attempt at: ``last``,
    or an earlier attempt that completed it after ``last`` failed; None when the work failed."""
    if last.state not in {AgentState.FAILED, AgentState.LOST}:
        return last
    return state.completed_earlier(last)


def optional(state: GroupState, record: AgentRecord) -> bool:
    """Whether ``record``'s work is what its requester asked for as ``independence: optional``."""
    first = state.first_attempt(record)
    delegation = state.delegations.get(first.request_id) if first.request_id is not None else None
    return delegation is not None and delegation.request.independence is Independence.OPTIONAL
