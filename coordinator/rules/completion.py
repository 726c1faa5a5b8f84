"""Completions: ``[COMPLETION_REPORT]`` signals and ``## <Agent> Result`` reports.

Both record the agent's status, deliverables and metrics, update the group's progress and feed status
aggregation (:mod:`coordinator.rules.aggregation`). A COMPLETION_REPORT's ``success`` /
``partial_success`` / ``failed`` map onto the result contract's SUCCESS / PARTIAL / FAILED. A RESULT also
names the agent's kind (its heading), carries findings (published and merged like FINDING envelopes) and
is checked against the result contract (:mod:`coordinator.rules.contract`).
"""

from __future__ import annotations

from typing import Final

from bus.envelope import EnvelopeType
from bus.events import DecisionType
from bus.results import ResultReport, ResultStatus
from bus.signals import CompletionReport, CompletionStatus
from coordinator.policy import agent_key
from coordinator.rules.aggregation import finish
from coordinator.rules.contract import check_result
from coordinator.rules.findings import record_finding
from coordinator.rules.step import Step
from coordinator.state import Completion, Violation

__all__ = ["STATUS_OF_COMPLETION", "on_completion_report", "on_result"]

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
        confidence=report.confidence.score if report.confidence is not None else None,
        source=EnvelopeType.RESULT,
        envelope_id=step.envelope.id,
    )
    finish(step, agent_id, completion)


def _check_contract(step: Step, report: ResultReport) -> None:
    agent_id = step.envelope.agent_id
    found = check_result(report, step.policy)
    if not found:
        return
    added = tuple(Violation(rule=rule, detail=detail, envelope_id=step.envelope.id) for rule, detail in found)
    step.update(agent_id, violations=(*step.agent(agent_id).violations, *added))
    for violation in added:
        step.decide(DecisionType.CONTRACT_VIOLATION, agent_id, f"{violation.rule.value}: {violation.detail}")
