"""Completion and status aggregation: progress, one retry with reduced scope, escalation, group status."""

from __future__ import annotations

import pytest
from rules_kit import (
    GROUP,
    Feed,
    clarification,
    completion,
    decisions,
    delegate,
    finding,
    kinds,
    of_type,
    one,
    result,
)

from bus.directives import HumanDeny, HumanDismiss, LaunchReason
from bus.envelope import EnvelopeType
from bus.events import AgentExited, AgentStarted, AgentState, DecisionType, Heartbeat
from bus.results import ErrorDetails, ResultBlocker, ResultStatus
from coordinator.console import unresolved_blockers
from coordinator.policy import Policy
from coordinator.rules import Target, apply, summarize
from coordinator.rules.ids import delegate_agent_id, retry_agent_id, retry_request_id
from coordinator.state import GroupVerdict, ViolationRule

A, B, C = "bg-task-a", "bg-task-b", "bg-task-c"


def _start(feed: Feed, *agents: str) -> None:
    for agent in agents:
        feed.send(AgentStarted(task=f"analyse module {agent}", name="security-auditor"), agent)


def _group_status(feed: Feed) -> list[str]:
    return [
        d.detail
        for outcome in feed.outcomes
        for d in decisions(outcome)
        if d.decision is DecisionType.GROUP_STATUS
    ]


def test_completion_records_status_deliverables_metrics_and_progress() -> None:
    feed = Feed()
    _start(feed, A, B)
    outcome = feed.send(completion(A, "success", "Scanned 120 files"), A)
    record = feed.state.agents[A]
    assert record.state is AgentState.COMPLETED
    assert record.completion is not None
    assert (record.completion.status, record.completion.deliverables, record.completion.metrics) == (
        ResultStatus.SUCCESS,
        "- SECURITY_ANALYSIS.md",
        "all criteria met",
    )
    (done,) = decisions(outcome)
    assert done.decision is DecisionType.COMPLETED and done.state is AgentState.COMPLETED
    assert "1/2 completed" in done.detail
    progress = feed.state.progress
    assert (progress.total, progress.completed, progress.failed, progress.active) == (2, 1, 0, 1)


def test_all_success_continues_and_is_reported_once() -> None:
    feed = Feed()
    _start(feed, A, B, C)
    feed.send(completion(A), A)
    feed.send(result("qa-engineer"), B)
    assert _group_status(feed) == []
    last = feed.send(completion(C), C)
    assert kinds(last)[-1] is DecisionType.GROUP_STATUS
    assert _group_status(feed) == ["continue: 3/3 completed, 0 failed, 0 active"]
    assert feed.state.status is GroupVerdict.CONTINUE
    feed.send(Heartbeat(), C)  # after the end: nothing new to report
    assert len(_group_status(feed)) == 1


def test_any_partial_asks_for_review() -> None:
    feed = Feed()
    _start(feed, A, B)
    feed.send(completion(A, "partial_success"), A)
    feed.send(completion(B), B)
    assert feed.state.status is GroupVerdict.REVIEW
    outcome = feed.state.agents[A].completion
    assert outcome is not None and outcome.status is ResultStatus.PARTIAL


def test_the_same_agent_id_failing_in_two_groups_gets_two_retries() -> None:
    # retries are agents with ids of their own: shared, they would share an inbox and a launcher slot
    launched = []
    for group in ("group-a", "group-b"):
        feed = Feed(group=group)
        failed = feed.send(result("security-auditor", ResultStatus.FAILED, summary="crashed"), A)
        launch = one(failed, EnvelopeType.LAUNCH)
        launched.append((launch.new_agent_id, launch.request_id))
    assert len({agent for agent, _ in launched}) == 2 and len({request for _, request in launched}) == 2


