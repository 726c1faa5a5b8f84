"""Result reports: sections, tables, findings, confidence, issues, blockers and the error format."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.cells import split_location
from agents.parser import ErrorItem, parse_text
from agents.report import ReportError, parse_report
from bus.findings import Severity
from bus.results import ResultStatus
from coordinator.policy import Policy
from coordinator.rules import merge_findings


def report(*sections: str, agent: str = "QA Engineer") -> str:
    head = f"## {agent} Result\n\n### Status\nSUCCESS\n\n### Summary\nChecked the login module.\n\n"
    return head + "\n".join(sections)


def test_minimal_report() -> None:
    parsed = parse_report(report())
    assert parsed.agent == "QA Engineer"
    assert parsed.status is ResultStatus.SUCCESS
    assert parsed.summary == "Checked the login module."
    assert parsed.sections == []
    assert parsed.findings == []
    assert parsed.issues == []
    assert parsed.confidence is None
    assert parsed.violations == []


@pytest.mark.parametrize(
    "status", ["success", "Partial", "**FAILED**", "`PARTIAL`", "FAILED - tests crashed"]
)
def test_status_is_case_insensitive_and_may_carry_markup(status: str) -> None:
    text = report().replace("SUCCESS", status)
    assert parse_report(text).status.value == status.strip("*`").split()[0].upper()


@pytest.mark.parametrize(
    ("status", "word"),
    [("PARTIAL_SUCCESS", "PARTIAL"), ("partial-success", "PARTIAL"), ("Partial Success", "PARTIAL")],
)
def test_a_status_word_joined_to_the_next_by_an_underscore_is_read(status: str, word: str) -> None:
    """Spaces, hyphens and underscores alike, as in a signal's values: `PARTIAL_SUCCESS`, a completion
    report's word, is the report's PARTIAL, not a report that does not reach the parent."""
    assert parse_report(report().replace("SUCCESS", status)).status.value == word


@pytest.mark.parametrize(
    "status", ["✅ SUCCESS", "❌ FAILED", "⚠️ PARTIAL", "**✅ Success**", "SUCCESS ✅", "🟢 `PARTIAL`: 3 of 4"]
)
def test_status_may_carry_emoji(status: str) -> None:
    """Agents mark a status with an emoji as often as with emphasis: the report must not be lost for it."""
    word = next(w for w in ("SUCCESS", "PARTIAL", "FAILED") if w in status.upper())
    assert parse_report(report().replace("SUCCESS", status)).status.value == word
    labelled = f"## A Result\n**Status:** {status}\n**Summary:** Checked.\n"
    heading = f"## A Result\n### Status: {status}\n### Summary\nok\n"
    if ":" not in status:  # a label's value is the status word alone, or prose
        assert parse_report(labelled).status.value == parse_report(heading).status.value == word


@pytest.mark.parametrize(
    "head",
    [
        "## A Result\n### ✅ Status\nPARTIAL\n### 📋 Summary:\nChecked.\n",
        "## A Result\n**✅ Status:** PARTIAL\n**📋 Summary:** Checked.\n",
        "## A Result\n- ✅ **Status:** PARTIAL\n- 📋 **Summary:** Checked.\n",
        "## A Result\n### ⚠️ Status: PARTIAL\n### Summary 📋\nChecked.\n",
    ],
)
def test_section_titles_and_labels_may_carry_emoji(head: str) -> None:
    table = (
        "| ID | Issue | File:Line | Severity |\n|--|--|--|--|\n| SEC-1 | x | `a.py:3` | 🔴 **Critical** |\n"
    )
    parsed = parse_report(f"{head}### 🔍 Findings\n{table}")
    assert (parsed.status, parsed.summary) == (ResultStatus.PARTIAL, "Checked.")
    assert [(f.id, f.severity) for f in parsed.findings] == [("SEC-1", Severity.CRITICAL)]
    assert parsed.violations == []


@pytest.mark.parametrize(
    ("heading", "agent"),
    [("🔒 Security Auditor", "Security Auditor"), ("Security Auditor ✅", "Security Auditor"), ("✅", "✅")],
)
def test_an_agent_name_is_read_without_its_emoji(heading: str, agent: str) -> None:
    """(Its findings name it, and expertise weights and agreement go by that name.)"""
    assert parse_report(report(agent=heading)).agent == agent


@pytest.mark.parametrize(
    "status", ["DONE", "[SUCCESS | PARTIAL | FAILED]", "[SUCCESS]", "Successful", "✅ Done", "✅", ""]
)
def test_an_unknown_status_is_an_error_with_its_line(status: str) -> None:
    with pytest.raises(ReportError) as caught:
        parse_report(report().replace("SUCCESS", status))
    assert caught.value.message == f"status '{status}' is not SUCCESS, PARTIAL or FAILED"
    assert caught.value.line == 3


def test_status_and_summary_are_required() -> None:
    with pytest.raises(ReportError, match="missing '### Status' section"):
        parse_report("## A Result\n### Summary\nx\n")
    with pytest.raises(ReportError, match="missing or empty '### Summary' section"):
        parse_report("## A Result\n### Status\nSUCCESS\n### Summary\n\n")
    with pytest.raises(ReportError, match="not a '## <Agent Name> Result' heading"):
        parse_report("## Results of the QA\n")


@pytest.mark.parametrize(
    "text",
    [
        "## A Result\n\n**Status:** PARTIAL\n**Summary:** Checked the login\nmodule.\n\n### Findings\n",
        "## A Result\n- **Status**: PARTIAL\n- **Summary**: Checked the login\n  module.\n",
        "## A Result\nStatus: `PARTIAL`\n\nSummary:\nChecked the login\nmodule.\n",
        "## A Result\n### Status: PARTIAL\n### Summary\nChecked the login\nmodule.\n",
        "## A Result\n### Summary: Checked the login\nmodule.\n### Status\nPartial\n",
        "## A Result\n**Overall Status:** PARTIAL\n**Summary:** Checked the login module.\n",
        "## A Result\n+ **Status:** PARTIAL\n+ **Summary:** Checked the login module.\n",
        "## A Result\n1. **Status**: PARTIAL\n2. **Summary**: Checked the login module.\n",
        "## A Result\n> **Status:** PARTIAL\n> **Summary:** Checked the login module.\n",
        "## A Result\n**Status:**\n`PARTIAL`\n\n**Summary:**\nChecked the login module.\n",
        "## A Result\n### Final Status: PARTIAL\n### Summary\nChecked the login module.\n",
    ],
)
def test_status_and_summary_as_labelled_lines(text: str) -> None:
    """Agents often write the two required sections as labels: their findings must not be lost for it."""
    parsed = parse_report(text)
    assert parsed.status is ResultStatus.PARTIAL
    assert parsed.summary.split() == ["Checked", "the", "login", "module."]
    assert parsed.violations == [] and [s.title for s in parsed.sections if s.title != "Findings"] == []


def test_a_label_gives_way_to_the_section_and_a_fence_holds_no_label() -> None:
    with_sections = "### Status\nSUCCESS\n### Summary\nThe real summary.\n"
    for preamble in (
        "Status: failed checks were all fixed\n",
        "**Summary:** see below.\n",
        "Status: SUCCESS.\n",
    ):
        parsed = parse_report(f"## A Result\n{preamble}\n{with_sections}")
        assert (parsed.status, parsed.summary) == (ResultStatus.SUCCESS, "The real summary.")
        assert parsed.violations == [] and parsed.sections[0].text == preamble.strip()
    fenced = parse_report("## A Result\n```yaml\nstatus: FAILED\n```\n**Status:** SUCCESS\n**Summary: ok**\n")
    assert (fenced.status, fenced.summary) == (ResultStatus.SUCCESS, "ok")
    cut = parse_report("## A Result\nStatus: PARTIAL\nSummary: ok\n```\ncode\n```\n")
    assert cut.summary == "ok" and cut.sections[0].text == "```\ncode\n```"


def test_rows_that_say_nothing_are_no_findings() -> None:
    table = (
        "### Findings\n| ID | Issue | File:Line | Severity | Confidence |\n|---|---|---|---|---|\n"
        "| [SEC-001] | [What is wrong] | `[file:line]` | [critical/important/minor] | [0-100] |\n"
        "| - | None found | - | - | - |\n"
        "| 1 | None found | - | - | - |\n"
        "| — | None | — | — | — |\n"
        "| SEC-2 | Hardcoded secret | src/a.ts:3 | high | 90 |\n"
    )
    parsed = parse_report(report(table))
    assert [(f.id, f.file, f.line) for f in parsed.findings] == [("SEC-2", "src/a.ts", 3)]
    assert parsed.violations == []


def test_a_status_label_over_a_line_that_is_no_status_word_is_prose() -> None:
    with pytest.raises(ReportError, match="missing '### Status' section"):
        parse_report("## A Result\n**Status:**\nmostly done\n**Summary:** ok\n")
    parsed = parse_report(report().replace("### Status", "**Overall Status:**\n\n### Status"))
    assert parsed.status is ResultStatus.SUCCESS and parsed.sections[0].text == "**Overall Status:**"


def test_a_label_that_is_no_status_is_prose() -> None:
    parsed = parse_report(report().replace("### Status", "**Status:** in progress\n\n### Status"))
    assert parsed.status is ResultStatus.SUCCESS
    assert [(s.title, s.text) for s in parsed.sections] == [("", "**Status:** in progress")]
    with pytest.raises(ReportError, match="missing '### Status' section"):
        parse_report("## A Result\nStatus: in progress\n### Summary\nx\n")


def test_a_breakdown_alone_gives_the_score_and_its_prose_once() -> None:
    parsed = parse_report(
        report(
            "### Confidence\n- verified_confidence: 90\n- inferred_confidence: 70\n"
            "Overall moderate: one module not read.\n"
        )
    )
    assert parsed.confidence is not None
    assert (parsed.confidence.score, parsed.confidence.justification) == (
        80,
        "Overall moderate: one module not read.",
    )


def test_a_score_with_a_label_in_brackets() -> None:
    parsed = parse_report(report("### Confidence\n85 (High) - read every file\n"))
    assert parsed.confidence is not None
    assert (parsed.confidence.score, parsed.confidence.justification) == (85, "High - read every file")
    assert parsed.violations == []


def test_confidence_breakdown_and_justification() -> None:
    parsed = parse_report(
        report(
            "### Confidence\n**87** - verified by running the tests\n"
            "- verified_confidence: 90 (read the exact function, saw the bug)\n"
            "- inferred_confidence: 70 (similar pattern likely exists elsewhere)\n"
            "- combined_confidence: 80\n",
            "### Confidence Justification\n**Score**: 87\n**Evidence Count**: 4 findings with direct code evidence\n"
            "**Verification Method**: Read tool and a test run\n**Potential Blind Spots**: generated code\n",
        )
    )
    confidence = parsed.confidence
    assert confidence is not None
    assert (confidence.score, confidence.justification.split("\n")) == (
        87,
        [
            "verified by running the tests",
            "verified: read the exact function, saw the bug",  # the breakdown's reasons are kept too
            "inferred: similar pattern likely exists elsewhere",
        ],
    )
    assert (confidence.verified, confidence.inferred, confidence.combined) == (90, 70, 80)
    assert confidence.detailed is not None
    assert confidence.detailed.score == 87
    assert confidence.detailed.evidence_count == "4 findings with direct code evidence"
    assert confidence.detailed.verification_method == "Read tool and a test run"
    assert confidence.detailed.blind_spots == "generated code"
    assert parsed.violations == []


_BREAKDOWN = "- verified_confidence: 90 (read the exact function, saw the bug)\n- inferred_confidence: 70\n"
_DETAILS = (
    "**Score**: 88\n**Evidence Count**: 4\n**Verification Method**: read\n**Potential Blind Spots**: none\n"
)


@pytest.mark.parametrize(
    "sections",
    [
        # seed 001 names the breakdown "Confidence Breakdown": a section of its own
        [
            f"### Confidence\n88 - read the code\n\n### Confidence Breakdown\n{_BREAKDOWN}",
            f"### Confidence Justification\n{_DETAILS}",
        ],
        [
            f"### Confidence Breakdown\n{_BREAKDOWN}",
            f"### Confidence\n88\n\n#### Confidence Justification\n{_DETAILS}",
        ],
        [f"### Confidence\n88\n{_BREAKDOWN}\n**Confidence Justification**\n{_DETAILS}"],
        [f"### Confidence\n88\n{_BREAKDOWN}Confidence Justification:\n{_DETAILS}"],
    ],
    ids=["breakdown-section", "nested-justification", "bold-label", "plain-label"],
)
def test_a_breakdown_and_a_justification_are_read_wherever_seed_001_s_words_put_them(
    sections: list[str],
) -> None:
    parsed = parse_report(report(*sections))
    confidence = parsed.confidence
    assert confidence is not None
    assert (confidence.score, confidence.verified, confidence.inferred) == (88, 90, 70)
    assert confidence.detailed is not None
    assert (confidence.detailed.score, confidence.detailed.evidence_count) == (88, "4")
    assert parsed.violations == []
    assert [s.title for s in parsed.sections] == []
    assert "Score" not in confidence.justification


@pytest.mark.parametrize(
    "sections",
    [
        ["### Confidence\nSee the breakdown below.\n", f"### Confidence Breakdown\n{_BREAKDOWN}"],
        [f"### Confidence\n#### Confidence Justification\n{_DETAILS}"],
    ],
    ids=["breakdown-after", "justification-only"],
)
def test_a_confidence_section_without_a_score_takes_the_one_given_after_it(sections: list[str]) -> None:
    """A score the breakdown or the justification gives, in any order of the sections: no violation."""
    parsed = parse_report(report(*sections))
    assert parsed.confidence is not None and parsed.confidence.score in (80, 88)
    assert parsed.violations == []
    unscored = parse_report(report("### Confidence\nSee the breakdown below.\n"))
    assert unscored.violations == ["Confidence 'See the breakdown below.' is not a score from 0 to 100"]


def test_a_breakdown_section_alone_gives_the_score() -> None:
    parsed = parse_report(report(f"### Confidence Breakdown\n{_BREAKDOWN}"))
    assert parsed.confidence is not None
    assert parsed.confidence.score == 80  # (90 + 70) / 2, seed 001's formula


@pytest.mark.parametrize(
    ("lines", "score"),
    [
        (
            "- verified_confidence: 90 (read the exact function)\n- inferred_confidence: 70\n- combined_confidence: 80\n",
            80,
        ),
        (
            "- verified_confidence: 90\n- inferred_confidence: 70\n",
            80,
        ),  # the seed's (verified + inferred) / 2
    ],
)
def test_a_breakdown_alone_gives_the_score(lines: str, score: float) -> None:
    # seed 001's own example of the breakdown has no score line of its own
    parsed = parse_report(report(f"### Confidence\n{lines}", "### Confidence Justification\n**Score**: 80\n"))
    assert parsed.confidence is not None
    assert (parsed.confidence.score, parsed.confidence.verified, parsed.confidence.inferred) == (
        score,
        90,
        70,
    )
    assert parsed.violations == []


@pytest.mark.parametrize(
    "line",
    [
        "88 - high (verified_confidence: 90, inferred_confidence: 86)",
        "88 (verified: 90, inferred: 86) - read every file",
    ],
)
def test_a_score_line_that_names_its_breakdown_too_is_both(line: str) -> None:
    parsed = parse_report(report(f"### Confidence\n{line}\n"))
    assert parsed.confidence is not None and parsed.violations == []
    assert (parsed.confidence.score, parsed.confidence.verified, parsed.confidence.inferred) == (88, 90, 86)


@pytest.mark.parametrize(
    ("line", "violation"),
    [
        ("High - lots of evidence", "Confidence 'High - lots of evidence' is not a score from 0 to 100"),
        ("150 - very sure", "Confidence 150 (or its breakdown) is outside 0-100"),
    ],
)
def test_a_bad_confidence_is_a_violation_not_an_error(line: str, violation: str) -> None:
    parsed = parse_report(report(f"### Confidence\n{line}\n"))
    assert parsed.confidence is None
    assert parsed.violations == [violation]


def test_issues_with_severities() -> None:
    parsed = parse_report(
        report(
            "### Issues (if any)\n"
            "- Hardcoded secret: JWT secret committed in `src/config/jwt.ts` | Severity: critical\n"
            "- **Slow query**: N+1 in the list endpoint | Severity: Important\n"
            "  seen with 1000 rows\n"
            "- Naming: inconsistent | Severity: urgent\n"
            "- No description at all\n"
        )
    )
    assert [(i.title, i.description, i.severity) for i in parsed.issues] == [
        ("Hardcoded secret", "JWT secret committed in `src/config/jwt.ts`", Severity.CRITICAL),
        ("Slow query", "N+1 in the list endpoint\nseen with 1000 rows", Severity.IMPORTANT),
        ("Naming", "inconsistent", None),
        ("No description at all", "", None),
    ]
    assert parsed.violations == ["issue 'Naming': unknown severity 'urgent'"]


def test_none_items_are_left_out() -> None:
    parsed = parse_report(
        report("### Issues\n- None\n", "### Blockers (if any)\n- none.\n", "### Next Steps\n")
    )
    assert parsed.issues == []
    assert parsed.blockers == []
    assert parsed.next_steps == []


def test_blockers_in_both_forms() -> None:
    parsed = parse_report(
        report(
            "### Blockers\n"
            "- Staging database is down | Resolution: restart it\n"
            "- No credentials for the payment sandbox\n"
            "  Resolution: ask ops for a sandbox key\n"
            "- Unclear requirement\n"
        )
    )
    assert [(b.description, b.resolution) for b in parsed.blockers] == [
        ("Staging database is down", "restart it"),
        ("No credentials for the payment sandbox", "ask ops for a sandbox key"),
        ("Unclear requirement", ""),
    ]


def test_next_steps_keep_continuation_lines() -> None:
    parsed = parse_report(
        report("### Next Steps\n1. Fix SEC-001\n   before the release\n2) Re-run the audit\n")
    )
    assert parsed.next_steps == ["Fix SEC-001 before the release", "Re-run the audit"]


def test_issue_tables_become_findings_anywhere() -> None:
    parsed = parse_report(
        report(
            "### Review\n| Issue | Location | Severity |\n|---|:---:|---|\n"
            "| SQL built by concatenation | `src/db/query.ts:12-18` | High |\n"
            "| Odd \\| pipe | `src/x.ts` | catastrophic |\n"
            "|  | `src/y.ts:3` | Low |\n",
            agent="Security Auditor",
        )
    )
    first, second = parsed.findings
    assert (first.id, first.title, first.file, first.line, first.severity) == (
        None,
        "SQL built by concatenation",
        "src/db/query.ts",
        12,
        Severity.HIGH,
    )
    assert first.category == "general"
    assert first.agent == "Security Auditor"
    assert (second.title, second.file, second.line, second.severity) == ("Odd | pipe", "src/x.ts", None, None)
    assert parsed.violations == [
        "finding 'Odd | pipe': unknown severity 'catastrophic'",
        "finding 'src/y.ts:3' has no title: left out",
    ]
    assert parsed.sections[0].title == "Review"


def test_a_location_with_line_zero_negative_or_too_high_keeps_the_finding_without_a_line() -> None:
    parsed = parse_report(
        report(
            "### Review\n| Issue | Location | Severity |\n|---|---|---|\n"
            "| Zero | `a.py:0` | Low |\n| Negative | a.py:-3 | Low |\n| Fine | a.py:7 | Low |\n"
            "| Huge | a.py:99999999999 | Low |\n| Worded | a.py line 0 | Low |\n| Anchor | a.py#L99999999999 | Low |\n"
            "| Link | [a.py](a.py#L99999999999) | Low |\n"
        )
    )
    assert [(f.title, f.file, f.line) for f in parsed.findings] == [
        ("Zero", "a.py", None),
        ("Negative", "a.py", None),
        ("Fine", "a.py", 7),
        ("Huge", "a.py", None),
        ("Worded", "a.py", None),
        ("Anchor", "a.py", None),
        ("Link", "a.py", None),
    ]
    assert parsed.violations == [
        "finding 'Zero': 'a.py:0' names no line (lines are 1 to 2147483647): kept without one",
        "finding 'Negative': 'a.py:-3' names no line (lines are 1 to 2147483647): kept without one",
        "finding 'Huge': 'a.py:99999999999' names no line (lines are 1 to 2147483647): kept without one",
        "finding 'Worded': 'a.py line 0' names no line (lines are 1 to 2147483647): kept without one",
        "finding 'Anchor': 'a.py#L99999999999' names no line (lines are 1 to 2147483647): kept without one",
        "finding 'Link': '[a.py](a.py#L99999999999)' names no line (lines are 1 to 2147483647): kept without one",
    ]


def test_file_and_line_in_columns_of_their_own() -> None:
    parsed = parse_report(
        report(
            "### Findings\n| ID | Issue | File | Line | Severity |\n|---|---|---|---|---|\n"
            "| SEC-001 | Hardcoded secret | `src/config/jwt.ts` | 8 | Critical |\n"
            "| SEC-002 | No line | src/api/auth.ts |  | High |\n| SEC-003 | Zero | a.py | 0 | Low |\n"
            "| SEC-004 | None | b.py | N/A | Low |\n| SEC-005 | Dash | c.py | - | Low |\n"
            "| SEC-006 | Anchor | d.py | L5 | Low |\n| SEC-007 | Range | e.py | lines 40-45 | Low |\n"
            "| SEC-008 | Word | f.py | top | Low |\n"
        )
    )
    assert [(f.title, f.file, f.line) for f in parsed.findings] == [
        ("Hardcoded secret", "src/config/jwt.ts", 8),
        ("No line", "src/api/auth.ts", None),
        ("Zero", "a.py", None),
        ("None", "b.py", None),  # not the file "b.py:N/A"
        ("Dash", "c.py", None),
        ("Anchor", "d.py", 5),
        ("Range", "e.py", 40),
        ("Word", "f.py", None),
    ]
    assert parsed.violations == [
        "finding 'SEC-003': 'a.py:0' names no line (lines are 1 to 2147483647): kept without one",
        "finding 'SEC-008': line 'top' is not a line number: kept without one",
    ]


def test_emphasis_around_cells_and_an_explicit_category() -> None:
    parsed = parse_report(
        report(
            "### Findings\n| ID | Category | Issue | File:Line | Severity | Confidence |\n"
            "|---|---|---|---|---|---|\n"
            "| **SEC-001** | Security | **Hardcoded secret** | **`src/a.ts:8`** | *High* | **95** |\n"
            "| **QA-004** |  | Weak check | src/b.ts:3 | Low | 70 |\n"
        )
    )
    assert [(f.id, f.category, f.title, f.file, f.line, f.confidence) for f in parsed.findings] == [
        ("SEC-001", "Security", "Hardcoded secret", "src/a.ts", 8, 95),
        ("QA-004", "QA", "Weak check", "src/b.ts", 3, 70),  # no category given: the id's prefix
    ]
    assert parsed.violations == []


def test_a_change_log_with_a_file_column_is_not_findings_and_emphasis_inside_a_cell_stays() -> None:
    parsed = parse_report(
        report(
            "### Changes\n| Issue | File | Change |\n|---|---|---|\n| #12 | src/auth.ts | a null check |\n"
            "### Findings\n| ID | Issue | File:Line | Severity |\n|---|---|---|---|\n"
            "| SEC-001 | **MD5** used for **passwords** | a.ts:4 | High |\n"
        )
    )
    assert [(f.id, f.title) for f in parsed.findings] == [("SEC-001", "**MD5** used for **passwords**")]


def test_tables_without_an_issue_column_are_not_findings() -> None:
    parsed = parse_report(
        report("### Findings\n#### Files\n| File | Change |\n|---|---|\n| `a.ts:3` | edited |\n")
    )
    assert parsed.findings == []
    assert parsed.sections[0].tables[0].rows == [["a.ts:3", "edited"]]


def test_headings_and_tables_in_code_fences_are_content() -> None:
    parsed = parse_report(
        report(
            "### Findings\n#### Snippet\n~~~markdown\n### Status\nFAILED\n| A | B |\n|---|---|\n| 1 | 2 |\n~~~\n"
            "#### After\ntext\n"
        )
    )
    assert parsed.status is ResultStatus.SUCCESS
    assert [s.title for s in parsed.sections] == ["Snippet", "After"]
    assert parsed.sections[0].tables == []
    assert parsed.sections[0].text.startswith("~~~markdown\n### Status")


def test_other_sections_preamble_and_duplicates() -> None:
    text = report(
        "### Verification Completed\n- [x] **File References Valid**\n",
        "### Summary\nA second summary.\n",
    ).replace("### Status", "Some words first.\n\n### Status")
    parsed = parse_report(text)
    assert [(s.title, s.text) for s in parsed.sections] == [
        ("", "Some words first."),
        ("Verification Completed", "- [x] **File References Valid**"),
        ("Summary", "A second summary."),
    ]
    assert parsed.summary == "Checked the login module."
    assert parsed.violations == ["duplicate section '### Summary' (line 14); first one used"]


ISSUE_TABLE = (
    "| ID | Issue | File:Line | Severity | Confidence |\n|----|-------|-----------|----------|------------|\n"
    "| SEC-001 | Hardcoded JWT secret | src/config/jwt.ts:8 | Critical | 98 |\n"
)


@pytest.mark.parametrize(
    "text",
    [
        "## Auditor Result\n**Status:** PARTIAL\n**Summary:** One critical issue.\n\n" + ISSUE_TABLE,
        "## Auditor Result\n### Status\nPARTIAL\n### Summary\nOne critical issue.\n\n" + ISSUE_TABLE,
    ],
    ids=["after-labelled-lines", "in-the-summary"],
)
def test_an_issue_table_outside_a_findings_section_has_findings_all_the_same(text: str) -> None:
    # the README promises an issue table's findings wherever it is: these two were dropped without a word
    parsed = parse_report(text)
    assert [(f.id, f.file, f.line, f.severity) for f in parsed.findings] == [
        ("SEC-001", "src/config/jwt.ts", 8, Severity.CRITICAL)
    ]


@pytest.mark.parametrize("name", ["report_summary_table.md", "report_tables_elsewhere.md"])
def test_tables_that_repeat_the_findings_section_s_rows_add_no_findings(name: str) -> None:
    """A summary's table of the findings, and per-finding tables under Confidence or Next Steps, name the
    findings of ### Findings again: read as issue tables, each finding counted twice, or as a bogus one."""
    parsed = parse_report((Path(__file__).parent / "data" / name).read_text())
    assert [(f.id, f.file, f.line) for f in parsed.findings] == [
        ("SEC-001", "src/config/jwt.ts", 8),
        ("SEC-002", "src/db/users.ts", 42),
    ]


