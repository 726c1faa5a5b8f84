"""What flows back from the parent: resume directives, launch requests and human commands.

A directive renders the exact resume prompt of the seeds (``## CLARIFICATION RESPONSE`` ...), which an
adapter hands to the agent unchanged. A launch request asks a launcher to start a new agent. Human
commands enter the shard stream like any signal, so they are ordered and applied exactly once.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Final

from pydantic import Field

from bus.fields import Model, Text, Timestamp
from bus.signals import Priority

__all__ = [
    "AnswerItem",
    "BlockerResolved",
    "ClarificationResponse",
    "DelegationApproved",
    "DelegationCompleted",
    "DelegationDenied",
    "ErrorRecovery",
    "HumanAnswer",
    "HumanApprove",
    "HumanDeny",
    "HumanDismiss",
    "HumanRecover",
    "HumanResolve",
    "LaunchReason",
    "LaunchRequest",
    "RecoveryOption",
]


def _section(title: str, *lines: str) -> str:
    """A later section of a prompt: the heading line, then its body (omitted when empty)."""
    body = "\n".join(line for line in lines if line)
    return f"## {title}\n{body}" if body else ""


def _lead(title: str, *lines: str) -> str:
    """The first section of a prompt: the seeds put a blank line under its heading."""
    return f"## {title}\n\n" + "\n".join(line for line in lines if line)


def _prompt(*parts: str) -> str:
    return "\n\n".join(part for part in parts if part)


def _labelled(label: str, value: str | None) -> str:
    return f"{label}: {value.strip()}" if value and value.strip() else ""


_QUESTION_NUMBER = re.compile(r"^[Qq](\d+)$")


class AnswerItem(Model):
    question_id: str
    answer: Text
    question: Text | None = None

    @property
    def answer_label(self) -> str:
        """``A1`` for ``Q1``; the question id itself for any other id."""
        match = _QUESTION_NUMBER.match(self.question_id)
        return f"A{match.group(1)}" if match else f"A({self.question_id})"


class ClarificationResponse(Model):
    """Answers to a CLARIFICATION_NEEDED, with where to pick the work up again."""

    answers: list[AnswerItem] = Field(min_length=1)
    continue_from: Text | None = None
    current_state: Text | None = None
    next_step: Text | None = None

    def render(self) -> str:
        qa = "\n\n".join(
            "\n".join(x for x in (_labelled(a.question_id, a.question), f"{a.answer_label}: {a.answer}") if x)
            for a in self.answers
        )
        return _prompt(
            "## CLARIFICATION RESPONSE",
            "Your questions have been answered:",
            qa,
            _section(
                "RESUME INSTRUCTIONS",
                _labelled("Continue from", self.continue_from),
                _labelled("Current state", self.current_state),
                _labelled("Next step", self.next_step),
            ),
        )


class BlockerResolved(Model):
    """The resolution of a STOP_WORK blocker, with the state to restore."""

    issue: Text
    resolution: Text
    state_restoration: Text | None = None
    resume_instructions: Text | None = None

    def render(self) -> str:
        return _prompt(
            _lead(
                "BLOCKER RESOLVED", _labelled("Issue", self.issue), _labelled("Resolution", self.resolution)
            ),
            _section("STATE RESTORATION", (self.state_restoration or "").strip()),
            _section("RESUME INSTRUCTIONS", (self.resume_instructions or "").strip()),
        )


class DelegationApproved(Model):
    request_id: str
    new_agent_id: str
    task: Text
    coordination: Text | None = None
    resume_instructions: Text | None = None

    def render(self) -> str:
        return _prompt(
            _lead(
                "DELEGATION APPROVED",
                _labelled("New agent launched", self.new_agent_id),
                _labelled("Task", self.task),
                _labelled("Coordination", self.coordination),
            ),
            _section("RESUME INSTRUCTIONS", (self.resume_instructions or "").strip()),
        )


class DelegationDenied(Model):
    request_id: str
    reason: Text
    alternative: Text | None = None
    resume_instructions: Text | None = None

    def render(self) -> str:
        return _prompt(
            _lead(
                "DELEGATION DENIED",
                _labelled("Reason", self.reason),
                _labelled("Alternative", self.alternative),
            ),
            _section("RESUME INSTRUCTIONS", (self.resume_instructions or "").strip()),
        )


class DelegationCompleted(Model):
    """Resumes an agent that waited (``blocks_current_work``) with its delegate's outcome."""

    request_id: str
    delegate_agent_id: str
    status: str
    summary: Text
    deliverables: Text | None = None
    results: Text | None = None
    """A result report's findings, issues, next steps and blockers, as text."""
    resume_instructions: Text | None = None

    def render(self) -> str:
        return _prompt(
            _lead(
                "DELEGATED WORK COMPLETE",
                _labelled("Agent", self.delegate_agent_id),
                _labelled("Status", self.status),
                _labelled("Summary", self.summary),
                _labelled("Deliverables", self.deliverables),
            ),
            _section("RESULTS", (self.results or "").strip()),
            _section("RESUME INSTRUCTIONS", (self.resume_instructions or "").strip()),
        )