def test_failure_is_retried_once_with_reduced_scope_then_escalated() -> None:
    feed = Feed()
    _start(feed, A, B)
    feed.send(completion(B), B)
    failed = feed.send(
        result("security-auditor", ResultStatus.FAILED, summary="Parser crashed on src/auth"), A
    )
    retry_id = retry_agent_id(GROUP, A, 2)
    (launched,) = of_type(failed, EnvelopeType.LAUNCH, Target.TASKS)
    assert launched.agent_id == retry_id
    launch = one(failed, EnvelopeType.LAUNCH)
    assert (launch.reason, launch.attempt, launch.new_agent_id, launch.request_id) == (
        LaunchReason.RETRY,
        2,
        retry_id,
        retry_request_id(GROUP, A, 2),
    )
    assert "REDUCED SCOPE" in launch.task and f"analyse module {A}" in launch.task
    assert "Parser crashed on src/auth" in (launch.context or "")
    assert kinds(failed) == [
        DecisionType.COMPLETED,
        DecisionType.LAUNCH_REQUESTED,
        DecisionType.RETRY_REQUESTED,
    ]
    assert feed.state.agents[A].retried_by == retry_id
    retry = feed.state.agents[retry_id]
    assert (retry.attempt, retry.retry_of, retry.name, retry.state) == (
        2,
        A,
        "security-auditor",
        AgentState.RUNNING,
    )
    assert _group_status(feed) == []  # the retry keeps the group open

    again = feed.send(completion(retry_id, "failed", "still crashing"), retry_id)
    assert of_type(again, EnvelopeType.LAUNCH) == []
    assert DecisionType.ESCALATED in kinds(again)
    (escalation,) = feed.state.escalations
    assert escalation.agent_id == retry_id and "after 2 attempt(s)" in escalation.reason
    assert feed.state.status is GroupVerdict.ESCALATE
    assert _group_status(feed) == ["escalate: 1/2 completed, 1 failed, 0 active"]
    assert summarize(feed.state).escalations == (escalation,)
    wrong = feed.send(HumanDismiss(), A)  # the first attempt's id, which a person knows
    assert wrong.rejected == f"agent {A!r} has no open escalation; its retry {retry_id!r} has: dismiss that"


def test_a_retry_is_told_what_the_failed_report_said() -> None:
    """Seed 002's error result format: its error, root cause, actions and blockers go to the retry."""
    feed = Feed()
    _start(feed, A)
    report = result("security-auditor", ResultStatus.FAILED, summary="No database credentials").model_copy(
        update={
            "error": ErrorDetails(
                type="ConfigError",
                message="DATABASE_URL is invalid",
                occurred_at="db.py:4",
                recoverable=False,
            ),
            "root_cause": "The credentials expired",
            "attempted_actions": ["Read .env", "Tried the default URL"],
            "blockers": [ResultBlocker(description="Database credentials are invalid", resolution="a URL")],
        }
    )
    launch = one(feed.send(report, A), EnvelopeType.LAUNCH)
    assert launch.context == (
        f"Previous attempt {A} ended FAILED:\nNo database credentials\n\n"
        "Error:\n- ConfigError DATABASE_URL is invalid (at db.py:4) (not recoverable)\n"
        "Root cause:\n- The credentials expired\n"
        "Attempted:\n- Read .env\n- Tried the default URL\n"
        "Blockers:\n- Database credentials are invalid (needs: a URL)"
    )
    assert [v.rule for v in feed.state.agents[A].violations] == [ViolationRule.UNRESOLVED_BLOCKER]
    feed.send(completion(launch.new_agent_id), launch.new_agent_id)  # the retry made it good
    assert feed.state.status is GroupVerdict.CONTINUE
    assert unresolved_blockers(summarize(feed.state)) == []  # what inbox lists for review agrees


def test_a_successful_retry_replaces_the_failed_attempt() -> None:
    feed = Feed()
    _start(feed, A)
    feed.send(completion(A, "failed", "timeout"), A)
    retry_id = retry_agent_id(GROUP, A, 2)
    feed.send(completion(retry_id), retry_id)
    assert feed.state.status is GroupVerdict.CONTINUE
    assert feed.state.progress.render() == "1/1 completed, 0 failed, 0 active"


def test_every_retry_restates_the_first_attempts_task_once() -> None:
    feed = Feed(Policy(max_retries=2))
    _start(feed, A)
    feed.send(completion(A, "failed", "crashed"), A)
    second = retry_agent_id(GROUP, A, 2)
    third = one(feed.send(completion(second, "failed", "crashed again"), second), EnvelopeType.LAUNCH)
    assert third.new_agent_id == retry_agent_id(GROUP, second, 3)
    assert third.task.count("REDUCED SCOPE") == 1 and "(attempt 3)" in third.task
    assert third.task.count("Original task:") == 1 and third.task.endswith(f"analyse module {A}")