def test_error_details_as_a_list() -> None:
    parsed = parse_report(
        report(
            "### Error Details\n- Type: TimeoutError\n- Message: npm audit hung\n- Occurred At: step 3\n"
            "- Recoverable: yes\n"
        ).replace("SUCCESS", "FAILED")
    )
    assert parsed.error is not None
    assert (parsed.error.type, parsed.error.message, parsed.error.occurred_at, parsed.error.recoverable) == (
        "TimeoutError",
        "npm audit hung",
        "step 3",
        True,
    )


def test_key_references_split_file_and_line() -> None:
    parsed = parse_report(
        report(
            "### Key References\n| Item | Location | Relevance |\n|---|---|---|\n"
            "| Handler | `src/api/auth.ts:45` | entry |\n| Config | `src/config/oauth.ts` | new |\n| Step | build | - |\n"
        )
    )
    assert [(r.item, r.location, r.file, r.line) for r in parsed.key_references] == [
        ("Handler", "src/api/auth.ts:45", "src/api/auth.ts", 45),
        ("Config", "src/config/oauth.ts", "src/config/oauth.ts", None),
        ("Step", "build", None, None),
    ]


@pytest.mark.parametrize(
    ("location", "expected"),
    [
        ("src/a.ts:45", ("src/a.ts", 45)),
        ("`src/a.ts:45`", ("src/a.ts", 45)),
        ("src/a.ts:45-60", ("src/a.ts", 45)),
        ("src/a.ts:45:7", ("src/a.ts", 45)),
        ("src/a.ts:45 (loginHandler)", ("src/a.ts", 45)),
        ("src/a.ts", ("src/a.ts", None)),
        ("src/a.ts:0", ("src/a.ts", None)),
        ("src/a.ts:-3", ("src/a.ts", None)),
        ("n/a", (None, None)),
        ("build", (None, None)),
        ("Makefile.am", ("Makefile.am", None)),
        ("step 3 of the build", (None, None)),
        ("", (None, None)),
        # a path with spaces, known by its line; prose with a colon and a number is not one
        ("src/my file.ts:3", ("src/my file.ts", 3)),
        ("`My Documents/x.py:7-9`", ("My Documents/x.py", 7)),
        ("my notes.md:0", ("my notes.md", None)),
        ("src/my file.ts", (None, None)),
        ("Note that the total:12", (None, None)),
        ("see step 3 of src/build.py:12 first", (None, None)),
        # a line in words, as agents write it
        ("`src/a.py` line 3", ("src/a.py", 3)),
        ("src/a.py, line 3", ("src/a.py", 3)),
        ("src/a.py (line 3)", ("src/a.py", 3)),
        ("src/a.py (lines 3-5)", ("src/a.py", 3)),
        ("src/a.py L3", ("src/a.py", 3)),
        ("src/a.py:L3", ("src/a.py", 3)),
        ("src/a.py#L3-L9", ("src/a.py", 3)),
        ("Makefile line 3", (None, None)),
        ("see line 3", (None, None)),
        ("step L3", (None, None)),
        ("v1.2 line 3", (None, None)),
        # a line past any file's: the file without it
        ("src/a.ts:2147483647", ("src/a.ts", 2147483647)),
        ("src/a.ts:99999999999", ("src/a.ts", None)),
        ("src/a.ts:" + "9" * 5_000, ("src/a.ts", None)),  # more digits than int() reads
        ("src/a.ts:-" + "9" * 5_000, ("src/a.ts", None)),
        ("src/a.ts line " + "9" * 5_000, ("src/a.ts", None)),
        ("src/my file.ts:" + "9" * 5_000, ("src/my file.ts", None)),
        # a URL's port is no line: two pages of one server are two places, not the one "file:line"
        ("http://localhost:3000/login", ("http://localhost:3000/login", None)),
        ("redis://cache:6379", ("redis://cache:6379", None)),
        ("https://github.com/o/r/blob/main/src/a.ts#L45", ("https://github.com/o/r/blob/main/src/a.ts", 45)),
        ("src/db/users.ts:42 (https://cwe.mitre.org/data/89.html)", ("src/db/users.ts", 42)),  # a URL beside
        ("src/config.ts:12 (redis://cache:6379)", ("src/config.ts", 12)),
        # Markdown links, as Claude writes references: the relative target is the path, #L the line
        ("[src/auth.ts:42](src/auth.ts#L42)", ("src/auth.ts", 42)),
        ("[auth.ts](src/auth.ts#L42)", ("src/auth.ts", 42)),
        ("[auth.ts](src/auth.ts#L42-L50)", ("src/auth.ts", 42)),
        ("[src/a.ts:7](src/a.ts)", ("src/a.ts", 7)),
        ("`[src/a.ts:45](https://github.com/o/r/blob/main/src/a.ts#L45)`", ("src/a.ts", 45)),
        ("[docs](README.md)", ("README.md", None)),
        ("[here](https://example.com)", (None, None)),
        ("[auth.ts](src/auth.ts#L99999999999)", ("src/auth.ts", None)),  # past any file's line
        ("[auth.ts:7](src/auth.ts#L" + "9" * 5_000 + ")", ("src/auth.ts", 7)),
    ],
)
def test_split_location(location: str, expected: tuple[str | None, int | None]) -> None:
    assert split_location(location) == expected


