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

from bus.envelope import EnvelopeType
from bus.events import DecisionType
from bus.findings import Finding
from bus.results import ResultReport, ResultStatus
from bus.signals import CompletionReport, CompletionStatus
from coordinator.policy import agent_key
from coordinator.rules.aggregation import finish
from coordinator.rules.contract import check_result
from coordinator.rules.findings import record_finding
from coordinator.rules.step import Step
from coordinator.state import Completion, Violation

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
        summary=report.summary,
        deliverables=report.deliverables,
        metrics=report.metrics_achieved,
        source=EnvelopeType.COMPLETION_REPORT,
        envelope_id=step.envelope.id,
    )
    finish(step, step.envelope.agent_id, completion)


def on_result(step: Step) -> None:
    report = step.payload(ResultReport)
    agent_id = step.envelope.agent_id
    record = step.agent(agent_id)
    if record.name is None and report.agent.strip():
        step.update(agent_id, name=agent_key(report.agent))
    for finding in report.findings:
        record_finding(step, finding, agent_id)
    _check_contract(step, report)
    completion = Completion(
        status=report.status,
        summary=report.summary,
        results=_results(report),
        confidence=report.confidence.score if report.confidence is not None else None,
        source=EnvelopeType.RESULT,
        envelope_id=step.envelope.id,
    )
    finish(step, agent_id, completion)


def _results(report: ResultReport) -> str | None:
    """The report's findings (the first :data:`MAX_LISTED`), issues, next steps and blockers as text."""
    findings = [_finding_line(f) for f in report.findings[:MAX_LISTED]]
    if len(report.findings) > MAX_LISTED:
        findings.append(f"… and {len(report.findings) - MAX_LISTED} more (`subagent-bus findings`)")
    parts = (
        ("Findings", findings),
        ("Issues", [f"[{i.severity.value}] {i.title}" if i.severity else i.title for i in report.issues]),
        ("Next steps", report.next_steps),
        (
            "Blockers",
            [b.description + (f" (needs: {b.resolution})" if b.resolution else "") for b in report.blockers],
        ),
    )
    text = "\n".join(
        f"{label}:\n" + "\n".join(f"- {line}" for line in lines) for label, lines in parts if lines
    )
    return text or None


def _finding_line(finding: Finding) -> str:
    words = (f"[{finding.severity.value}]" if finding.severity else "", finding.id or "", finding.title)
    place = (finding.location, f"confidence {finding.confidence:g}" if finding.confidence is not None else "")
    where = ", ".join(p for p in place if p)
    return " ".join(w for w in (*words, f"({where})" if where else "") if w)


def _check_contract(step: Step, report: ResultReport) -> None:
    agent_id = step.envelope.agent_id
    found = check_result(report, step.policy)
    if not found:
        return
    added = tuple(Violation(rule=rule, detail=detail, envelope_id=step.envelope.id) for rule, detail in found)
    step.update(agent_id, violations=(*step.agent(agent_id).violations, *added))
    for violation in added:
        step.decide(DecisionType.CONTRACT_VIOLATION, agent_id, f"{violation.rule.value}: {violation.detail}")
