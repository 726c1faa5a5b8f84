"""The envelope types: the payload model each ``type`` names, and the :class:`Kind` it fixes.

The catalogue of the protocol's messages, which :mod:`bus.envelope` validates and :mod:`bus.schema`
describes.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from bus import directives as d
from bus import events as e
from bus import signals as s
from bus.findings import Finding
from bus.results import ResultReport

__all__ = ["PAYLOADS", "EnvelopeType", "Kind", "Payload"]


class Kind(StrEnum):
    """The family of an envelope's ``type``: what wrote it and who reads it (``type`` names the payload)."""

    SIGNAL = "signal"
    RESULT = "result"
    FINDING = "finding"
    DIRECTIVE = "directive"
    EVENT = "event"
    HUMAN = "human"


class EnvelopeType(StrEnum):
    """The payload an envelope carries; each has its JSON Schema (``subagent-bus schema TYPE``)."""

    # signals (seed 000)
    CLARIFICATION_NEEDED = "CLARIFICATION_NEEDED"
    STOP_WORK = "STOP_WORK"
    DELEGATE_WORK = "DELEGATE_WORK"
    COMPLETION_REPORT = "COMPLETION_REPORT"
    PROGRESS = "PROGRESS"
    # the result contract (seeds 001/002) and one finding
    RESULT = "RESULT"
    FINDING = "FINDING"
    # directives back to agents, and launch requests to launchers
    CLARIFICATION_RESPONSE = "CLARIFICATION_RESPONSE"
    BLOCKER_RESOLVED = "BLOCKER_RESOLVED"
    DELEGATION_APPROVED = "DELEGATION_APPROVED"
    DELEGATION_DENIED = "DELEGATION_DENIED"
    DELEGATION_COMPLETED = "DELEGATION_COMPLETED"
    ERROR_RECOVERY = "ERROR_RECOVERY"
    LAUNCH = "LAUNCH"
    # human commands
    ANSWER = "ANSWER"
    RESOLVE = "RESOLVE"
    RECOVER = "RECOVER"
    APPROVE = "APPROVE"
    DENY = "DENY"
    DISMISS = "DISMISS"
    # events
    HEARTBEAT = "HEARTBEAT"
    AGENT_STARTED = "AGENT_STARTED"
    AGENT_EXITED = "AGENT_EXITED"
    TICK = "TICK"
    DECISION = "DECISION"


Payload = (
    s.ClarificationNeeded
    | s.StopWork
    | s.DelegateWork
    | s.CompletionReport
    | s.Progress
    | ResultReport
    | Finding
    | d.ClarificationResponse
    | d.BlockerResolved
    | d.DelegationApproved
    | d.DelegationDenied
    | d.DelegationCompleted
    | d.ErrorRecovery
    | d.LaunchRequest
    | d.HumanAnswer
    | d.HumanResolve
    | d.HumanRecover
    | d.HumanApprove
    | d.HumanDeny
    | d.HumanDismiss
    | e.Heartbeat
    | e.AgentStarted
    | e.AgentExited
    | e.Tick
    | e.Decision
)

T = EnvelopeType
PAYLOADS: Final[dict[EnvelopeType, tuple[Kind, type[Payload]]]] = {
    T.CLARIFICATION_NEEDED: (Kind.SIGNAL, s.ClarificationNeeded),
    T.STOP_WORK: (Kind.SIGNAL, s.StopWork),
    T.DELEGATE_WORK: (Kind.SIGNAL, s.DelegateWork),
    T.COMPLETION_REPORT: (Kind.SIGNAL, s.CompletionReport),
    T.PROGRESS: (Kind.SIGNAL, s.Progress),
    T.RESULT: (Kind.RESULT, ResultReport),
    T.FINDING: (Kind.FINDING, Finding),
    T.CLARIFICATION_RESPONSE: (Kind.DIRECTIVE, d.ClarificationResponse),
    T.BLOCKER_RESOLVED: (Kind.DIRECTIVE, d.BlockerResolved),
    T.DELEGATION_APPROVED: (Kind.DIRECTIVE, d.DelegationApproved),
    T.DELEGATION_DENIED: (Kind.DIRECTIVE, d.DelegationDenied),
    T.DELEGATION_COMPLETED: (Kind.DIRECTIVE, d.DelegationCompleted),
    T.ERROR_RECOVERY: (Kind.DIRECTIVE, d.ErrorRecovery),
    T.LAUNCH: (Kind.DIRECTIVE, d.LaunchRequest),
    T.ANSWER: (Kind.HUMAN, d.HumanAnswer),
    T.RESOLVE: (Kind.HUMAN, d.HumanResolve),
    T.RECOVER: (Kind.HUMAN, d.HumanRecover),
    T.APPROVE: (Kind.HUMAN, d.HumanApprove),
    T.DENY: (Kind.HUMAN, d.HumanDeny),
    T.DISMISS: (Kind.HUMAN, d.HumanDismiss),
    T.HEARTBEAT: (Kind.EVENT, e.Heartbeat),
    T.AGENT_STARTED: (Kind.EVENT, e.AgentStarted),
    T.AGENT_EXITED: (Kind.EVENT, e.AgentExited),
    T.TICK: (Kind.EVENT, e.Tick),
    T.DECISION: (Kind.EVENT, e.Decision),
}