def test_crlf_reports() -> None:
    text = report("### Next Steps\n1. one\n").replace("\n", "\r\n")
    parsed = parse_report(text)
    assert parsed.summary == "Checked the login module."
    assert parsed.next_steps == ["one"]


@pytest.mark.parametrize("heading", ["## _ Result", "## __ Result"])
def test_a_heading_that_names_no_agent_is_an_error_not_a_crash(heading: str) -> None:
    text = f"{heading}\n\n### Status\nSUCCESS\n\n### Summary\nDone.\n"
    with pytest.raises(ReportError, match="the heading names no agent"):
        parse_report(text)
    [item] = parse_text(text)
    assert isinstance(item, ErrorItem) and "the heading names no agent" in item.message, item


@pytest.mark.parametrize(
    "item",
    [
        "None identified",
        "[ ] None",
        "**None found.**",
        "No blockers at this time",
        "N/A",
        "nothing to report",
    ],
)
def test_a_list_item_that_says_there_is_nothing_lists_nothing(item: str) -> None:
    parsed = parse_report(report(f"### Blockers\n- {item}\n", f"### Next Steps\n- {item}\n"))
    assert (parsed.blockers, parsed.next_steps) == ([], [])


def test_a_list_item_that_starts_like_none_is_kept() -> None:
    parsed = parse_report(report("### Blockers\n- None of the tests run on CI\n- No staging access\n"))
    assert [b.description for b in parsed.blockers] == ["None of the tests run on CI", "No staging access"]


