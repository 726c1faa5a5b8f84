"""Lifecycle events: what adapters report about a process, and what the coordinator decided."""

from __future__ import annotations

from enum import StrEnum

from bus.fields import Model, Text, Timestamp

__all__ = [
    "AgentExited",
    "AgentStarted",
    "AgentState",
    "Decision",
    "DecisionType",
    "Heartbeat",
    "Tick",
]


class AgentState(StrEnum):
    """An agent's lifecycle state as the coordinator tracks it."""

    RUNNING = "running"
    AWAITING_CLARIFICATION = "awaiting_clarification"
    BLOCKED = "blocked"
    DELEGATING = "delegating"
    COMPLETED = "completed"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    LOST = "lost"


class Heartbeat(Model):
    """Sent by an adapter while its agent process is alive."""

    pid: int | None = None


class AgentStarted(Model):
    """An adapter started (or attached to) an agent; ``task`` is its prompt when the adapter knows it."""

    pid: int | None = None
    command: list[str] | None = None
    task: Text | None = None
    name: str | None = None


class AgentExited(Model):
    """The agent process ended; ``completed`` tells whether it sent a completion report first.

    ``resumable`` says whether its adapter goes on reading the agent's inbox and resumes the agent with
    what arrives there (``true``), or stops reading it (``false``: a directive would wait there for a
    reader that is not coming); absent when the adapter cannot tell.
    """

    exit_code: int | None = None
    completed: bool = False
    stderr_tail: Text | None = None
    resumable: bool | None = None


class Tick(Model):
    """The coordinator's clock, published into a shard stream so timeouts are ordered and replayable."""

    now: Timestamp


class DecisionType(StrEnum):
    STATE_CHANGED = "state_changed"
    QUESTION_OPENED = "question_opened"
    QUESTION_ANSWERED = "question_answered"
    BLOCKER_OPENED = "blocker_opened"
    BLOCKER_RESOLVED = "blocker_resolved"
    DELEGATION_PENDING = "delegation_pending"
    DELEGATION_APPROVED = "delegation_approved"
    DELEGATION_DENIED = "delegation_denied"
    DELEGATION_COMPLETED = "delegation_completed"
    LAUNCH_REQUESTED = "launch_requested"
    RETRY_REQUESTED = "retry_requested"
    ESCALATED = "escalated"
    ESCALATION_DISMISSED = "escalation_dismissed"
    GROUP_STATUS = "group_status"
    SEVERITY_CONFLICT = "severity_conflict"
    GROUP_RETIRED = "group_retired"
    CONTRACT_VIOLATION = "contract_violation"
    TIMED_OUT = "timed_out"
    LOST = "lost"
    COMPLETED = "completed"
    REJECTED = "rejected"


class Decision(Model):
    """One decision of the coordinator, published on the shard's ``events`` stream."""

    decision: DecisionType
    detail: Text = ""
    cause: str | None = None
    request_id: str | None = None
    state: AgentState | None = None
