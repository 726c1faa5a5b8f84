"""Result-contract checks: summary length, confidence breakdown and justification, references."""

from __future__ import annotations

from rules_kit import Feed, completion, decisions, finding, result

from bus.events import DecisionType
from bus.results import (
    ConfidenceJustification,
    ConfidenceReport,
    Reference,
    ResultBlocker,
    ResultReport,
    ResultStatus,
    Section,
)
from coordinator.policy import Policy
from coordinator.rules import check_result, estimate_tokens, summarize
from coordinator.state import ViolationRule

FULL = ConfidenceReport(
    score=94,
    justification="Issues verified with code evidence",
    verified=95,
    inferred=93,
    detailed=ConfidenceJustification(
        score=94, evidence_count="3", verification_method="read", blind_spots="none"
    ),
)


def _rules(report: ResultReport, policy: Policy | None = None) -> list[ViolationRule]:
    return [rule for rule, _ in check_result(report, policy or Policy())]


def test_token_estimate_is_four_characters_per_token() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("abcd") == 1
    assert estimate_tokens("abcde") == 2
    assert estimate_tokens("  " + "x" * 2000 + "\n") == 500


def test_a_complete_report_has_no_violations() -> None:
    assert _rules(result("security-auditor", confidence=FULL)) == []


def test_summary_over_the_limit() -> None:
    at_limit = result("a", summary="x" * 2000, confidence=FULL)
    assert _rules(at_limit) == []
    over = result("a", summary="word " * 401, confidence=FULL)
    (rule, detail), *_ = check_result(over, Policy())
    assert rule is ViolationRule.SUMMARY_TOO_LONG
    assert "about 501 tokens, over the 500-token limit" in detail
    assert _rules(over, Policy(summary_token_limit=600)) == []


def test_breakdown_required_from_75_and_justification_from_85() -> None:
    assert _rules(result("a", confidence=ConfidenceReport(score=74))) == []
    assert _rules(result("a", confidence=ConfidenceReport(score=75))) == [ViolationRule.MISSING_BREAKDOWN]
    assert _rules(result("a", confidence=ConfidenceReport(score=80, verified=90))) == [
        ViolationRule.MISSING_BREAKDOWN
    ]
    assert _rules(result("a", confidence=ConfidenceReport(score=85, verified=90, inferred=80))) == [
        ViolationRule.MISSING_JUSTIFICATION
    ]
    assert _rules(result("a", confidence=ConfidenceReport(score=92))) == [
        ViolationRule.MISSING_BREAKDOWN,
        ViolationRule.MISSING_JUSTIFICATION,
    ]


def test_missing_confidence_unless_the_result_is_an_error_report() -> None:
    bare = ResultReport(agent="a", status=ResultStatus.SUCCESS, summary="done")
    assert _rules(bare) == [ViolationRule.MISSING_CONFIDENCE]
    assert _rules(bare.model_copy(update={"status": ResultStatus.FAILED})) == []


def test_unverified_references_and_parser_violations() -> None:
    refs = [
        Reference(item="JWT Config", location="src/config/jwt.ts:8", verified=True),
        Reference(item="Login Handler", location="src/api/auth.ts:45", verified=False),
        Reference(item="Unknown", location="src/x.ts:1"),
    ]
    report = result("a", confidence=FULL).model_copy(
        update={"key_references": refs, "violations": ["status missing"]}
    )
    found = check_result(report, Policy())
    assert [r for r, _ in found] == [ViolationRule.UNVERIFIED_REFERENCE, ViolationRule.REPORTED]
    assert "src/api/auth.ts:45" in found[0][1]


def test_violations_are_kept_on_the_agent_and_announced() -> None:
    feed = Feed()
    outcome = feed.send(result("security-auditor", confidence=ConfidenceReport(score=92)), "bg-task-a")
    announced = [d for d in decisions(outcome) if d.decision is DecisionType.CONTRACT_VIOLATION]
    assert [d.detail.split(":")[0] for d in announced] == [
        "missing_confidence_breakdown",
        "missing_confidence_justification",
    ]
    record = feed.state.agents["bg-task-a"]
    assert [v.rule for v in record.violations] == [
        ViolationRule.MISSING_BREAKDOWN,
        ViolationRule.MISSING_JUSTIFICATION,
    ]
    assert all(v.envelope_id == "in-00001" for v in record.violations)
    (agent,) = summarize(feed.state).agents
    assert agent.violations[0].startswith("missing_confidence_breakdown: confidence 92 >= 75")
    # violations do not stop aggregation
    assert record.completion is not None and record.completion.confidence == 92


