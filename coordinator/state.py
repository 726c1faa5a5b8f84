"""What the coordinator remembers about one task group, between two applied stream entries.

A :class:`GroupState` is immutable; the rules return a new one (sharing the unchanged parts) for every
entry they apply. It is stored as one JSON value per group (:meth:`GroupState.to_json`), so everything
in it is a plain pydantic model, enum, string, number, list or string-keyed dict.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Final

import orjson
from pydantic import Field, ValidationError

from bus.directives import AnswerItem
from bus.envelope import EnvelopeType
from bus.errors import DecodeError
from bus.events import AgentState
from bus.fields import Model
from bus.findings import Finding
from bus.results import ResultStatus
from bus.signals import ClarificationNeeded, DelegateWork, StopWork
from coordinator.window import IdWindow

__all__ = [
    "ACTIVE_STATES",
    "EARLIER_BLOCKERS_KEPT",
    "FINAL_STATES",
    "AgentProgress",
    "AgentRecord",
    "Completion",
    "Delegation",
    "DelegationStatus",
    "Escalation",
    "FindingSlot",
    "GroupProgress",
    "GroupState",
    "GroupVerdict",
    "IdWindow",
    "Relaunch",
    "Violation",
    "ViolationRule",
]

FINAL_STATES: Final = frozenset({AgentState.COMPLETED, AgentState.FAILED, AgentState.LOST})
"""States an agent leaves only by being heard from again (lost) or never (completed, failed)."""
ACTIVE_STATES: Final = frozenset(AgentState) - FINAL_STATES
"""States that hold a parallel slot and keep the group from being settled."""
EARLIER_BLOCKERS_KEPT: Final = 8
"""How many of an agent's earlier blockers stay open beside its latest (``AgentRecord.earlier_blockers``)."""


class ViolationRule(StrEnum):
    """The result-contract rules (seed 001) the coordinator checks, and a blocker an agent's outcome
    left unresolved."""

    SUMMARY_TOO_LONG = "summary_too_long"
    MISSING_CONFIDENCE = "missing_confidence"
    MISSING_BREAKDOWN = "missing_confidence_breakdown"
    MISSING_JUSTIFICATION = "missing_confidence_justification"
    INCONSISTENT_BREAKDOWN = "inconsistent_confidence_breakdown"
    MISSING_UNCERTAINTY = "missing_uncertainty_section"
    UNVERIFIED_REFERENCE = "unverified_reference"
    REPORTED = "reported_by_parser"
    UNRESOLVED_BLOCKER = "unresolved_blocker"
    FINDING_TOO_LARGE = "finding_too_large"


class Violation(Model):
    rule: ViolationRule
    detail: str
    envelope_id: str


class Completion(Model):
    """How an agent ended, from its first completion (report, result, stop, exit or loss)."""

    status: ResultStatus
    summary: str
    deliverables: str | None = None
    results: str | None = None
    """A result report's findings, issues, next steps and blockers, as text."""
    metrics: str | None = None
    confidence: float | None = None
    source: EnvelopeType
    envelope_id: str


class AgentProgress(Model):
    percent: float
    message: str | None = None
    eta: str | None = None


class Relaunch(Model):
    """A resume launch request the rules wrote for an agent, kept until the group's next tick: one caused
    by an entry that waited for a coordinator longer than a request lives was written expired, and that
    tick writes it again (see :mod:`coordinator.rules.timeouts`)."""

    context: str
    """The request's context: the agent's launch context and the directives it carries."""
    applied: int
    """The agent's :attr:`AgentRecord.applied` with the entry that caused the request: a higher one, and
    something of (or for) its new session came."""