def test_a_table_without_a_confidence_column_gives_its_findings_the_report_s_confidence() -> None:
    """Seed 001's worked example, the qa-engineer's table without the column: (95 + 78) / 2 + 10."""
    table = "### Findings\n| ID | Issue | File:Line | Severity |\n|---|---|---|---|\n"
    qa = parse_report(
        report(
            table + "| SEC-001 | Hardcoded JWT secret | `src/config/jwt.ts:8` | Critical |\n",
            "### Confidence\n78",
        )
    )
    assert [f.confidence for f in qa.findings] == [78]
    sec = parse_report(
        report(
            "### Findings\n| ID | Issue | File:Line | Severity | Confidence |\n|---|---|---|---|---|\n"
            "| SEC-001 | Hardcoded JWT secret | `src/config/jwt.ts:8` | Critical | 95 |\n"
            "| SEC-002 | Maybe weak hash | `src/auth/hash.ts:3` | Minor | unknown |\n"
            "| SEC-003 | Guess | `src/auth/x.ts:3` | Minor |  |\n",
            "### Confidence\n92",
            agent="Security Auditor",
        )
    )
    # a Confidence column's cell that gives none is none: the agent left it unscored
    assert [f.confidence for f in sec.findings] == [95, None, None]
    merged = {m.location: m for m in merge_findings([*sec.findings, *qa.findings], Policy())}
    assert merged["src/config/jwt.ts:8"].confidence == pytest.approx(96.5)
    unscored = parse_report(report(table + "| QA-1 | Flaky | `t.py:3` | Minor |\n"))
    assert [f.confidence for f in unscored.findings] == [None]


