"""Result-contract checks (seed 001, rules for subagents) on a RESULT report.

A violation does not reject the report: the result is aggregated as usual, and the violation is kept on
the agent's record (visible in the status view) and announced as a ``contract_violation`` decision.
"""

from __future__ import annotations

from math import ceil

from bus.results import ResultReport, ResultStatus, says_nothing
from coordinator.policy import Policy
from coordinator.state import ViolationRule

__all__ = [
    "BREAKDOWN_THRESHOLD",
    "JUSTIFICATION_THRESHOLD",
    "UNCERTAINTY_THRESHOLD",
    "check_result",
    "estimate_tokens",
]

BREAKDOWN_THRESHOLD = 75.0
"""At or above this confidence the verified/inferred breakdown is required (L1)."""
JUSTIFICATION_THRESHOLD = 85.0
"""At or above this confidence the ``Confidence Justification`` section is required (L2)."""
UNCERTAINTY_THRESHOLD = 70.0
"""Below this confidence an ``Uncertainty`` section is required (L2, cross-verification triggers)."""
BREAKDOWN_TOLERANCE = 1.0
"""How far the score may be from ``(verified + inferred) / 2`` (agents round it)."""


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
    if confidence.verified is not None and confidence.inferred is not None:
        combined = (confidence.verified + confidence.inferred) / 2
        stated = confidence.combined if confidence.combined is not None else score
        if abs(stated - combined) > BREAKDOWN_TOLERANCE:
            found.append(
                (
                    ViolationRule.INCONSISTENT_BREAKDOWN,
                    f"combined confidence {stated:g} is not (verified {confidence.verified:g} + inferred "
                    f"{confidence.inferred:g}) / 2 = {combined:g}",
                )
            )
    if score < UNCERTAINTY_THRESHOLD and not _states_uncertainty(report):
        found.append(
            (
                ViolationRule.MISSING_UNCERTAINTY,
                f"confidence {score:g} < {UNCERTAINTY_THRESHOLD:g} without an Uncertainty section",
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


def _states_uncertainty(report: ResultReport) -> bool:
    """An ``Uncertainty`` section, or (seed 001: flag uncertainty explicitly) the word in the confidence
    section, which holds its own subsections (``#### Uncertainty``)."""
    said = report.confidence.justification if report.confidence is not None else ""
    return "uncertain" in said.casefold() or any("uncertain" in s.title.casefold() for s in report.sections)


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
        if not says_nothing(b.description)  # "None identified" (a report sent without the parser)
    ]
