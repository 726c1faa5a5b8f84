"""Severity conflicts wait for a human (seed 001: conflicting findings -> flag for human review): the group
counts its merged findings in conflict, and a settled group with any is reviewed rather than continued."""

from __future__ import annotations

import orjson
from rules_kit import GROUP, Feed, completion, decisions, finding, kinds, result

from bus.events import AgentStarted, DecisionType
from bus.results import ResultStatus
from coordinator.policy import Policy
from coordinator.rules import Outcome, merged_view, summarize
from coordinator.rules.findings import fold, slot_key
from coordinator.rules.verdict import verdict
from coordinator.state import GroupVerdict
from coordinator.store import load_state


def _statuses(outcome: Outcome) -> list[str]:
    return [d.detail for d in decisions(outcome) if d.decision is DecisionType.GROUP_STATUS]


def test_the_count_follows_each_conflict_as_it_begins_and_ends() -> None:
    feed = Feed()
    counts = []
    for agent, severity, confidence, line in (
        ("qa-engineer", "minor", 80, 8),
        ("security-auditor", "critical", 50, 8),  # a conflict at line 8
        ("code-explorer", "important", 70, 8),  # the same conflict, wider: still one
        ("security-auditor", "critical", 60, 9),
        ("qa-engineer", "minor", 60, 9),  # a second one, at line 9
        ("security-auditor", "minor", 90, 8),  # its better report agrees with qa at line 8 ...
        ("code-explorer", "minor", 90, 8),  # ... and so does code-explorer's: line 8 ends
        ("reviewer", "important", 85, 8),  # a new conflict at line 8
    ):
        feed.send(finding(agent, severity=severity, confidence=confidence, line=line), agent)
        counts.append(feed.state.severity_conflicts)
    assert counts == [0, 1, 1, 1, 2, 2, 1, 2]
    assert sum(m.severity_conflict for m in merged_view(feed.state, feed.policy)) == 2
    assert summarize(feed.state).severity_conflicts == 2


def test_a_group_whose_agents_disagree_on_a_severity_settles_for_review() -> None:
    feed = Feed()
    for agent in ("auditor", "qa"):
        feed.send(AgentStarted(task="review src/config"), agent)
    first = feed.send(result("Security Auditor", findings=[finding("", severity="critical")]), "auditor")
    last = feed.send(result("QA Engineer", findings=[finding("", severity="minor", confidence=78)]), "qa")
    assert _statuses(first) == []  # qa is still at work
    assert kinds(last)[0] is DecisionType.SEVERITY_CONFLICT
    assert _statuses(last) == [
        "review: 2/2 completed, 0 failed, 0 active; "
        "1 merged finding(s) whose agents disagree on severity, for review"
    ]
    assert feed.state.status is GroupVerdict.REVIEW
    again = feed.send(completion("qa"), "qa")
    assert _statuses(again) == []  # the agent's COMPLETION_REPORT after its result changes nothing


def test_a_conflict_after_the_group_settled_changes_its_status_both_ways() -> None:
    feed = Feed()
    feed.send(result("Security Auditor", findings=[finding("", severity="critical")]), "auditor")
    statuses = [feed.state.status]
    late = feed.send(finding("scanner", severity="minor", confidence=60), "scanner-script")
    assert kinds(late)[-2:] == [DecisionType.SEVERITY_CONFLICT, DecisionType.GROUP_STATUS]
    assert _statuses(late) == [
        "review: 1/1 completed, 0 failed, 0 active; "
        "1 merged finding(s) whose agents disagree on severity, for review"
    ]
    statuses.append(feed.state.status)
    agreed = feed.send(finding("scanner", severity="critical", confidence=70), "scanner-script")
    assert _statuses(agreed) == ["continue: 1/1 completed, 0 failed, 0 active"]
    assert feed.state.severity_conflicts == 0
    statuses.append(feed.state.status)
    assert statuses == [GroupVerdict.CONTINUE, GroupVerdict.REVIEW, GroupVerdict.CONTINUE]
    same = feed.send(finding("scanner", id="SEC-002", line=20, severity="minor"), "scanner-script")
    assert _statuses(same) == []  # no conflict began or ended: nothing to report again


def test_a_conflict_turns_continue_into_review_and_leaves_the_other_verdicts() -> None:
    feed = Feed(Policy(max_retries=0))
    feed.send(result("Security Auditor", findings=[finding("", severity="critical")]), "auditor")
    feed.send(finding("scanner", severity="minor", confidence=60), "scanner-script")
    failed = feed.send(result("QA Engineer", ResultStatus.FAILED), "qa")
    assert feed.state.severity_conflicts == 1
    assert _statuses(failed) == [
        "escalate: 1/2 completed, 1 failed, 0 active; "
        "1 merged finding(s) whose agents disagree on severity, for review"
    ]
    for status, alone, conflicting in (
        (ResultStatus.SUCCESS, GroupVerdict.CONTINUE, GroupVerdict.REVIEW),
        (ResultStatus.PARTIAL, GroupVerdict.REVIEW, GroupVerdict.REVIEW),
        (ResultStatus.FAILED, GroupVerdict.ESCALATE, GroupVerdict.ESCALATE),
    ):
        one = Feed(Policy(max_retries=0))
        one.send(result("Security Auditor", status), "auditor")
        assert verdict(one.state) is alone
        assert verdict(one.state.model_copy(update={"severity_conflicts": 2})) is conflicting


def test_the_count_is_stored_with_the_group_and_read_without_its_findings() -> None:
    feed = Feed()
    feed.send(finding("security-auditor", severity="critical"), "auditor")
    feed.send(finding("qa-engineer", severity="minor"), "qa")
    meta = feed.state.model_dump(mode="json", exclude={"agents", "delegations", "findings", "window"})
    stored = {"meta": orjson.dumps(meta)}
    assert meta["severity_conflicts"] == 1
    assert load_state(GROUP, stored, []).severity_conflicts == 1  # status, inbox: no findings read
    assert summarize(load_state(GROUP, stored, []), findings=1).severity_conflicts == 1


def test_a_state_stored_before_the_count_was_kept_loads() -> None:
    older = {"meta": orjson.dumps({"applied": 2})}
    assert load_state(GROUP, older, []).severity_conflicts == 0
    # a coordinator, which reads the findings, counts the conflicts its slots were announced for
    slot = fold(None, finding("security-auditor", severity="critical"))
    slot = fold(slot, finding("qa-engineer", severity="minor"))
    slot = slot.model_copy(update={"conflict_reported": True})
    key = orjson.dumps(list(slot_key(finding("qa-engineer")))).decode()
    assert load_state(GROUP, older, [], {key: slot}).severity_conflicts == 1
    feed = Feed()
    feed.state = load_state(GROUP, older, [], {key: slot})
    ended = feed.send(finding("qa-engineer", severity="critical", confidence=99), "qa")
    assert DecisionType.SEVERITY_CONFLICT not in kinds(ended)
    assert feed.state.severity_conflicts == 0