class AgentRecord(Model):
    """One agent of the group as the coordinator tracks it."""

    agent_id: str
    name: str | None = None
    """The agent's kind (``security-auditor``), from its start event or result heading."""
    state: AgentState = AgentState.RUNNING
    parent_agent_id: str | None = None
    depth: int = 0
    task: str | None = None
    registered_at: datetime
    last_seen: datetime
    """When the agent (or its adapter) was last heard from: the latest of its envelopes' times
    (:attr:`~coordinator.rules.step.Step.at`), brought back to a tick's ``now`` when later than it."""
    resumed_at: datetime | None = None
    """When the coordinator last sent it a resume directive; timeouts count from the later of the two."""
    applied: int = 0
    """Entries applied that name this agent: its own, and the human commands addressed to it."""
    last_applied_id: str | None = None
    questions: ClarificationNeeded | None = None
    answers: tuple[AnswerItem, ...] = ()
    """Answers given so far to the open questions (a human may answer them one at a time)."""
    next_step: str | None = None
    """The next step a human gave with an answer that left questions open, for the response (the last one
    given, unless the answer that completes them gives its own)."""
    settled: tuple[str, ...] = ()
    """Fingerprints of the latest dated questions and stops it was answered or resolved on (see
    :mod:`coordinator.rules.recap`)."""
    blocker: StopWork | None = None
    earlier_blockers: tuple[StopWork, ...] = ()
    """Blockers the agent stopped on before ``blocker`` that nothing resolved (the latest
    :data:`EARLIER_BLOCKERS_KEPT`): a second STOP_WORK, two printed in one turn or an adapter's for two
    signals it could not read, does not hide the first. Shown, resolved and left unresolved with it."""
    completion: Completion | None = None
    extra_reports: int = 0
    """Completion reports received after the first (kept out of aggregation, see the completion rules)."""
    violations: tuple[Violation, ...] = ()
    progress: AgentProgress | None = None
    attempt: int = 1
    retry_of: str | None = None
    retried_by: str | None = None
    request_id: str | None = None
    """The delegation request (or retry or recovery request) that launched this agent."""
    blocks_parent: bool = False
    """The parent waits (``blocks_current_work``) and is resumed when this agent's outcome is final."""
    waiting_on: tuple[str, ...] = ()
    """Delegates this agent waits for."""
    exited: bool = False
    exit_code: int | None = None
    unreachable: bool = False
    """Its adapter said at the agent's exit that it stops reading the inbox (AGENT_EXITED ``resumable:
    false``), until an adapter starts it again: a directive for it then relaunches it, when a launcher
    started it (see :func:`coordinator.rules.launch.deliver`)."""
    context: str | None = None
    """The context of the launch request that started it, for the requests that start it again."""
    held: tuple[str, ...] = ()
    """Directives (rendered) kept for its next relaunch: ones that ask it to wait for more, and those a
    session that ended waiting again was sent (``sent``)."""
    sent: tuple[str, ...] = ()
    """Directives (rendered) put in its inbox since its adapter started, when a launcher started it (the
    latest :data:`~coordinator.rules.launch.SENT_KEPT`): its next session is given them if the adapter
    ends with it before they are known to be read."""
    sent_ids: tuple[str, ...] = ()
    """The envelope ids of the latest of ``sent`` (all of them, for a record written since this field
    was): when the adapter ends with the agent, the rules carry those directives from then on, and have
    them acknowledged in the inbox unread (:attr:`~coordinator.rules.Outcome.superseded`)."""
    relaunch: Relaunch | None = None
    """Its last resume launch request, when an entry caused it since the group's last tick."""
    escalated: bool = False
    watched: bool = True
    """Whether it is an agent the group waits for: not while it has sent nothing but findings (a
    script's `findings add` or `import-findings` is no process to watch, would be declared lost and
    retried, and never completes). Timeouts, progress, parallel slots and settling leave it out."""

    @property
    def timeout_reference(self) -> datetime:
        """The instant timeouts count from: the agent's last sign of life or its last resume."""
        if self.resumed_at is not None and self.resumed_at > self.last_seen:
            return self.resumed_at
        return self.last_seen

    def blocker_details(self, stop: StopWork) -> str:
        """``stop``'s details (the open blocker's), followed by those of the earlier blockers still open."""
        if not self.earlier_blockers:
            return stop.details
        earlier = "\n".join(f"- {s.kind}: {s.details.strip()}" for s in self.earlier_blockers)
        return f"{stop.details.rstrip()}\n\nStill open from earlier STOP_WORK signals:\n{earlier}"


class DelegationStatus(StrEnum):
    PENDING_HUMAN = "pending_human"
    APPROVED = "approved"
    DENIED = "denied"


class Delegation(Model):
    """One DELEGATE_WORK request and what became of it."""

    request_id: str
    requester_id: str
    request: DelegateWork
    status: DelegationStatus
    requested_at: datetime
    envelope_id: str
    new_agent_id: str | None = None
    reason: str | None = None
    instructions: str | None = None
    """A human's resume instructions on approving it: for a blocking request, what its requester is
    resumed with once the delegate succeeded."""


class Escalation(Model):
    """A problem handed to a human: an agent that failed after its retries."""

    agent_id: str
    reason: str
    envelope_id: str
    at: datetime


class FindingSlot(Model):
    """All reports of one deduplicated finding: per reporting agent, its highest-confidence report."""

    location: str
    category: str
    discriminator: str = ""
    """Empty when the finding has a ``file:line``; otherwise its id or title (see ``rules.findings``)."""
    reports: dict[str, Finding] = Field(min_length=1)  # a slot is made with its first report
    conflict_reported: bool = False


class GroupVerdict(StrEnum):
    """Status aggregation of a settled group (seed 001)."""

    CONTINUE = "continue"
    """Every agent succeeded and no merged finding is in conflict: go on to the next phase."""
    REVIEW = "review"
    """Some agent delivered a partial result, left a blocker unresolved, or agents disagree on a finding's
    severity (seed 001: conflicting findings are flagged for human review): a human reviews the findings
    and decides."""
    ESCALATE = "escalate"
    """Some agent failed after its retries: a human takes over."""