class RecoveryOption(StrEnum):
    """The recovery patterns of seed 003 for ``stop_reason: error``."""

    RETRY_FROM_CHECKPOINT = "retry_from_checkpoint"
    SKIP_AND_CONTINUE = "skip_and_continue"
    DELEGATE = "delegate"


class ErrorRecovery(Model):
    option: RecoveryOption
    instructions: Text
    checkpoint: Text | None = None
    error: bool | None = None
    """False when the agent stopped on something else than an error (a resource limit, a timeout): a
    skip chosen then is headed SKIP AND CONTINUE, not the seed's ERROR RECOVERY, which would tell the
    agent of an error it never had. None (left out on the wire): an error, as the seed's recoveries are."""

    def render(self) -> str:
        skip = "SKIP AND CONTINUE" if self.error is False else "ERROR RECOVERY"
        heading = {
            RecoveryOption.RETRY_FROM_CHECKPOINT: "ERROR FIXED",
            RecoveryOption.SKIP_AND_CONTINUE: skip,
            RecoveryOption.DELEGATE: "PARTIAL RESUME",
        }[self.option]
        # seed 000's ERROR FIXED: what was fixed, the checkpoint, and the retry, whoever wrote the first
        retry = _RETRY if self.option is RecoveryOption.RETRY_FROM_CHECKPOINT else None
        parts = (self.instructions.strip(), _labelled("Resume from checkpoint", self.checkpoint), retry)
        return _prompt(f"## {heading}", "\n".join(x for x in parts if x))


_RETRY: Final = "Retry the step that failed."


class LaunchReason(StrEnum):
    DELEGATION = "delegation"
    RETRY = "retry"
    RESUME = "resume"
    """The agent again, in a new session: its adapter stopped reading its inbox, so the directive that
    resumes it travels in the request's ``context``."""


class LaunchRequest(Model):
    """An entry of a shard's ``tasks`` stream: start this agent (an approved delegation, a retry, or an
    agent resumed in a new session)."""

    request_id: str
    new_agent_id: str
    parent_agent_id: str | None = None
    reason: LaunchReason
    task: Text
    context: Text | None = None
    priority: Priority = Priority.P1
    depth: int = Field(default=1, ge=0)
    attempt: int = Field(default=1, ge=1)
    expires_at: Timestamp | None = None
    """Not started after this instant: by then the coordinator, which has not heard from the agent,
    declares it lost (and retries or escalates it), and a late start would run it twice."""


class HumanAnswer(Model):
    """``subagent-bus answer AGENT Q1=... Q2=...``."""

    answers: list[AnswerItem] = Field(min_length=1)
    next_step: Text | None = None


class HumanResolve(Model):
    """``subagent-bus resolve AGENT --resolution ...``."""

    resolution: Text
    instructions: Text | None = None


class HumanRecover(Model):
    """Picks one of the error-recovery options for an agent stopped with ``stop_reason: error``."""

    option: RecoveryOption
    instructions: Text | None = None


class HumanApprove(Model):
    request_id: str
    reason: Text | None = None
    instructions: Text | None = None
    """The requester's resume instructions, instead of the default (seed 000's "Approve and Launch")."""


class HumanDeny(Model):
    request_id: str
    reason: Text
    alternative: Text | None = None
    instructions: Text | None = None
    """The requester's resume instructions, instead of the default (seed 000's "Deny and Redirect")."""


class HumanDismiss(Model):
    """``subagent-bus dismiss AGENT``: the human has seen the agent's escalation and takes it from here."""

    note: Text | None = None
