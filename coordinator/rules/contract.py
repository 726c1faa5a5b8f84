"""Result-contract checks (seed 001, rules for subagents) on a RESULT report.

A violation does not reject the report: the result is aggregated as usual, and the violation is kept on
the agent's record (visible in the status view) and announced as a ``contract_violation`` decision.
"""

from __future__ import annotations

from math import ceil

from bus.results import ResultReport, ResultStatus
from coordinator.policy import Policy
from coordinator.state import ViolationRule

__all__ = ["BREAKDOWN_THRESHOLD", "JUSTIFICATION_THRESHOLD", "check_result", "estimate_tokens"]

BREAKDOWN_THRESHOLD = 75.0
"""At or above this confidence the verified/inferred breakdown is required (L1)."""
JUSTIFICATION_THRESHOLD = 85.0
"""At or above this confidence the ``Confidence Justification`` section is required (L2)."""


def estimate_tokens(text: str) -> int:
    """A token estimate without a tokenizer: one token per four characters, rounded up.

    Four characters per token is the usual average for English prose under the common BPE tokenizers;
    the ~500-token summary limit of the contract is itself approximate, so the estimate need not be exact.
    """
    return ceil(len(text.strip()) / 4)


def check_result(report: ResultReport, policy: Policy) -> list[tuple[ViolationRule, str]]:
    """Every contract violation of one report, in a fixed order."""
    found = _summary(report, policy) + _confidence(report) + _references(report) + _blockers(report)
    found += [(ViolationRule.REPORTED, text) for text in report.violations]
    return found


def _summary(report: ResultReport, policy: Policy) -> list[tuple[ViolationRule, str]]:
    tokens = estimate_tokens(report.summary)
    if tokens <= policy.summary_token_limit:
        return []
    return [
        (
            ViolationRule.SUMMARY_TOO_LONG,
            f"summary is about {tokens} tokens, over the {policy.summary_token_limit}-token limit",
        )
    ]


def _confidence(report: ResultReport) -> list[tuple[ViolationRule, str]]:
    confidence = report.confidence
    if confidence is None:
        if report.status is ResultStatus.FAILED:
            return []  # the error result format has no confidence section
        return [(ViolationRule.MISSING_CONFIDENCE, "no confidence score")]
    found: list[tuple[ViolationRule, str]] = []
    score = confidence.score
    if score >= BREAKDOWN_THRESHOLD and (confidence.verified is None or confidence.inferred is None):
        found.append(
            (
                ViolationRule.MISSING_BREAKDOWN,
                f"confidence {score:g} >= {BREAKDOWN_THRESHOLD:g} without verified/inferred breakdown",
            )
        )
    if score >= JUSTIFICATION_THRESHOLD and confidence.detailed is None:
        found.append(
            (
                ViolationRule.MISSING_JUSTIFICATION,
                f"confidence {score:g} >= {JUSTIFICATION_THRESHOLD:g} "
                "without a Confidence Justification section",
            )
        )
    return found


def _references(report: ResultReport) -> list[tuple[ViolationRule, str]]:
    """The Key References and findings whose place an adapter with ``--workdir`` did not find (seed 001:
    never submit results with hallucinated file paths)."""
    rule = ViolationRule.UNVERIFIED_REFERENCE
    found = [
        (rule, f"reference {ref.location!r} ({ref.item}) could not be verified")
        for ref in report.key_references
        if ref.verified is False
    ]
    found += [
        (rule, f"finding {f.location!r} ({f.id or f.title}) could not be verified")
        for f in report.findings
        if f.verified is False
    ]
    return found


def _blockers(report: ResultReport) -> list[tuple[ViolationRule, str]]:
    """The report's Blockers: left unresolved by its agent, which has finished (seed 001: the
    orchestrator needs to know), so its group is reviewed."""
    return [
        (
            ViolationRule.UNRESOLVED_BLOCKER,
            f"reported: {b.description.strip()}"
            + (f" (resolution: {b.resolution.strip()})" if b.resolution.strip() else ""),
        )
        for b in report.blockers
    ]
