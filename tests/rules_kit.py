"""Builders shared by the rules tests: seed signals and a feed that applies envelopes in order."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from bus.directives import AnswerItem, HumanAnswer
from bus.envelope import Envelope, EnvelopeType, Payload, encode, new_envelope
from bus.events import Decision, DecisionType
from bus.findings import Finding
from bus.results import ConfidenceReport, ResultReport, ResultStatus
from bus.signals import (
    ClarificationNeeded,
    CompletionReport,
    CompletionStatus,
    DelegateWork,
    StopWork,
)
from coordinator.policy import Policy
from coordinator.rules import Outcome, Target, apply
from coordinator.state import GroupState

GROUP = "group-1"
T0 = datetime(2026, 1, 11, 8, 0, tzinfo=timezone(timedelta(hours=-5)))


def stream_id(at: datetime, seq: int = 0) -> bytes:
    """The id the server gives an entry it adds at ``at``: a tick's must tell its tick's time."""
    return b"%d-%d" % (round(at.timestamp() * 1000), seq)


class Feed:
    """Applies envelopes one after another, like the service loop, and keeps everything emitted."""

    def __init__(self, policy: Policy | None = None, group: str = GROUP) -> None:
        self.policy = policy or Policy()
        self.state = GroupState(group_id=group)
        self.group = group
        self.count = 0
        self.outcomes: list[Outcome] = []

    def envelope(self, payload: Payload, agent_id: str, *, at: float | None = None) -> Envelope:
        self.count += 1
        seconds = self.count if at is None else at
        return new_envelope(
            payload,
            agent_id=agent_id,
            group_id=self.group,
            source="test",
            id=f"in-{self.count:05d}",
            ts=T0 + timedelta(seconds=seconds),
        )

    def apply(self, envelope: Envelope) -> Outcome:
        outcome = apply(self.state, envelope, self.policy)
        for emit in outcome.emits:  # what is published is what the emitted envelope says
            assert emit.data == encode(emit.envelope) and emit.type is emit.envelope.type
        self.state = outcome.state
        self.outcomes.append(outcome)
        return outcome

    def send(self, payload: Payload, agent_id: str, *, at: float | None = None) -> Outcome:
        return self.apply(self.envelope(payload, agent_id, at=at))


def of_type(outcome: Outcome, type_: EnvelopeType, target: Target | None = None) -> list[Envelope]:
    return [
        e.envelope
        for e in outcome.emits
        if e.envelope.type is type_ and (target is None or e.target is target)
    ]


def payloads(outcome: Outcome, type_: EnvelopeType, target: Target | None = None) -> list[Any]:
    return [e.payload for e in of_type(outcome, type_, target)]


def one(outcome: Outcome, type_: EnvelopeType, target: Target | None = None) -> Any:
    found = of_type(outcome, type_, target)
    assert len(found) == 1, f"expected one {type_}, got {[e.envelope.type for e in outcome.emits]}"
    return found[0].payload


def decisions(outcome: Outcome) -> list[Decision]:
    return [e.envelope.payload for e in outcome.emits if isinstance(e.envelope.payload, Decision)]


def kinds(outcome: Outcome) -> list[DecisionType]:
    return [d.decision for d in decisions(outcome)]


# -- seed 000 examples ----------------------------------------------------------------------------------


def clarification(
    agent_id: str = "bg-task-abc123", at: str = "2026-01-11T08:45:00-05:00"
) -> ClarificationNeeded:
    return ClarificationNeeded.model_validate(
        {
            "agent_id": agent_id,
            "timestamp": at,
            "blocked_at": "Analyzing authentication patterns in src/auth/",
            "reason": "Multiple authentication strategies found, unclear which to analyze",
            "questions": [
                {
                    "question_id": "Q1",
                    "text": "Should I analyze OAuth2, JWT, or both authentication strategies?",
                    "context": "Found separate implementations in src/auth/oauth.ts and src/auth/jwt.ts",
                },
                {
                    "question_id": "Q2",
                    "text": "What security framework version should I assume (2.0 or 3.0)?",
                    "context": "Dependencies show both @auth/core@2.x and @auth/core@3.x-beta",
                },
            ],
            "can_resume_with": "Answers specifying which auth strategies to analyze "
            "and framework version assumptions",
            "current_state": "Completed secret scanning, started auth analysis",
        }
    )


def answers(*pairs: tuple[str, str], next_step: str | None = None) -> HumanAnswer:
    return HumanAnswer(answers=[AnswerItem(question_id=q, answer=a) for q, a in pairs], next_step=next_step)


def stop_dependency(agent_id: str = "bg-task-def456", at: str = "2026-01-11T09:15:00-05:00") -> StopWork:
    return StopWork.model_validate(
        {
            "agent_id": agent_id,
            "timestamp": at,
            "stop_reason": "blocker",
            "blocker_type": "external_dependency",
            "details": "node_modules missing",
            "completed_work": "✓ Scanned for hardcoded secrets (0 found)\n"
            "✓ Analyzed SQL queries (no injection risks)",
            "blocked_work": "✗ Dependency vulnerability scan (requires npm audit)\n"
            "✗ License compliance check (requires npm ls)",
            "state_snapshot": "Files analyzed: 47/120\nReports generated: AUTH_ANALYSIS.md, SQL_REVIEW.md\n"
            "Working directory: /Users/bln/play/agentic-primer/src",
            "resume_requirements": "Run: npm install (in parent session)",
        }
    )


def stop_error(agent_id: str = "bg-task-stu901") -> StopWork:
    return StopWork.model_validate(
        {
            "agent_id": agent_id,
            "stop_reason": "error",
            "blocker_type": "error",
            "details": "Unexpected error during analysis:\n"
            "TypeError: Cannot read property 'length' of undefined",
            "completed_work": "Items 1-50",
            "state_snapshot": "checkpoint after item 50",
            "error_recovery": "1. Skip problematic file and continue",
        }
    )


PARALLEL_TASK = (
    "Refactor authentication module to use unified AuthProvider pattern\n"
    "- Consolidate OAuth2 and JWT implementations\n"
    "- Create single AuthProvider interface\n"
    "- Update all auth consumers to use new interface"
)


def delegate(
    agent_id: str = "bg-task-jkl012",
    *,
    independence: str = "can_proceed_parallel",
    priority: str = "P1",
    task: str = PARALLEL_TASK,
    reason: str = "Discovered large-scale refactoring opportunity that should run in parallel",
    stamp: str = "2026-01-11T10:00:00-05:00",
) -> DelegateWork:
    return DelegateWork.model_validate(
        {
            "agent_id": agent_id,
            "timestamp": stamp,
            "delegation_reason": reason,
            "new_task_description": task,
            "independence": independence,
            "priority": priority,
            "context_required": "- Current authentication analysis (see AUTH_ANALYSIS.md)",
            "coordination": "This agent: Continue security analysis of remaining modules\n"
            "New agent: Refactor auth module (separate work, no conflicts)",
            "estimated_duration": "2-3 hours",
        }
    )


def completion(agent_id: str, status: str = "success", summary: str = "Done.") -> CompletionReport:
    return CompletionReport(
        agent_id=agent_id,
        status=CompletionStatus(status),
        summary=summary,
        deliverables="- SECURITY_ANALYSIS.md",
        metrics_achieved="all criteria met",
    )


def finding(
    agent: str,
    *,
    id: str | None = "SEC-001",
    file: str | None = "src/config/jwt.ts",
    line: int | None = 8,
    confidence: float | None = 95,
    severity: str | None = "critical",
    title: str = "Hardcoded JWT secret",
    category: str = "",
) -> Finding:
    return Finding.model_validate(
        {
            "id": id,
            "title": title,
            "file": file,
            "line": line,
            "category": category,
            "severity": severity,
            "confidence": confidence,
            "agent": agent,
        }
    )


def result(
    agent: str,
    status: ResultStatus = ResultStatus.SUCCESS,
    *,
    summary: str = "Reviewed the module.",
    findings: list[Finding] | None = None,
    confidence: ConfidenceReport | None = None,
) -> ResultReport:
    return ResultReport(
        agent=agent,
        status=status,
        summary=summary,
        findings=findings or [],
        confidence=confidence or ConfidenceReport(score=70, justification="some evidence"),
    )