def test_unverified_findings() -> None:
    """Seed 001: never submit results with hallucinated file paths (``--workdir`` marks them)."""
    findings = [
        finding("a", id="SEC-009", file="src/db/nonexistent.ts", line=999).model_copy(
            update={"verified": False}
        ),
        finding("a").model_copy(update={"verified": True}),
        finding("a", id=None, title="No place", file=None, line=None),
    ]
    found = check_result(result("a", confidence=FULL, findings=findings), Policy())
    assert found == [
        (
            ViolationRule.UNVERIFIED_REFERENCE,
            "finding 'src/db/nonexistent.ts:999' (SEC-009) could not be verified",
        )
    ]


def test_a_report_s_blockers_leave_its_group_for_review() -> None:
    """Seed 001: always report blockers that prevent completion (the orchestrator needs to know)."""
    blockers = [
        ResultBlocker(description="node_modules missing, npm audit not run", resolution="run npm install"),
        ResultBlocker(description="No staging access"),
    ]
    report = result("a", ResultStatus.PARTIAL, confidence=FULL).model_copy(update={"blockers": blockers})
    assert check_result(report, Policy()) == [
        (
            ViolationRule.UNRESOLVED_BLOCKER,
            "reported: node_modules missing, npm audit not run (resolution: run npm install)",
        ),
        (ViolationRule.UNRESOLVED_BLOCKER, "reported: No staging access"),
    ]
    said_none = report.model_copy(update={"blockers": [ResultBlocker(description="None identified")]})
    assert check_result(said_none, Policy()) == []  # as a report sent without the parser may say it
    feed = Feed()
    feed.send(result("a", confidence=FULL).model_copy(update={"blockers": blockers[1:]}), "bg-task-a")
    summary = summarize(feed.state)
    assert summary.status is not None and summary.status.value == "review"


def test_a_completion_report_s_deliverables_not_found_are_violations() -> None:
    """Seed 003, completion: validate deliverables exist (an adapter with ``--workdir`` checks them)."""
    report = completion("bg-task-a").model_copy(
        update={
            "deliverables_verified": [
                {"path": "SECURITY_ANALYSIS.md", "verified": True},
                {"path": "AUTH_REVIEW.md", "verified": False},
                {"path": 7, "verified": False},  # hand-written nonsense is not read
                "junk",
            ]
        }
    )
    feed = Feed()
    outcome = feed.send(report, "bg-task-a")
    assert [d.detail for d in decisions(outcome) if d.decision is DecisionType.CONTRACT_VIOLATION] == [
        "unverified_reference: deliverable 'AUTH_REVIEW.md' not found"
    ]
    assert [v.rule for v in feed.state.agents["bg-task-a"].violations] == [ViolationRule.UNVERIFIED_REFERENCE]


def test_a_breakdown_must_add_up() -> None:
    """Seed 001: combined_confidence = (verified + inferred) / 2 (agents round it: one point either way)."""
    assert _rules(result("a", confidence=FULL.model_copy(update={"score": 95}))) == []
    off = FULL.model_copy(update={"score": 80, "verified": 40, "inferred": 30})
    assert check_result(result("a", confidence=off), Policy()) == [
        (
            ViolationRule.INCONSISTENT_BREAKDOWN,
            "combined confidence 80 is not (verified 40 + inferred 30) / 2 = 35",
        )
    ]
    stated = FULL.model_copy(update={"score": 80, "verified": 90, "inferred": 70, "combined": 80})
    assert _rules(result("a", confidence=stated)) == []


def test_low_confidence_needs_an_uncertainty_section() -> None:
    """Seed 001, cross-verification triggers: confidence < 70 -> include an "Uncertainty" section."""
    low = ConfidenceReport(score=55, justification="Speculation")
    assert _rules(result("a", confidence=low)) == [ViolationRule.MISSING_UNCERTAINTY]
    said = result("a", confidence=low).model_copy(
        update={"sections": [Section(title="Uncertainty", text="Not sure about the auth flow.")]}
    )
    assert _rules(said) == []
    within = ConfidenceReport(score=55, justification="Speculation\n#### Uncertainty\nNot sure about the ORM")
    assert _rules(result("a", confidence=within)) == []
    assert _rules(result("a", confidence=ConfidenceReport(score=70))) == []
