"""Completions: ``[COMPLETION_REPORT]`` signals and ``## <Agent> Result`` reports.

Both record the agent's status, deliverables and metrics, update the group's progress and feed status
aggregation (:mod:`coordinator.rules.aggregation`). A COMPLETION_REPORT's ``success`` /
``partial_success`` / ``failed`` map onto the result contract's SUCCESS / PARTIAL / FAILED. A RESULT also
names the agent's kind (its heading), carries findings (published and merged like FINDING envelopes) and
is checked against the result contract (:mod:`coordinator.rules.contract`). Its findings, issues, next
steps and blockers are kept as text with the completion: a requester that waited for the agent
(``blocks_current_work``) is resumed with them.
"""

from __future__ import annotations

from typing import Final

from bus.display import cut
from bus.envelope import EnvelopeType
from bus.events import DecisionType
from bus.findings import Finding
from bus.results import ErrorDetails, Issue, ResultReport, ResultStatus, says_nothing
from bus.signals import CompletionReport, CompletionStatus
from coordinator.policy import agent_key
from coordinator.rules.aggregation import finish
from coordinator.rules.contract import check_result
from coordinator.rules.findings import record_finding
from coordinator.rules.step import Step, TooLarge
from coordinator.state import Completion, Violation, ViolationRule

__all__ = ["MAX_LISTED", "STATUS_OF_COMPLETION", "on_completion_report", "on_result"]

MAX_LISTED: Final = 20
"""Findings listed in a completion's results; the findings stream holds them all."""

STATUS_OF_COMPLETION: Final = {
    CompletionStatus.SUCCESS: ResultStatus.SUCCESS,
    CompletionStatus.PARTIAL_SUCCESS: ResultStatus.PARTIAL,
    CompletionStatus.FAILED: ResultStatus.FAILED,
}


def on_completion_report(step: Step) -> None:
    report = step.payload(CompletionReport)
    completion = Completion(
        status=STATUS_OF_COMPLETION[report.status],
        summary=report.summary or _summary_of(report),
        deliverables=report.deliverables,
        metrics=report.metrics_achieved,
        source=EnvelopeType.COMPLETION_REPORT,
        envelope_id=step.envelope.id,
    )
    missing = report.unverified_deliverables()  # seed 003: validate deliverables exist (file checks)
    _violations(step, [(ViolationRule.UNVERIFIED_REFERENCE, f"deliverable {p!r} not found") for p in missing])
    finish(step, step.envelope.agent_id, completion)


def _summary_of(report: CompletionReport) -> str:
    """What stands for the summary of a report without one: what it achieved, else what it delivered,
    else what it recommends."""
    for text in (report.metrics_achieved, report.deliverables, report.recommendations):
        if text and text.strip():
            return text.strip()
    return "(no summary given)"


def on_result(step: Step) -> None:
    report = step.payload(ResultReport)
    agent_id = step.envelope.agent_id
    record = step.agent(agent_id)
    if record.name is None and report.agent.strip():
        step.update(agent_id, name=agent_key(report.agent))
    left_out: list[tuple[ViolationRule, str]] = []
    for finding in report.findings:
        try:
            record_finding(step, finding, agent_id)
        except TooLarge as exc:  # that finding only (it changed nothing): the result stands
            left_out.append(
                (ViolationRule.FINDING_TOO_LARGE, f"finding {cut(finding.title, 80)!r} left out: {exc}")
            )
    _violations(step, [*left_out, *check_result(report, step.policy)])
    completion = Completion(
        status=report.status,
        summary=report.summary,
        results=_results(report, step.group_id),
        confidence=report.confidence.score if report.confidence is not None else None,
        source=EnvelopeType.RESULT,
        envelope_id=step.envelope.id,
    )
    finish(step, agent_id, completion)


def _error_line(error: ErrorDetails) -> str:
    """Type, message, where and whether the agent thinks it recoverable (seed 002's error details)."""
    where = f"(at {error.occurred_at})" if error.occurred_at else None
    recoverable = (
        None if error.recoverable is None else "(recoverable)" if error.recoverable else "(not recoverable)"
    )
    return " ".join(filter(None, (error.type, error.message, where, recoverable)))


def _results(report: ResultReport, group_id: str) -> str | None:
    """The report's error (type, message, root cause, actions attempted, recovery options), findings (the
    first :data:`MAX_LISTED`), issues, next steps and blockers as text."""
    findings = [_finding_line(f) for f in report.findings[:MAX_LISTED]]
    if len(report.findings) > MAX_LISTED:
        more = len(report.findings) - MAX_LISTED
        findings.append(f"… and {more} more (`subagent-bus findings --group {group_id}`)")
    error = _error_line(report.error) if report.error else ""
    parts = (
        ("Error", [error] if error else []),
        ("Root cause", [report.root_cause] if report.root_cause else []),
        ("Attempted", report.attempted_actions),
        ("Recovery options", report.recovery_options),
        ("Findings", findings),
        ("Issues", [_issue_line(i) for i in report.issues]),
        ("Next steps", report.next_steps),
        (
            "Blockers",
            [
                b.description + (f" (needs: {b.resolution})" if b.resolution else "")
                for b in report.blockers
                if not says_nothing(b.description)
            ],
        ),
    )
    text = "\n".join(
        f"{label}:\n" + "\n".join(f"- {line}" for line in lines) for label, lines in parts if lines
    )
    return text or None


def _issue_line(issue: Issue) -> str:
    said = f"{issue.title}: {issue.description}" if issue.description else issue.title
    return f"[{issue.severity.value}] {said}" if issue.severity else said


def _finding_line(finding: Finding) -> str:
    words = (f"[{finding.severity.value}]" if finding.severity else "", finding.id or "", finding.title)
    place = (finding.location, f"confidence {finding.confidence:g}" if finding.confidence is not None else "")
    where = ", ".join(p for p in place if p)
    return " ".join(w for w in (*words, f"({where})" if where else "") if w)


def _violations(step: Step, found: list[tuple[ViolationRule, str]]) -> None:
    """Keep contract violations on the agent's record, each announced."""
    if not found:
        return
    agent_id = step.envelope.agent_id
    added = tuple(Violation(rule=rule, detail=detail, envelope_id=step.envelope.id) for rule, detail in found)
    step.update(agent_id, violations=(*step.agent(agent_id).violations, *added))
    for violation in added:
        step.decide(DecisionType.CONTRACT_VIOLATION, agent_id, f"{violation.rule.value}: {violation.detail}")