def test_no_retries_means_immediate_escalation() -> None:
    feed = Feed(Policy(max_retries=0))
    _start(feed, A)
    outcome = feed.send(completion(A, "failed"), A)
    assert of_type(outcome, EnvelopeType.LAUNCH) == []
    assert kinds(outcome) == [DecisionType.COMPLETED, DecisionType.ESCALATED, DecisionType.GROUP_STATUS]
    assert feed.state.agents[A].escalated


def test_dismissing_an_escalation_takes_it_off_the_list_and_nothing_else() -> None:
    feed = Feed(Policy(max_retries=0))
    _start(feed, A, B)
    feed.send(completion(A, "failed"), A)
    feed.send(completion(B, "failed"), B)
    outcome = feed.send(HumanDismiss(note="fixed by hand"), A)
    assert [(d.decision, d.detail) for d in decisions(outcome)] == [
        (DecisionType.ESCALATION_DISMISSED, "dismissed: fixed by hand")
    ]
    assert [e.agent_id for e in feed.state.escalations] == [B]
    record = feed.state.agents[A]
    assert record.state is AgentState.FAILED and record.escalated
    assert feed.state.status is GroupVerdict.ESCALATE
    again = feed.send(HumanDismiss(), A)
    assert again.rejected == f"agent {A!r} has no open escalation"
    assert [e.agent_id for e in feed.state.escalations] == [B]


def test_exit_without_completion_fails_and_is_retried() -> None:
    feed = Feed()
    _start(feed, A)
    outcome = feed.send(AgentExited(exit_code=1, stderr_tail="Traceback: boom"), A)
    record = feed.state.agents[A]
    assert record.state is AgentState.FAILED and record.exited and record.exit_code == 1
    assert record.completion is not None and "exit code 1" in record.completion.summary
    assert "boom" in record.completion.summary
    assert one(outcome, EnvelopeType.LAUNCH).reason is LaunchReason.RETRY


def test_exit_after_completion_or_while_waiting_changes_nothing() -> None:
    feed = Feed()
    _start(feed, A, B)
    feed.send(completion(A), A)
    after = feed.send(AgentExited(exit_code=0, completed=True), A)
    assert kinds(after) == [] and feed.state.agents[A].state is AgentState.COMPLETED
    feed.send(clarification(B), B)
    waiting = feed.send(AgentExited(exit_code=0), B)
    assert kinds(waiting) == []
    assert feed.state.agents[B].state is AgentState.AWAITING_CLARIFICATION
    assert feed.state.agents[B].exited


def test_a_later_report_does_not_change_the_outcome() -> None:
    feed = Feed()
    _start(feed, A)
    feed.send(completion(A, "failed"), A)
    later = feed.send(completion(A, "success"), A)
    assert of_type(later, EnvelopeType.LAUNCH) == []
    assert kinds(later) == [DecisionType.COMPLETED]
    assert decisions(later)[0].detail == "a later COMPLETION_REPORT says SUCCESS; outcome stays FAILED"
    record = feed.state.agents[A]
    assert record.extra_reports == 1 and record.completion is not None
    assert record.completion.status is ResultStatus.FAILED
    assert sum(1 for a in feed.state.agents.values() if a.retry_of == A) == 1


@pytest.mark.parametrize("result_first", [True, False])
def test_blockers_of_a_result_make_the_group_review_before_or_after_its_completion_report(
    result_first: bool,
) -> None:
    """The protocol has an agent print both; the second is a later report, yet its blockers count."""
    feed = Feed()
    _start(feed, A)
    report = result("security-auditor", ResultStatus.SUCCESS).model_copy(
        update={"blockers": [ResultBlocker(description="npm audit could not run", resolution="node_modules")]}
    )
    if result_first:
        feed.send(report, A)
    feed.send(completion(A), A)
    if not result_first:
        feed.send(report, A)
    assert feed.state.status is GroupVerdict.REVIEW
    assert len(_group_status(feed)) == (1 if result_first else 2)
    assert "1 agent(s) finished with a blocker unresolved" in _group_status(feed)[-1]


def test_a_later_report_that_agrees_is_counted_without_a_decision() -> None:
    feed = Feed()
    _start(feed, A)
    feed.send(completion(A, "success"), A)
    later = feed.send(completion(A, "success"), A)
    assert later.emits == []
    assert feed.state.agents[A].extra_reports == 1