def test_a_count_after_verified_is_no_breakdown() -> None:
    """``verified: 2 of 3 endpoints`` counts things; a breakdown gives scores (``90``, ``90/100``)."""
    counted = parse_report(report("### Confidence\n78 - verified: 2 of 3 endpoints traced, 4/5 files read"))
    assert counted.confidence is not None and counted.confidence.verified is None
    scored = parse_report(report("### Confidence\n80 - verified: 90/100, inferred: 70/100"))
    assert scored.confidence is not None
    assert (scored.confidence.verified, scored.confidence.inferred) == (90, 70)


@pytest.mark.parametrize("header", ["Issue ID", "Finding ID", "ID"])
def test_an_id_column_named_otherwise_gives_the_ids_and_their_category(header: str) -> None:
    """Dropped, the ids took the category derived from them (SEC-001: SEC) along: the findings merged
    with no other agent's of the same place."""
    table = (
        f"| {header} | Issue | File:Line | Severity | Confidence |\n|--|--|--|--|--|\n"
        "| SEC-001 | SQL injection | src/db.ts:42 | Critical | 78 |\n"
    )
    parsed = parse_report(f"## QA Engineer Result\n**Status:** SUCCESS\n**Summary:** Done.\n\n{table}")
    assert [(f.id, f.category, f.title) for f in parsed.findings] == [("SEC-001", "SEC", "SQL injection")]
