"""Directives render the exact resume prompts of seed 000."""

from __future__ import annotations

from bus.directives import (
    AnswerItem,
    BlockerResolved,
    ClarificationResponse,
    DelegationApproved,
    DelegationDenied,
    ErrorRecovery,
    RecoveryOption,
)

SEED_CLARIFICATION = """## CLARIFICATION RESPONSE

Your questions have been answered:

Q1: Should I analyze OAuth2, JWT, or both authentication strategies?
A1: Analyze both OAuth2 and JWT. They are both in active use.

Q2: What security framework version should I assume (2.0 or 3.0)?
A2: Assume 3.0-beta. We are migrating to 3.x.

## RESUME INSTRUCTIONS
Continue from: Analyzing authentication patterns in src/auth/
Current state: Completed secret scanning, started auth analysis
Next step: Analyze both OAuth2 and JWT implementations with 3.0-beta assumptions"""

SEED_BLOCKER = """## BLOCKER RESOLVED

Issue: node_modules missing
Resolution: Ran npm install successfully

## STATE RESTORATION
Files analyzed: 47/120
Reports generated: AUTH_ANALYSIS.md, SQL_REVIEW.md
Working directory: /Users/bln/play/agentic-primer/src

## RESUME INSTRUCTIONS
Continue with dependency vulnerability scan (npm audit)
Then proceed to license compliance check (npm ls)"""

SEED_APPROVED = """## DELEGATION APPROVED

New agent launched: bg-task-xyz789
Task: Refactor authentication module
Coordination: Proceed with your security analysis, new agent handling refactor

## RESUME INSTRUCTIONS
Continue security analysis of remaining modules
Avoid src/auth/ (being refactored by bg-task-xyz789)"""

SEED_DENIED = """## DELEGATION DENIED

Reason: Refactoring should be deferred until security analysis complete
Alternative: Document refactoring recommendations in final report

## RESUME INSTRUCTIONS
Continue security analysis without refactoring
Add refactoring recommendations to SECURITY_RECOMMENDATIONS.md"""

SEED_ERROR_RECOVERY = """## ERROR RECOVERY

Skip the problematic file (analysis.js:142) and continue with remaining files.
Log the skipped file to SKIPPED_FILES.md for manual review."""


def test_clarification_response_is_the_seed_prompt() -> None:
    directive = ClarificationResponse(
        answers=[
            AnswerItem(
                question_id="Q1",
                question="Should I analyze OAuth2, JWT, or both authentication strategies?",
                answer="Analyze both OAuth2 and JWT. They are both in active use.",
            ),
            AnswerItem(
                question_id="Q2",
                question="What security framework version should I assume (2.0 or 3.0)?",
                answer="Assume 3.0-beta. We are migrating to 3.x.",
            ),
        ],
        continue_from="Analyzing authentication patterns in src/auth/",
        current_state="Completed secret scanning, started auth analysis",
        next_step="Analyze both OAuth2 and JWT implementations with 3.0-beta assumptions",
    )
    assert directive.render() == SEED_CLARIFICATION


def test_answer_label_for_ids_that_are_not_numbered() -> None:
    assert AnswerItem(question_id="Q7", answer="x").answer_label == "A7"
    assert AnswerItem(question_id="scope", answer="x").answer_label == "A(scope)"


def test_blocker_resolved_is_the_seed_prompt() -> None:
    directive = BlockerResolved(
        issue="node_modules missing",
        resolution="Ran npm install successfully",
        state_restoration="Files analyzed: 47/120\nReports generated: AUTH_ANALYSIS.md, SQL_REVIEW.md\n"
        "Working directory: /Users/bln/play/agentic-primer/src\n",
        resume_instructions="Continue with dependency vulnerability scan (npm audit)\n"
        "Then proceed to license compliance check (npm ls)",
    )
    assert directive.render() == SEED_BLOCKER


def test_delegation_approved_and_denied_are_the_seed_prompts() -> None:
    approved = DelegationApproved(
        request_id="dlg-1",
        new_agent_id="bg-task-xyz789",
        task="Refactor authentication module",
        coordination="Proceed with your security analysis, new agent handling refactor",
        resume_instructions="Continue security analysis of remaining modules\n"
        "Avoid src/auth/ (being refactored by bg-task-xyz789)",
    )
    assert approved.render() == SEED_APPROVED
    denied = DelegationDenied(
        request_id="dlg-1",
        reason="Refactoring should be deferred until security analysis complete",
        alternative="Document refactoring recommendations in final report",
        resume_instructions="Continue security analysis without refactoring\n"
        "Add refactoring recommendations to SECURITY_RECOMMENDATIONS.md",
    )
    assert denied.render() == SEED_DENIED


def test_error_recovery_is_the_seed_prompt() -> None:
    directive = ErrorRecovery(
        option=RecoveryOption.SKIP_AND_CONTINUE,
        instructions="Skip the problematic file (analysis.js:142) and continue with remaining files.\n"
        "Log the skipped file to SKIPPED_FILES.md for manual review.",
    )
    assert directive.render() == SEED_ERROR_RECOVERY
