"""Findings: the append-only stream, deduplication, agreement bonus, weighting and severity conflicts."""

from __future__ import annotations

from datetime import timedelta
from enum import EnumType

import pytest
from rules_kit import T0, Feed, completion, decisions, finding, kinds, of_type, one, payloads, result

from bus.envelope import MAX_ENVELOPE_BYTES, EnvelopeType, encode
from bus.events import AgentStarted, AgentState, DecisionType, Heartbeat, Tick
from bus.findings import Finding, Severity
from bus.results import ResultStatus
from coordinator.policy import Policy
from coordinator.rules import Target, merge_findings, merged_view, summarize
from coordinator.rules.findings import _in_conflict, _keys, _severities, _stored_key, fold, slot_key
from coordinator.rules.ids import emitted_id
from coordinator.state import FindingSlot, ViolationRule


def test_a_merged_view_ranks_severities_without_listing_them_for_each_finding(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Listing the members to rank one severity made ranking most of a large merged view's time."""
    listed = 0
    members = EnumType.__iter__

    def counted(cls: type[Severity]) -> object:
        nonlocal listed
        listed += cls is Severity
        return members(cls)

    monkeypatch.setattr(EnumType, "__iter__", counted)
    findings = [Finding(title=f"f{n}", file="a.py", line=n + 1, severity="minor") for n in range(100)]
    merged = merge_findings(findings, Policy())
    assert [m.severities for m in merged] == [(Severity.MINOR,)] * 100
    assert sorted([Severity.LOW, Severity.CRITICAL, Severity.MINOR], key=lambda s: s.rank) == [
        Severity.CRITICAL,
        Severity.MINOR,
        Severity.LOW,
    ]
    assert listed == 0


def test_seed_worked_example() -> None:
    """security-auditor SEC-001 at 95, qa-engineer the same file:line and category at 78 -> 96.5."""
    merged = merge_findings(
        [
            finding("security-auditor", confidence=95),
            finding("qa-engineer", confidence=78, severity="critical"),
        ],
        Policy(),
    )
    assert len(merged) == 1
    (one,) = merged
    assert one.confidence == pytest.approx(96.5)
    assert one.agents == ("qa-engineer", "security-auditor")
    assert one.agreement and not one.severity_conflict
    assert one.finding.agent == "security-auditor"  # the highest-confidence report is kept
    assert (one.location, one.category) == ("src/config/jwt.ts:8", "SEC")


def test_expertise_weights_the_average() -> None:
    policy = Policy(expertise={"security-auditor": 2.0})
    (one,) = merge_findings(
        [finding("security-auditor", confidence=95), finding("qa-engineer", confidence=78)], policy
    )
    assert one.confidence == pytest.approx((2 * 95 + 78) / 3 + 10)


def test_agreement_bonus_is_added_once_not_per_agent() -> None:
    reports = [
        finding("security-auditor", confidence=95),
        finding("qa-engineer", confidence=78),
        finding("code-explorer", confidence=80),
    ]
    (one,) = merge_findings(reports, Policy())
    assert one.confidence == pytest.approx((95 + 78 + 80) / 3 + 10)


def test_confidence_is_capped_at_100_and_a_lone_report_gets_no_bonus() -> None:
    (capped,) = merge_findings(
        [finding("security-auditor", confidence=98), finding("qa-engineer", confidence=97)], Policy()
    )
    assert capped.confidence == 100
    (alone,) = merge_findings([finding("security-auditor", confidence=95)], Policy())
    assert alone.confidence == 95 and not alone.agreement


def test_each_agent_counts_once_with_its_best_report() -> None:
    reports = [
        finding("security-auditor", confidence=70),
        finding("Security Auditor", confidence=90),  # the same agent, named by its result heading
        finding("qa-engineer", confidence=80),
    ]
    (one,) = merge_findings(reports, Policy())
    assert one.agents == ("qa-engineer", "security-auditor")
    assert one.confidence == pytest.approx((90 + 80) / 2 + 10)


def test_reports_without_confidence_count_for_agreement_only() -> None:
    (one,) = merge_findings(
        [finding("security-auditor", confidence=None), finding("qa-engineer", confidence=78)], Policy()
    )
    assert one.confidence == pytest.approx(88)
    (none,) = merge_findings([finding("security-auditor", confidence=None)], Policy())
    assert none.confidence is None


def test_same_line_different_category_stays_apart_and_category_comes_from_the_id() -> None:
    reports = [finding("security-auditor", id="SEC-001"), finding("qa-engineer", id="QA-014")]
    merged = merge_findings(reports, Policy())
    assert [m.category for m in merged] == ["QA", "SEC"]
    explicit = finding("qa-engineer", id="X-1", category="SEC")
    assert len(merge_findings([finding("security-auditor"), explicit], Policy())) == 1


def test_findings_without_a_line_merge_only_with_the_same_id() -> None:
    reports = [
        finding("security-auditor", id="SEC-010", file="src/a.ts", line=None, title="weak hashing"),
        finding("qa-engineer", id="SEC-010", file="src/a.ts", line=None, title="weak hashing"),
        finding("qa-engineer", id="SEC-011", file="src/a.ts", line=None, title="missing CSRF token"),
        finding("qa-engineer", id=None, file=None, line=None, title="no rate limiting", category="SEC"),
    ]
    merged = merge_findings(reports, Policy())
    assert sorted(len(m.agents) for m in merged) == [1, 1, 2]


@pytest.mark.parametrize("blank", ["", "  "])
def test_a_blank_file_names_no_place(blank: str) -> None:
    reports = [
        finding("security-auditor", id=None, file=blank, line=3, title="weak hashing", category="SEC"),
        finding("qa-engineer", id=None, file=blank, line=3, title="missing CSRF token", category="SEC"),
    ]
    assert [r.file for r in reports] == [None, None]
    merged = merge_findings(reports, Policy())
    assert [(m.location, len(m.agents)) for m in merged] == [("", 1), ("", 1)]


def test_conflicting_severities_are_flagged() -> None:
    (one,) = merge_findings(
        [
            finding("security-auditor", severity="critical"),
            finding("qa-engineer", severity="minor", confidence=70),
        ],
        Policy(),
    )
    assert one.severity_conflict and one.severities == (Severity.CRITICAL, Severity.MINOR)
    assert one.finding.severity is Severity.CRITICAL


def test_a_severity_conflict_that_ended_is_announced_again_when_it_returns() -> None:
    feed = Feed()
    conflicts = []
    for agent, severity, confidence in (
        ("qa-engineer", "minor", 80),
        ("security-auditor", "critical", 50),  # a conflict: announced
        ("security-auditor", "minor", 90),  # its better report agrees: no conflict any more
        ("reviewer", "important", 85),  # a new conflict
    ):
        outcome = feed.send(finding(agent, severity=severity, confidence=confidence), agent)
        conflicts.append(DecisionType.SEVERITY_CONFLICT in kinds(outcome))
    assert conflicts == [False, True, False, True]


def test_paths_and_categories_are_compared_as_agents_mean_them() -> None:
    reports = [
        finding("security-auditor", confidence=95),  # src/config/jwt.ts:8, SEC from its id
        finding("qa-engineer", file="./src/config/jwt.ts", category="sec", confidence=78),
        finding("reviewer", file="src//config/jwt.ts", category="Sec", id=None, confidence=60),
        # a JSON file's fields are taken as written (a report's cells are trimmed): spaces, a Windows path
        finding("linter", file="src\\config\\jwt.ts ", category=" SEC ", id=None, confidence=50),
    ]
    views = [merge_findings(order, Policy()) for order in (reports, reports[::-1])]
    assert views[0] == views[1]  # whatever the order
    (merged,) = views[0]
    assert merged.agents == ("linter", "qa-engineer", "reviewer", "security-auditor")
    assert (merged.location, merged.category) == ("src/config/jwt.ts:8", "SEC")  # the best report's


def test_result_findings_go_to_the_findings_stream_once_each() -> None:
    feed = Feed()
    reports = [finding("", id="SEC-001"), finding("", id="SEC-002", line=45, title="Missing rate limiting")]
    outcome = feed.send(result("Security Auditor", ResultStatus.PARTIAL, findings=reports), "bg-task-a")
    published = [e for e in outcome.emits if e.target is Target.FINDINGS]
    assert [e.envelope.type for e in published] == [EnvelopeType.FINDING, EnvelopeType.FINDING]
    assert [e.envelope.id for e in published] == [emitted_id("in-00001", 1), emitted_id("in-00001", 2)]
    assert all(e.envelope.agent_id == "bg-task-a" for e in published)
    assert [p.agent for p in payloads(outcome, EnvelopeType.FINDING, Target.FINDINGS)] == [
        "security-auditor"
    ] * 2
    assert feed.state.agents["bg-task-a"].name == "security-auditor"
    assert summarize(feed.state).findings == 2


def test_finding_envelope_names_its_agent_by_id_when_its_kind_is_unknown() -> None:
    feed = Feed()
    outcome = feed.send(finding(""), "bg-task-x")
    (published,) = of_type(outcome, EnvelopeType.FINDING, Target.FINDINGS)
    assert one(outcome, EnvelopeType.FINDING).agent == "bg-task-x"
    assert published.id == emitted_id("in-00001", 1)  # the registration decision came first


def test_a_finding_that_names_its_sender_s_id_is_its_sender_s_under_its_kind() -> None:
    """`findings add` and the MCP tool fill in the agent's id: no second reporter beside its result's."""
    feed = Feed()
    feed.send(AgentStarted(name="Security Auditor"), "bg-task-x")
    feed.send(result("Security Auditor", findings=[finding("Security Auditor", confidence=80)]), "bg-task-x")
    outcome = feed.send(finding("bg-task-x", confidence=90), "bg-task-x")
    assert one(outcome, EnvelopeType.FINDING, Target.FINDINGS).agent == "security-auditor"
    (merged,) = merged_view(feed.state, feed.policy)
    assert merged.agents == ("security-auditor",) and not merged.agreement and merged.confidence == 90
    other = feed.send(finding("bg-task-y", confidence=70), "bg-task-x")  # another agent's id: as given
    assert one(other, EnvelopeType.FINDING, Target.FINDINGS).agent == "bg-task-y"


@pytest.mark.parametrize("name", ["[ ]", "**", "()"])
def test_a_finding_whose_agent_name_is_punctuation_alone_is_its_sender_s(name: str) -> None:
    """A blank reporter is no one: counted as one, it earned the agreement bonus beside the sender, and
    the stream's copy (``agent: ""``) was recomputed as the sender's, so `replay` differed."""
    feed = Feed()
    first = feed.send(finding(name, confidence=50), "bg-task-x")
    feed.send(finding("", confidence=90), "bg-task-x")
    assert one(first, EnvelopeType.FINDING, Target.FINDINGS).agent == "bg-task-x"
    (merged,) = merged_view(feed.state, feed.policy)
    assert merged.agents == ("bg-task-x",) and not merged.agreement and merged.confidence == 90
    emitted = [e.envelope.payload for o in feed.outcomes for e in o.emits if e.target is Target.FINDINGS]
    copies = [copy for copy in emitted if isinstance(copy, Finding)]
    assert len(copies) == len(emitted) == 2
    assert merge_findings(copies, feed.policy) == [merged]  # what replay recomputes from the stream


def test_senders_whose_ids_are_punctuation_alone_are_two_reporters_in_replay_too() -> None:
    """Such an id names its reporter as it is (normalised, it is blank); the stream's copies named them
    so, but recomputing normalised them again, to one blank reporter: `replay` lost the agreement."""
    feed = Feed()
    feed.send(finding("", confidence=90), "[]")
    feed.send(finding("", confidence=50), "**")
    (merged,) = merged_view(feed.state, feed.policy)
    assert merged.agents == ("**", "[]") and merged.agreement and merged.confidence == 80
    copies = [e.envelope.payload for o in feed.outcomes for e in o.emits if e.target is Target.FINDINGS]
    assert merge_findings([c for c in copies if isinstance(c, Finding)], feed.policy) == [merged]


def test_findings_from_a_script_register_an_agent_that_never_times_out() -> None:
    policy = Policy(heartbeat_timeout_seconds=10, lost_timeout_seconds=20)
    feed = Feed(policy)
    feed.send(finding("scanner", id="SEC-001"), "scanner-script", at=0)
    assert not feed.state.agents["scanner-script"].watched
    assert len(feed.state.findings) == 1
    tick = feed.send(Tick(now=T0 + timedelta(seconds=3600)), "coordinator", at=3600)
    assert decisions(tick) == [] and tick.emits == []
    assert feed.state.agents["scanner-script"].state is AgentState.RUNNING
    # once the sender shows it is a process (any other envelope), it is watched like any agent
    feed.send(Heartbeat(), "scanner-script", at=3600)
    assert feed.state.agents["scanner-script"].watched
    tick = feed.send(Tick(now=T0 + timedelta(seconds=3700)), "coordinator", at=3700)
    assert kinds(tick)[0] is DecisionType.LOST


def test_a_group_fed_by_a_script_settles_when_its_agents_finish() -> None:
    feed = Feed(Policy(max_parallel_agents=1))
    feed.send(finding("scanner", id="SEC-001"), "scanner-script")
    feed.send(AgentStarted(task="review the findings", name="security-auditor"), "bg-task-a")
    assert feed.state.progress.render() == "0/1 completed, 0 failed, 1 active"
    assert feed.state.active_count == 1  # the script holds no parallel slot
    outcome = feed.send(completion("bg-task-a"), "bg-task-a")
    assert [d.detail for d in decisions(outcome) if d.decision is DecisionType.GROUP_STATUS] == [
        "continue: 1/1 completed, 0 failed, 0 active"
    ]
    late = feed.send(finding("scanner", id="SEC-002", line=9), "scanner-script")
    assert DecisionType.GROUP_STATUS not in kinds(late)  # reported once


def test_three_agents_with_overlapping_findings() -> None:
    """The seed's shared-findings pattern: three agents, one merged view, one conflict flagged once."""
    feed = Feed()
    feed.send(
        result(
            "security-auditor",
            findings=[
                finding("", id="SEC-001", confidence=95),
                finding(
                    "",
                    id="SEC-002",
                    file="src/api/auth.ts",
                    line=45,
                    confidence=95,
                    title="Missing rate limiting",
                ),
            ],
        ),
        "bg-task-a",
    )
    feed.send(result("qa-engineer", findings=[finding("", id="SEC-001", confidence=78)]), "bg-task-b")
    conflict = feed.send(
        finding(
            "code-explorer", id="SEC-002", file="src/api/auth.ts", line=45, confidence=60, severity="minor"
        ),
        "bg-task-c",
    )
    assert DecisionType.SEVERITY_CONFLICT in kinds(conflict)
    detail = next(d.detail for d in decisions(conflict) if d.decision is DecisionType.SEVERITY_CONFLICT)
    assert "src/api/auth.ts:45 [SEC]" in detail and "critical, minor" in detail
    again = feed.send(
        finding(
            "Code Explorer", id="SEC-002", file="src/api/auth.ts", line=45, confidence=65, severity="low"
        ),
        "bg-task-c",
    )
    assert DecisionType.SEVERITY_CONFLICT not in kinds(again)

    view = merged_view(feed.state, feed.policy)
    assert [(m.location, round(m.confidence or 0, 2), m.agents) for m in view] == [
        ("src/api/auth.ts:45", round((95 + 65) / 2 + 10, 2), ("code-explorer", "security-auditor")),
        ("src/config/jwt.ts:8", 96.5, ("qa-engineer", "security-auditor")),
    ]
    stream = [
        e.envelope.payload
        for outcome in feed.outcomes
        for e in outcome.emits
        if e.target is Target.FINDINGS and isinstance(e.envelope.payload, Finding)
    ]
    assert len(stream) == 5
    assert merge_findings(stream, feed.policy) == view
    reweighted = merge_findings(stream, Policy(expertise={"qa-engineer": 3}))
    assert reweighted[1].confidence == pytest.approx((95 + 3 * 78) / 4 + 10)


def test_a_finding_whose_copy_would_be_over_the_envelope_limit_is_rejected() -> None:
    # its copy on the findings stream is its record: no reader would take it, and `replay` would differ
    feed = Feed()
    small = len(encode(feed.envelope(finding("", title="x"), "auditor")))
    signal = feed.envelope(finding("", title="x" * (MAX_ENVELOPE_BYTES - small + 1)), "auditor")
    assert len(encode(signal)) == MAX_ENVELOPE_BYTES  # the signal fits; the copy names its agent too
    outcome = feed.apply(signal)
    assert outcome.rejected is not None
    assert "its FINDING for 'auditor' would be " in outcome.rejected
    assert [e.target for e in outcome.emits] == [Target.EVENTS]  # the REJECTED decision
    assert feed.state.findings == {}
    assert feed.send(finding("security-auditor", title="short"), "auditor").rejected is None


def test_a_result_leaves_out_only_its_finding_whose_copy_would_be_over_the_limit() -> None:
    feed = Feed()
    feed.send(AgentStarted(task="audit"), "auditor")
    big = finding("", title="x" * MAX_ENVELOPE_BYTES, file="big.py")
    outcome = feed.send(result("Security Auditor", findings=[big, finding("")]), "auditor")
    assert outcome.rejected is None
    record = feed.state.agents["auditor"]
    assert record.state is AgentState.COMPLETED
    [violation] = record.violations
    assert violation.rule is ViolationRule.FINDING_TOO_LARGE
    assert (
        violation.detail.startswith("finding 'xxxxx")
        and "left out: its FINDING for 'auditor' would be " in violation.detail
    )
    assert [slot.location for slot in feed.state.findings.values()] == ["src/config/jwt.ts:8"]


def test_a_slots_keys_are_the_ones_its_reports_give() -> None:
    reports = [
        finding("security-auditor"),
        finding("qa-engineer", file="./src/config/jwt.ts", category="sec"),
        finding("qa-engineer", id="SEC-010", file="src/a.ts", line=None, title="weak hashing"),
        finding("qa-engineer", id=None, file="src/a.ts", line=None, title="weak hashing"),
        finding("qa-engineer", id=None, file=None, line=3, title="no rate limiting", category="SEC"),
        finding("qa-engineer", id=None, file=None, line=None, title="no rate limiting", category="SEC"),
    ]
    for report in reports * 2:  # the second time from the cache
        assert _keys(report) == (_stored_key(slot_key(report)), slot_key(report))


def test_a_slot_is_in_conflict_when_its_reports_name_two_severities() -> None:
    agents = ("security-auditor", "qa-engineer", "reviewer")
    for severities in [(None,), ("minor",), ("minor", None), ("minor", "minor"), (None, "minor", "critical")]:
        for order in (severities, severities[::-1]):
            slot = None
            for agent, severity in zip(agents, order, strict=False):
                slot = fold(slot, finding(agent, severity=severity))
            assert slot is not None
            assert _in_conflict(slot) is (len(_severities(slot)) > 1)


def test_a_new_slot_is_the_one_its_first_report_validates_to() -> None:
    for report in (finding("Security Auditor"), finding("qa-engineer", line=None, severity=None)):
        slot = fold(None, report)
        assert fold(None, report, slot_key(report)) == slot
        again = FindingSlot.model_validate(slot.model_dump(exclude_unset=True))
        assert slot == again and slot.__pydantic_fields_set__ == again.__pydantic_fields_set__
        assert list(slot.__dict__) == list(again.__dict__)
