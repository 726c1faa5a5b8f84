"""Every example of the specification parses into its model, field by field.

``tests/data/seed_000_signals.md`` and ``tests/data/seed_002_results.md`` are verbatim copies of seeds 000
and 002, parsed whole: the examples must come out as signals and reports, the templates with
``<placeholders>`` as nothing (a template is no signal), and nothing else (inline mentions, grep
commands, ABNF) may be taken for a block.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from agents.parser import ErrorItem, Found, ResultItem, SignalItem, parse_text
from agents.report import parse_report
from bus.envelope import EnvelopeType
from bus.findings import Severity
from bus.results import ResultReport, ResultStatus
from bus.signals import (
    BlockerType,
    ClarificationNeeded,
    CompletionReport,
    CompletionStatus,
    DelegateWork,
    Independence,
    Priority,
    StopReason,
    StopWork,
)

DATA = Path(__file__).parent / "data"
EST = timezone(timedelta(hours=-5))


@pytest.fixture(scope="module")
def signals() -> list[Found]:
    return parse_text((DATA / "seed_000_signals.md").read_bytes())


@pytest.fixture(scope="module")
def results() -> list[Found]:
    return parse_text((DATA / "seed_002_results.md").read_bytes())


def _signal(items: list[Found], line: int) -> SignalItem:
    item = next(i for i in items if i.line == line)
    assert isinstance(item, SignalItem), item
    return item


def _report(items: list[Found], agent: str) -> ResultReport:
    item = next(i for i in items if isinstance(i, ResultItem) and i.report.agent == agent)
    assert isinstance(item, ResultItem)
    return item.report


def test_seed_000_yields_exactly_the_examples(signals: list[Found]) -> None:
    kinds = [
        (i.line, type(i).__name__, i.type.value)
        for i in signals
        if isinstance(i, SignalItem | ErrorItem) and i.type
    ]
    assert len(kinds) == len(signals)
    assert kinds == [
        (118, "SignalItem", "CLARIFICATION_NEEDED"),
        (225, "SignalItem", "STOP_WORK"),
        (251, "SignalItem", "STOP_WORK"),
        (357, "SignalItem", "DELEGATE_WORK"),
        (383, "SignalItem", "DELEGATE_WORK"),
        (513, "SignalItem", "COMPLETION_REPORT"),
        (642, "SignalItem", "STOP_WORK"),
        (698, "SignalItem", "STOP_WORK"),
    ]
    data = (DATA / "seed_000_signals.md").read_bytes()
    for item in signals:
        assert data[item.offset : item.offset + 1] == b"["
        assert data.count(b"\n", 0, item.offset) + 1 == item.line


def test_templates_filled_in_by_half_are_errors_naming_the_fields() -> None:
    # an agent that began to fill a template in sends a signal: it is an error, reported as such
    data = (DATA / "seed_000_signals.md").read_bytes().replace(b"agent_id: <", b"agent_id: bg-1 <")
    errors = {i.line: i.message for i in parse_text(data) if isinstance(i, ErrorItem)}
    bad_time = "field 'timestamp': Input should be a valid datetime or date, invalid character in year"
    assert errors[98] == f"CLARIFICATION_NEEDED block at line 98: {bad_time}"
    assert errors[209] == (
        f"STOP_WORK block at line 209: {bad_time}; "
        "field 'stop_reason': Input should be 'blocker', 'error' or 'completion'; "
        "field 'blocker_type': Input should be 'missing_info', 'external_dependency', 'error' or 'resource_limit'"
    )
    assert "field 'independence'" in errors[341]
    assert "field 'priority': Input should be 'P0', 'P1' or 'P2'" in errors[341]
    assert "field 'status': Input should be 'success', 'partial_success' or 'failed'" in errors[497]


def test_clarification_example(signals: list[Found]) -> None:
    item = _signal(signals, 118)
    assert item.type is EnvelopeType.CLARIFICATION_NEEDED
    signal = item.payload
    assert isinstance(signal, ClarificationNeeded)
    assert signal.agent_id == "bg-task-abc123"
    assert signal.timestamp == datetime(2026, 1, 11, 8, 45, tzinfo=EST)
    assert signal.blocked_at == "Analyzing authentication patterns in src/auth/"
    assert signal.reason == "Multiple authentication strategies found, unclear which to analyze"
    q1, q2 = signal.questions
    assert q1.question_id == "Q1"
    assert q1.text == "Should I analyze OAuth2, JWT, or both authentication strategies?"
    assert q1.context == "Found separate implementations in src/auth/oauth.ts and src/auth/jwt.ts"
    assert q2.question_id == "Q2"
    assert q2.text == "What security framework version should I assume (2.0 or 3.0)?"
    assert q2.context == "Dependencies show both @auth/core@2.x and @auth/core@3.x-beta"
    assert signal.can_resume_with == (
        "Answers specifying which auth strategies to analyze and framework version assumptions"
    )
    assert (
        signal.current_state == "Completed secret scanning (found 0 hardcoded secrets), started auth analysis"
    )


def test_stop_work_missing_dependency_example(signals: list[Found]) -> None:
    signal = _signal(signals, 225).payload
    assert isinstance(signal, StopWork)
    assert signal.agent_id == "bg-task-def456"
    assert signal.timestamp == datetime(2026, 1, 11, 9, 15, tzinfo=EST)
    assert signal.stop_reason is StopReason.BLOCKER
    assert signal.blocker_type is BlockerType.EXTERNAL_DEPENDENCY
    assert signal.details == "Security analysis requires running npm audit, but node_modules is missing"
    assert signal.completed_work == (
        "✓ Scanned for hardcoded secrets (0 found)\n"
        "✓ Analyzed SQL queries (no injection risks)\n"
        "✓ Reviewed authentication (see AUTH_ANALYSIS.md)\n"
    )
    assert signal.blocked_work == (
        "✗ Dependency vulnerability scan (requires npm audit)\n✗ License compliance check (requires npm ls)\n"
    )
    assert signal.state_snapshot == (
        "Files analyzed: 47/120\n"
        "Reports generated: AUTH_ANALYSIS.md, SQL_REVIEW.md\n"
        "Current directory: /Users/bln/play/agentic-primer/src\n"
    )
    assert signal.resume_requirements == (
        'Run: npm install (in parent session)\nThen resume with: "Dependencies installed, continue with npm audit scan"\n'
    )
    assert signal.error_recovery is None


def test_stop_work_resource_limit_example(signals: list[Found]) -> None:
    signal = _signal(signals, 251).payload
    assert isinstance(signal, StopWork)
    assert signal.agent_id == "bg-task-ghi789"
    assert signal.timestamp == datetime(2026, 1, 11, 9, 30, tzinfo=EST)
    assert signal.stop_reason is StopReason.BLOCKER
    assert signal.blocker_type is BlockerType.RESOURCE_LIMIT
    assert signal.details == "Analysis of 10,000+ files will exceed reasonable task duration"
    assert signal.completed_work is not None
    assert signal.completed_work.splitlines() == [
        "✓ Analyzed file structure (10,247 files discovered)",
        "✓ Identified file types (47% .ts, 23% .md, 30% other)",
        "✓ Created analysis strategy (see ANALYSIS_PLAN.md)",
    ]
    assert signal.blocked_work == "✗ Full file-by-file analysis (estimated 6+ hours)\n"
    assert signal.state_snapshot is not None
    assert signal.state_snapshot.splitlines()[2] == "Recommendation: Use multiple parallel agents"
    assert signal.resume_requirements is not None
    assert signal.resume_requirements.splitlines() == [
        "Option 1: Reduce scope (specify file patterns to exclude)",
        "Option 2: Delegate to multiple agents (see DELEGATE_WORK protocol)",
        "Option 3: Continue with single agent (accept 6+ hour runtime)",
    ]


def test_stop_work_error_example_without_timestamp(signals: list[Found]) -> None:
    signal = _signal(signals, 642).payload
    assert isinstance(signal, StopWork)
    assert signal.agent_id == "bg-task-stu901"
    assert signal.timestamp is None
    assert signal.stop_reason is StopReason.ERROR
    assert signal.blocker_type is BlockerType.ERROR
    assert signal.details == (
        "Unexpected error during analysis:\n"
        "TypeError: Cannot read property 'length' of undefined\n"
        "at analyzeFile (/tmp/analysis.js:142)\n"
    )
    # `[what was finished before error]` is a YAML flow list; the Text field folds it
    assert signal.completed_work == "what was finished before error"
    assert signal.state_snapshot == "checkpoint before error"
    assert signal.blocked_work is None
    assert signal.resume_requirements is None
    assert signal.error_recovery == (
        "Potential fixes:\n"
        "1. Skip problematic file and continue\n"
        "2. Fix error in analysis script\n"
        "3. Restart analysis from checkpoint\n"
    )


def test_stop_work_timeout_example(signals: list[Found]) -> None:
    signal = _signal(signals, 698).payload
    assert isinstance(signal, StopWork)
    assert signal.agent_id == "bg-task-timeout"
    assert signal.timestamp is None
    assert signal.stop_reason is StopReason.BLOCKER
    assert signal.blocker_type is BlockerType.RESOURCE_LIMIT
    assert signal.details == "Task exceeding expected duration (4h vs 1h estimate)"
    assert signal.completed_work == "progress so far"
    assert signal.state_snapshot == "checkpoint"
    assert signal.resume_requirements == (
        "Option 1: Continue (accept longer runtime)\n"
        "Option 2: Reduce scope (specify what to skip)\n"
        "Option 3: Delegate remaining work to new agent\n"
    )


def test_delegate_work_parallel_example(signals: list[Found]) -> None:
    signal = _signal(signals, 357).payload
    assert isinstance(signal, DelegateWork)
    assert signal.agent_id == "bg-task-jkl012"
    assert signal.timestamp == datetime(2026, 1, 11, 10, 0, tzinfo=EST)
    assert signal.delegation_reason == (
        "Discovered large-scale refactoring opportunity that should run in parallel"
    )
    assert signal.new_task_description == (
        "Refactor authentication module to use unified AuthProvider pattern\n"
        "- Consolidate OAuth2 and JWT implementations\n"
        "- Create single AuthProvider interface\n"
        "- Update all auth consumers to use new interface\n"
    )
    assert signal.independence is Independence.CAN_PROCEED_PARALLEL
    assert signal.priority is Priority.P1
    assert signal.context_required is not None
    assert signal.context_required.splitlines()[2] == (
        "- Do NOT modify files in src/auth/ (this agent will continue analyzing)"
    )
    assert signal.coordination == (
        "This agent: Continue security analysis of remaining modules\n"
        "New agent: Refactor auth module (separate work, no conflicts)\n"
        "Sync point: Both complete before final security report\n"
    )
    assert signal.estimated_duration == "2-3 hours"


def test_delegate_work_blocking_example(signals: list[Found]) -> None:
    signal = _signal(signals, 383).payload
    assert isinstance(signal, DelegateWork)
    assert signal.agent_id == "bg-task-mno345"
    assert signal.timestamp == datetime(2026, 1, 11, 10, 30, tzinfo=EST)
    assert signal.delegation_reason == "Discovered missing test infrastructure needed before security testing"
    assert signal.new_task_description.splitlines() == [
        "Set up security testing infrastructure:",
        "- Install and configure OWASP ZAP",
        "- Create test fixtures for auth scenarios",
        "- Set up mock API server",
        "- Document testing workflow",
    ]
    assert signal.independence is Independence.BLOCKS_CURRENT_WORK
    assert signal.priority is Priority.P0
    assert signal.context_required is not None
    assert signal.context_required.splitlines() == [
        "- Security analysis plan (see SECURITY_PLAN.md)",
        "- Required test scenarios (see TEST_SCENARIOS.md)",
        "- Target system architecture (see ARCHITECTURE.md)",
    ]
    assert signal.coordination is not None
    assert signal.coordination.splitlines()[2] == (
        'Resume: When new agent completes, resume with "Infrastructure ready, continue testing"'
    )
    assert signal.estimated_duration == "1-2 hours"


def test_completion_report_example(signals: list[Found]) -> None:
    signal = _signal(signals, 513).payload
    assert isinstance(signal, CompletionReport)
    assert signal.agent_id == "bg-task-pqr678"
    assert signal.timestamp == datetime(2026, 1, 11, 12, 0, tzinfo=EST)
    assert signal.status is CompletionStatus.SUCCESS
    assert signal.deliverables is not None
    assert signal.deliverables.splitlines() == [
        "Generated files:",
        "- SECURITY_ANALYSIS.md (comprehensive report)",
        "- SECURITY_FINDINGS.jsonl (structured findings, 47 entries)",
        "- REMEDIATION_PLAN.md (prioritized action items)",
        "- AUTH_REFACTOR_PROPOSAL.md (architecture recommendations)",
    ]
    assert signal.summary is not None
    assert (
        signal.summary.splitlines()[0]
        == "Completed comprehensive security analysis of agentic-primer codebase:"
    )
    assert signal.summary.splitlines()[-1] == "✓ Analyzed dependency security (0 known CVEs)"
    assert signal.metrics_achieved is not None
    assert signal.metrics_achieved.splitlines()[1] == "✓ Scan for hardcoded secrets → 0 found"
    assert signal.issues_encountered is not None
    assert (
        signal.issues_encountered.splitlines()[0]
        == "1. Missing node_modules → STOPPED, resolved by parent, resumed"
    )
    assert signal.recommendations is not None
    assert signal.recommendations.splitlines()[1] == (
        "1. [P1] Implement auth refactoring proposal (see AUTH_REFACTOR_PROPOSAL.md)"
    )
    assert signal.total_duration == "3h 45m (including 1 stop/resume cycle)"


def test_seed_002_yields_the_four_examples_and_its_two_templates_as_nothing(results: list[Found]) -> None:
    # the templates (lines 42 and 325) are reports of '[Agent Name]': an agent quoting them reports nothing
    summary = [
        (i.line, i.report.agent if isinstance(i, ResultItem) else "error")
        for i in results
        if isinstance(i, (ResultItem, ErrorItem))
    ]
    assert summary == [
        (78, "Code Explorer"),
        (127, "Code Architect"),
        (187, "Security Auditor"),
        (260, "Backend Specialist"),
    ]


def test_code_explorer_example(results: list[Found]) -> None:
    report = _report(results, "Code Explorer")
    assert report.status is ResultStatus.SUCCESS
    assert report.summary == (
        "Traced authentication flow from login endpoint through JWT validation to session creation."
    )
    assert [s.title for s in report.sections] == [
        "Entry Points",
        "Execution Flow",
        "Architecture Patterns",
        "Dependencies",
    ]
    entry = report.sections[0].tables[0]
    assert entry.headers == ["Entry", "File:Line", "Type"]
    assert entry.rows == [
        ["POST /auth/login", "src/api/auth.ts:45", "REST endpoint"],
        ["POST /auth/refresh", "src/api/auth.ts:89", "REST endpoint"],
    ]
    assert report.sections[1].text.splitlines()[0] == "1. Request → `src/api/auth.ts:45` (loginHandler)"
    assert (
        report.sections[3].text
        == "- Internal: UserRepository, SessionService\n- External: bcrypt, jsonwebtoken"
    )
    assert report.findings == []  # an entry-point table is not an issue table
    assert [(r.item, r.location, r.relevance, r.file, r.line) for r in report.key_references] == [
        ("AuthService", "src/services/auth.ts:8", "Core authentication logic", "src/services/auth.ts", 8),
        ("JWTMiddleware", "src/middleware/jwt.ts:15", "Token validation", "src/middleware/jwt.ts", 15),
        ("UserRepository", "src/repositories/user.ts:5", "User data access", "src/repositories/user.ts", 5),
    ]
    assert report.confidence is not None
    assert report.confidence.score == 92
    assert report.confidence.justification == "Clear patterns, all paths traced to completion"
    assert report.next_steps == [
        "Read `src/services/auth.ts` for implementation details",
        "Review `src/config/jwt.ts` for token configuration",
    ]
    assert report.issues == []
    assert report.blockers == []
    assert report.error is None
    assert report.violations == []


def test_code_architect_example(results: list[Found]) -> None:
    report = _report(results, "Code Architect")
    assert report.status is ResultStatus.SUCCESS
    assert report.summary.startswith("Designed OAuth integration following existing auth patterns.")
    titles = [s.title for s in report.sections]
    assert titles == [
        "Pattern Analysis",
        "Recommended Architecture",
        "Implementation Map",
        "Build Sequence",
        "Trade-offs Considered",
    ]
    implementation = report.sections[2].tables[0]
    assert implementation.headers == ["Component", "File", "Action"]
    assert implementation.rows[2] == ["AuthService", "src/services/auth.ts:145", "Modify (add OAuth methods)"]
    assert "**Approach**: Extend existing AuthService" in report.sections[1].text
    assert report.sections[4].text == (
        "- Separate OAuth microservice: Rejected (overhead for this scale)\n"
        "- Direct provider SDK: Rejected (less abstraction)"
    )
    assert [r.item for r in report.key_references] == ["AuthService", "JWTConfig", "UserModel"]
    assert report.key_references[2].file == "src/models/user.ts"
    assert report.key_references[2].line == 12
    assert report.confidence is not None
    assert report.confidence.score == 88
    assert report.confidence.justification == "Clear patterns, one assumption about user model"
    assert report.findings == []
    assert report.next_steps == []


def test_security_auditor_example_with_three_findings(results: list[Found]) -> None:
    report = _report(results, "Security Auditor")
    assert report.status is ResultStatus.PARTIAL
    assert report.summary == "Reviewed authentication module. Found 2 critical issues and 3 recommendations."
    found = [
        (f.id, f.title, f.file, f.line, f.severity, f.confidence, f.category, f.agent)
        for f in report.findings
    ]
    assert found == [
        (
            "SEC-001",
            "Hardcoded JWT secret",
            "src/config/jwt.ts",
            8,
            Severity.CRITICAL,
            98,
            "SEC",
            "Security Auditor",
        ),
        (
            "SEC-002",
            "Missing rate limiting",
            "src/api/auth.ts",
            45,
            Severity.CRITICAL,
            95,
            "SEC",
            "Security Auditor",
        ),
        (
            "SEC-003",
            "Verbose error messages",
            "src/services/auth.ts",
            89,
            Severity.IMPORTANT,
            85,
            "SEC",
            "Security Auditor",
        ),
    ]
    evidence = report.findings[0].evidence
    assert evidence is not None
    assert evidence.startswith("**SEC-001: Hardcoded JWT Secret**\n```typescript\n// src/config/jwt.ts:8")
    assert evidence.endswith("**Fix**: Use environment variable `process.env.JWT_SECRET`")
    # the ```typescript snippets do not cut the Issue Details section
    assert [s.title for s in report.sections] == [
        "Issues Detected",
        "Issue Details",
        "Compliance Check",
        "Severity Summary",
    ]
    assert "**SEC-003: Verbose Error Messages**" in report.sections[1].text
    assert report.sections[2].tables[0].rows[0] == ["OWASP A07 Auth Failures", "FAIL", "SEC-001, SEC-002"]
    assert report.sections[3].text == "- Critical: 2\n- Important: 1\n- Minor: 0"
    assert [(r.item, r.file, r.line) for r in report.key_references] == [
        ("JWT Config", "src/config/jwt.ts", 8),
        ("Login Handler", "src/api/auth.ts", 45),
    ]
    assert report.confidence is not None
    assert report.confidence.score == 94
    assert report.confidence.justification == "Issues verified with code evidence"
    assert report.next_steps == [
        "Fix SEC-001 immediately (security critical)",
        "Add rate limiting before deployment",
        "Review all error messages for information disclosure",
    ]
    assert report.violations == []


def test_backend_specialist_example(results: list[Found]) -> None:
    report = _report(results, "Backend Specialist")
    assert report.status is ResultStatus.SUCCESS
    assert report.summary == (
        "Implemented UserService with registration, login, and password reset. All tests passing."
    )
    assert [s.title for s in report.sections] == [
        "Files Created",
        "Files Modified",
        "Test Results",
        "Implementation Notes",
    ]
    created = report.sections[0].tables[0]
    assert created.rows == [
        ["src/services/user.ts", "User business logic", "145"],
        ["src/repositories/user.ts", "Data access", "78"],
        ["tests/services/user.test.ts", "Unit tests", "234"],
    ]
    assert report.sections[1].tables[0].rows[0] == ["src/routes/index.ts:45", "Added user routes", "+5"]
    tests = report.sections[2].text
    assert tests.startswith("```\nPASS tests/services/user.test.ts")
    assert "✓ should create user with hashed password (45ms)" in tests
    assert tests.endswith("Coverage: 94%\n```")
    assert report.sections[3].text.splitlines()[1] == "- Used bcrypt with cost factor 12 (matches existing)"
    assert [(r.item, r.line) for r in report.key_references] == [
        ("UserService", 8),
        ("createUser", 45),
        ("login", 89),
    ]
    assert report.confidence is not None
    assert report.confidence.score == 96
    assert report.confidence.justification == "Tests passing, patterns followed"
    assert report.next_steps == [
        "Review implementation for approval",
        "Run integration tests if available",
        "Update API documentation",
    ]
    assert report.findings == []


def test_error_result_format() -> None:
    lines = (DATA / "seed_002_results.md").read_text().splitlines()
    report = parse_report("\n".join(lines[324:355]))  # the template, from its heading to its fence
    assert report.status is ResultStatus.FAILED
    assert report.summary == "Unable to complete task due to [error category]."
    assert report.error is not None
    assert report.error.type == "[ErrorType]"
    assert report.error.message == "[Error message]"
    assert report.error.occurred_at == "[file:line or step]"
    assert report.error.recoverable is None  # "[true/false]" is neither
    assert report.violations == ["Error Details: Recoverable '[true/false]' is neither true nor false"]
    assert report.attempted_actions == [
        "[What was tried first]",
        "[What was tried second]",
        "[Final attempt before failure]",
    ]
    assert report.root_cause == "[Analysis of why the error occurred]"
    assert report.recovery_options == ["[Option 1]: [Description]", "[Option 2]: [Description]"]
    assert [(b.description, b.resolution) for b in report.blockers] == [
        ("[Description of what's blocking progress]", "[What's needed to unblock]")
    ]
    assert report.sections == []
