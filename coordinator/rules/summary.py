"""The status view of a group: a plain summary of its state for ``status`` and other readers."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from bus.events import AgentState
from bus.fields import Model
from bus.results import ResultStatus
from bus.signals import Independence, Priority, QuestionType, StopWork
from coordinator.rules.verdict import deciding
from coordinator.state import (
    FINAL_STATES,
    AgentRecord,
    Delegation,
    DelegationStatus,
    Escalation,
    GroupProgress,
    GroupState,
    GroupVerdict,
)

__all__ = [
    "AgentSummary",
    "GroupSummary",
    "OpenBlocker",
    "OpenQuestion",
    "PendingDelegation",
    "ResumePath",
    "summarize",
]


class ResumePath(StrEnum):
    """How a directive for the agent (an answer, a resolution, a decision) reaches it."""

    INBOX = "inbox"
    """Through its inbox, which its adapter (or ``listen``) reads: nothing said otherwise."""
    RELAUNCH = "relaunch"
    """Its adapter ended with it; a launcher started it, so a launcher starts it again with the directive."""
    UNREAD = "unread"
    """Its adapter ended with it and the bus did not launch it: the directive waits in its inbox until an
    adapter or ``listen`` runs for it."""


class AgentSummary(Model):
    agent_id: str
    name: str | None
    state: AgentState
    parent_agent_id: str | None
    depth: int
    attempt: int
    status: ResultStatus | None
    """The result status once the agent finished."""
    percent: float | None
    progress_message: str | None
    last_seen: datetime
    applied: int
    last_applied_id: str | None
    violations: tuple[str, ...]
    waiting_on: tuple[str, ...]
    retried_by: str | None
    counted: bool
    """Whether its outcome is its work's, the one the group's status counts (not an attempt another one
    replaced or made good)."""
    resume: ResumePath
    """How a directive for the agent reaches it."""
    watched: bool
    """False while it has sent nothing but findings (a script): the group does not wait for it."""


class OpenQuestion(Model):
    """A question of an agent's ``[CLARIFICATION_NEEDED]``, with what the human needs to answer it."""

    agent_id: str
    question_id: str
    text: str
    answered: bool
    blocked_at: str
    resume: ResumePath
    """How the answer reaches the agent."""
    context: str | None = None
    """Why the question matters (the question's own ``context``)."""
    reason: str | None = None
    """Why the agent asks (the clarification's ``reason``, shared by its questions)."""
    can_resume_with: str | None = None
    """What would unblock the agent (the clarification's ``can_resume_with``)."""
    type: QuestionType | None = None
    """``optional``: the agent is resumed without its answer once the others have one."""
    options: tuple[str, ...] = ()
    """The answers the agent offers to choose from."""
    current_assumption: str | None = None
    """What the agent assumes meanwhile."""


class OpenBlocker(Model):
    """An agent's open ``[STOP_WORK]``."""

    agent_id: str
    stop_reason: str
    blocker_type: str
    details: str
    resume_requirements: str | None
    """What the agent needs to continue (seed 000's resource limit lists options to choose from)."""
    resume: ResumePath
    """How the resolution reaches the agent."""
    error_recovery: str | None = None
    """The fixes an agent stopped by an error proposes."""
    earlier: tuple[str, ...] = ()
    """The agent's earlier blockers still open with this one (``kind: details`` each), which its
    resolution settles too."""


class PendingDelegation(Model):
    """A ``[DELEGATE_WORK]`` request held for a human's approve or deny, with what the seed's delegation
    checklist weighs: why delegate, what context the new agent needs, how the two coordinate, how long."""

    request_id: str
    requester_id: str
    priority: Priority
    independence: Independence
    task: str
    resume: ResumePath
    """How the decision reaches the requester."""
    delegation_reason: str | None = None
    """Why the requester delegates rather than goes on itself."""
    context_required: str | None = None
    coordination: str | None = None
    estimated_duration: str | None = None


class GroupSummary(Model):
    group_id: str
    status: GroupVerdict | None
    progress: GroupProgress
    applied: int
    agents: tuple[AgentSummary, ...]
    open_questions: tuple[OpenQuestion, ...]
    blockers: tuple[OpenBlocker, ...]
    pending_delegations: tuple[PendingDelegation, ...]
    escalations: tuple[Escalation, ...]
    findings: int
    """Distinct (merged) findings."""
    severity_conflicts: int = 0
    """Merged findings whose agents disagree on severity: each waits for a human's review."""