class GroupProgress(Model):
    """Agents of the group by outcome; agents replaced by a retry are not counted."""

    total: int
    completed: int
    failed: int
    active: int

    def render(self) -> str:
        return f"{self.completed}/{self.total} completed, {self.failed} failed, {self.active} active"


class GroupState(Model):
    """Everything the rules know about one task group."""

    group_id: str
    agents: dict[str, AgentRecord] = Field(default_factory=dict)
    delegations: dict[str, Delegation] = Field(default_factory=dict)
    findings: dict[str, FindingSlot] = Field(default_factory=dict)
    escalations: tuple[Escalation, ...] = ()
    status: GroupVerdict | None = None
    """The last status reported when the group settled (all agents finished, no delegation pending)."""
    severity_conflicts: int = 0
    """Merged findings whose agents disagree on severity now (slots whose ``conflict_reported`` is set),
    counted as :func:`~coordinator.rules.findings.record_finding` sets and clears the flag: stored with
    the group's other fields, so that the verdict and the views that load a group without its findings
    (``status``, ``inbox``) know it."""
    applied: int = 0
    last_applied_at: datetime | None = None
    """The latest time of the entries applied to the group (not rejected), ticks excepted: how long it
    has been quiet, for retirement."""
    ticked_at: datetime | None = None
    """The ``now`` of the last tick applied to the group: the coordinators' clock, which every time the
    rules compare is brought to (see :mod:`coordinator.rules.timeouts`)."""
    window: IdWindow = Field(default_factory=IdWindow)
    retired_at: datetime | None = None
    """Set by the tick that retires the group: the commit of its batch deletes the stored state instead
    of writing it, and the coordinator forgets the group (see :mod:`coordinator.rules.retirement`)."""

    @property
    def progress(self) -> GroupProgress:
        """Per piece of work, its last attempt's state, but completed when an earlier attempt (slow, not
        gone) completed it after the last failed."""
        counted = [a for a in self.agents.values() if a.retried_by is None and a.watched]
        done = {a.agent_id for a in counted if a.state is AgentState.COMPLETED or self.completed_earlier(a)}
        failing = {AgentState.FAILED, AgentState.LOST}
        return GroupProgress(
            total=len(counted),
            completed=len(done),
            failed=sum(a.state in failing and a.agent_id not in done for a in counted),
            active=sum(a.state in ACTIVE_STATES and a.agent_id not in done for a in counted),
        )

    def completed_earlier(self, attempt: AgentRecord) -> AgentRecord | None:
        """The earlier attempt at ``attempt``'s work that completed it (one declared lost that came back:
        slow, not gone), if any."""
        before = self.attempts_before(attempt)
        return next((a for a in before if a.state is AgentState.COMPLETED and a.completion is not None), None)

    def attempts_before(self, attempt: AgentRecord) -> list[AgentRecord]:
        """The earlier attempts at ``attempt``'s work, the latest first (the one it retries, and so on)."""
        earlier: list[AgentRecord] = []
        seen = {attempt.agent_id}
        while attempt.retry_of is not None and attempt.retry_of not in seen:
            if (found := self.agents.get(attempt.retry_of)) is None:
                break
            earlier.append(found)
            seen.add(found.agent_id)
            attempt = found
        return earlier

    def first_attempt(self, attempt: AgentRecord) -> AgentRecord:
        """The record of the first attempt at ``attempt``'s work (a retry names the attempt it replaced)."""
        earlier = self.attempts_before(attempt)
        return earlier[-1] if earlier else attempt

    def attempts_after(self, attempt: AgentRecord) -> list[str]:
        """The ids of the later attempts at ``attempt``'s work (its retry, the retry's retry...)."""
        later: list[str] = []
        while attempt.retried_by is not None and attempt.retried_by not in later:
            later.append(attempt.retried_by)
            if (found := self.agents.get(attempt.retried_by)) is None:
                break
            attempt = found
        return later

    @property
    def budget_used(self) -> int:
        """Agents counted against ``max_agents_per_group``: every one registered but senders of findings
        only (scripts)."""
        return sum(a.watched for a in self.agents.values())

    @property
    def active_count(self) -> int:
        """Agents holding a parallel slot."""
        return sum(a.state in ACTIVE_STATES and a.watched for a in self.agents.values())

    @property
    def settled(self) -> bool:
        """At least one agent, none active, and no delegation waiting for a human."""
        return (
            any(a.watched for a in self.agents.values())
            and self.active_count == 0
            and all(d.status is not DelegationStatus.PENDING_HUMAN for d in self.delegations.values())
        )

    def to_json(self) -> bytes:
        """The stored form: orjson bytes."""
        return orjson.dumps(self.model_dump(mode="json", exclude_defaults=True))

    @classmethod
    def from_json(cls, data: bytes | str) -> GroupState:
        """Parse a stored state; a corrupt value is a :class:`~bus.errors.DecodeError`."""
        try:
            return cls.model_validate(orjson.loads(data))
        except (orjson.JSONDecodeError, ValidationError) as exc:
            raise DecodeError(f"invalid group state: {exc}") from None