def test_a_pending_delegation_keeps_the_group_open() -> None:
    feed = Feed()
    _start(feed, A)
    request = delegate(A, priority="P2")
    feed.send(request, A)
    feed.send(completion(A), A)
    assert _group_status(feed) == []
    feed.send(HumanDeny(request_id=request.request_id(), reason="not needed"), A)
    assert _group_status(feed) == ["continue: 1/1 completed, 0 failed, 0 active"]


def test_the_agent_budget_counts_retries_and_not_scripts() -> None:
    feed = Feed(Policy(max_agents_per_group=2))
    feed.send(finding("scanner", id="SEC-001"), "scanner-script")  # a script: no agent of the budget
    _start(feed, A, B)
    first = feed.send(result("security-auditor", ResultStatus.FAILED, summary="crashed"), A)
    assert DecisionType.ESCALATED in kinds(first) and of_type(first, EnvelopeType.LAUNCH) == []
    [escalation] = feed.state.escalations
    assert escalation.reason.endswith("(not retried: the group's budget of 2 agents is used up)")
    feed2 = Feed(Policy(max_agents_per_group=3))
    _start(feed2, A, B)
    assert of_type(feed2.send(result("security-auditor", ResultStatus.FAILED), A), EnvelopeType.LAUNCH)


def test_optional_work_that_fails_is_a_gap_not_an_escalation() -> None:
    """Seed 001: "Retry once with reduced scope if critical ... Proceed with available results if
    non-critical, documenting the gap". A delegate asked for as `optional` is the non-critical kind."""
    for ending in (completion("x", "failed", "docs site down"), AgentExited(exit_code=1)):
        feed = Feed()
        _start(feed, A)
        optional, parallel = (
            delegate(A, independence="optional"),
            delegate(A, stamp="2026-01-11T10:05:00-05:00"),
        )
        feed.send(optional, A)
        feed.send(parallel, A)
        helper = delegate_agent_id(GROUP, optional.request_id())
        other = delegate_agent_id(GROUP, parallel.request_id())
        failed = feed.send(ending, helper)
        assert of_type(failed, EnvelopeType.LAUNCH) == [], ending
        assert DecisionType.ESCALATED not in kinds(failed)
        assert "optional work: not retried" in decisions(failed)[-1].detail
        feed.send(completion(A), A)
        feed.send(completion(other), other)
        assert feed.state.escalations == ()
        assert feed.state.status is GroupVerdict.CONTINUE
        assert _group_status(feed) == [
            f"continue: 2/3 completed, 1 failed, 0 active; optional work failed: {helper}, "
            "results may be incomplete"
        ]


def test_a_parallel_delegate_that_fails_is_retried() -> None:
    """Its requester goes on without waiting, but did not call it optional: critical work."""
    feed = Feed()
    _start(feed, A)
    request = delegate(A)
    feed.send(request, A)
    helper = delegate_agent_id(GROUP, request.request_id())
    launch = one(feed.send(completion(helper, "failed"), helper), EnvelopeType.LAUNCH)
    assert (launch.reason, launch.new_agent_id) == (LaunchReason.RETRY, retry_agent_id(GROUP, helper, 2))


def test_the_failed_optional_work_is_named_sorted_whatever_the_order_of_the_agents_map() -> None:
    """A state loaded after a take-over holds its agents in the stored hash's order: the group's verdict
    names its gaps in one order all the same."""
    feed = Feed()
    _start(feed, A)
    helpers = []
    for minute in range(4):
        request = delegate(A, independence="optional", stamp=f"2026-01-11T10:{minute:02d}:00-05:00")
        feed.send(request, A)
        helpers.append(delegate_agent_id(GROUP, request.request_id()))
    for helper in helpers:
        feed.send(completion(helper, "failed"), helper)
    assert helpers != sorted(helpers)  # else the maps' order and the sorted one could not be told apart
    done = feed.envelope(completion(A), A)
    for agents in (feed.state.agents, dict(reversed(feed.state.agents.items()))):
        state = feed.state.model_copy(update={"agents": agents})
        [status] = [
            d.detail
            for d in decisions(apply(state, done, Policy()))
            if d.decision is DecisionType.GROUP_STATUS
        ]
        assert status.startswith(
            f"continue: 1/5 completed, 4 failed, 0 active; optional work failed: {', '.join(sorted(helpers))}"
        )