def summarize(state: GroupState, *, findings: int | None = None) -> GroupSummary:
    """Everything a status view shows about one group, in registration order.

    ``findings`` is the number of merged findings when ``state`` was loaded without them.
    """
    # Sorted, not the map's order: a state read back from a large Redis hash comes in the hash's own order.
    records = sorted(state.agents.values(), key=lambda r: (r.registered_at, r.agent_id))
    pending = sorted(
        (d for d in state.delegations.values() if d.status is DelegationStatus.PENDING_HUMAN),
        key=lambda d: (d.requested_at, d.request_id),
    )
    counted = deciding(state)
    return GroupSummary(
        group_id=state.group_id,
        status=state.status,
        progress=state.progress,
        applied=state.applied,
        agents=tuple(_agent(r, r.agent_id in counted) for r in records),
        open_questions=tuple(q for r in records for q in _questions(r)),
        blockers=tuple(_blocker(r, r.blocker) for r in records if r.blocker is not None),
        pending_delegations=tuple(
            _delegation(d, state.agents.get(d.requester_id))
            for d in sorted(pending, key=lambda d: (d.requested_at, d.request_id))
        ),
        escalations=state.escalations,
        findings=len(state.findings) if findings is None else findings,
        severity_conflicts=state.severity_conflicts,
    )


def _delegation(delegation: Delegation, requester: AgentRecord | None) -> PendingDelegation:
    request = delegation.request
    return PendingDelegation(
        request_id=delegation.request_id,
        requester_id=delegation.requester_id,
        priority=request.priority,
        independence=request.independence,
        task=request.new_task_description,
        resume=_resume_path(requester),
        delegation_reason=request.delegation_reason,
        context_required=request.context_required,
        coordination=request.coordination,
        estimated_duration=request.estimated_duration,
    )


def _agent(record: AgentRecord, counted: bool) -> AgentSummary:
    return AgentSummary(
        counted=counted,
        agent_id=record.agent_id,
        name=record.name,
        state=record.state,
        watched=record.watched,
        parent_agent_id=record.parent_agent_id,
        depth=record.depth,
        attempt=record.attempt,
        status=record.completion.status if record.completion is not None else None,
        percent=record.progress.percent if record.progress is not None else None,
        progress_message=record.progress.message if record.progress is not None else None,
        last_seen=record.last_seen,
        applied=record.applied,
        last_applied_id=record.last_applied_id,
        violations=tuple(f"{v.rule.value}: {v.detail}" for v in record.violations),
        waiting_on=record.waiting_on,
        retried_by=record.retried_by,
        resume=_resume_path(record),
    )


def _resume_path(record: AgentRecord | None) -> ResumePath:
    if record is None or not record.unreachable or record.state in FINAL_STATES:
        return ResumePath.INBOX
    return ResumePath.UNREAD if record.request_id is None else ResumePath.RELAUNCH


def _questions(record: AgentRecord) -> list[OpenQuestion]:
    asked = record.questions
    if asked is None:
        return []
    answered = {a.question_id for a in record.answers}
    return [
        OpenQuestion(
            agent_id=record.agent_id,
            question_id=q.question_id,
            text=q.text,
            answered=q.question_id in answered,
            blocked_at=asked.blocked_at,
            resume=_resume_path(record),
            context=q.context,
            reason=asked.reason,
            can_resume_with=asked.can_resume_with,
            type=q.type,
            options=tuple(q.options or ()),
            current_assumption=q.current_assumption,
        )
        for q in asked.questions
    ]


def _blocker(record: AgentRecord, stop: StopWork) -> OpenBlocker:
    return OpenBlocker(
        agent_id=record.agent_id,
        resume=_resume_path(record),
        stop_reason=stop.stop_reason.value,
        blocker_type=stop.kind,
        details=stop.details,
        earlier=tuple(f"{s.kind}: {s.details.strip()}" for s in record.earlier_blockers),
        resume_requirements=stop.resume_requirements,
        error_recovery=stop.error_recovery,
    )
