"""Delegation: the seed's checklist, approval with a launch, denial, human approval, waiting requesters."""

from __future__ import annotations

from datetime import timedelta

import pytest
from rules_kit import (
    GROUP,
    T0,
    Feed,
    clarification,
    completion,
    decisions,
    delegate,
    finding,
    kinds,
    of_type,
    one,
    payloads,
    result,
    stop_dependency,
)

from bus.directives import HumanApprove, HumanDeny, HumanResolve, LaunchReason
from bus.envelope import EnvelopeType
from bus.events import AgentExited, AgentStarted, AgentState, DecisionType, Tick
from bus.findings import Severity
from bus.results import Issue, ResultBlocker, ResultStatus
from bus.signals import BlockerType, DelegateWork, Priority, StopWork
from coordinator.policy import Policy
from coordinator.rules import Target, Verdict, apply, evaluate, summarize
from coordinator.rules.delegation import Check
from coordinator.rules.ids import delegate_agent_id
from coordinator.rules.run import Run
from coordinator.state import AgentRecord, DelegationStatus, GroupState

REQUESTER = "bg-task-jkl012"
BLOCKING_TASK = (
    "Set up security testing infrastructure:\n- Install and configure OWASP ZAP\n"
    "- Create test fixtures for auth scenarios\n- Set up mock API server"
)


def _record(agent_id: str = REQUESTER, depth: int = 0, state: AgentState = AgentState.RUNNING) -> AgentRecord:
    return AgentRecord(agent_id=agent_id, depth=depth, state=state, registered_at=T0, last_seen=T0)


def _group(*records: AgentRecord) -> GroupState:
    return GroupState(group_id="g", agents={r.agent_id: r for r in records})


def _failed_checks(
    request: DelegateWork, requester: AgentRecord, state: GroupState, policy: Policy
) -> list[Check]:
    evaluation = evaluate(request, requester, state, policy)
    return [f.check for f in evaluation.failures]


def test_checklist_passes_a_seed_request() -> None:
    requester = _record()
    evaluation = evaluate(delegate(), requester, _group(requester), Policy())
    assert evaluation.verdict is Verdict.APPROVE and evaluation.failures == ()
    p2 = evaluate(delegate(priority="P2"), requester, _group(requester), Policy())
    assert p2.verdict is Verdict.ASK_HUMAN


@pytest.mark.parametrize(
    ("request_changes", "check"),
    [
        ({"reason": "need help"}, Check.JUSTIFIED),
        ({"task": "Refactor auth"}, Check.WELL_DEFINED),
    ],
)
def test_checklist_rejects_unjustified_or_vague_requests(
    request_changes: dict[str, str], check: Check
) -> None:
    requester = _record()
    assert _failed_checks(delegate(**request_changes), requester, _group(requester), Policy()) == [check]


def test_checklist_priority_must_be_accepted_by_the_policy() -> None:
    requester = _record()
    policy = Policy(auto_approve=frozenset({Priority.P0}), human_approval=frozenset())
    assert _failed_checks(delegate(priority="P1"), requester, _group(requester), policy) == [Check.PRIORITY]


def test_checklist_depth_slots_and_budget() -> None:
    deep = _record(depth=2)
    assert _failed_checks(delegate(), deep, _group(deep), Policy(max_delegation_depth=2)) == [Check.DEPTH]
    requester = _record()
    others = [_record(f"a{i}") for i in range(4)]
    full = _group(requester, *others)
    assert _failed_checks(delegate(), requester, full, Policy(max_parallel_agents=5)) == [Check.SLOTS]
    # a requester that waits for its delegate hands it its own slot
    blocking = delegate(independence="blocks_current_work")
    assert _failed_checks(blocking, requester, full, Policy(max_parallel_agents=5)) == []
    # ...once: a second delegate it waits for needs a slot of its own
    waiting = requester.model_copy(update={"state": AgentState.DELEGATING, "waiting_on": ("a0",)})
    assert _failed_checks(blocking, waiting, _group(waiting, *others), Policy(max_parallel_agents=5)) == [
        Check.SLOTS
    ]
    # finished agents hold no slot but count against the budget
    done = [_record(f"d{i}", state=AgentState.COMPLETED) for i in range(4)]
    group = _group(requester, *done)
    assert _failed_checks(delegate(), requester, group, Policy(max_parallel_agents=2)) == []
    assert _failed_checks(delegate(), requester, group, Policy(max_agents_per_group=5)) == [Check.BUDGET]


def test_checklist_refuses_a_blocking_claim_from_a_finished_agent() -> None:
    finished = _record(state=AgentState.COMPLETED)
    blocking = delegate(independence="blocks_current_work")
    assert _failed_checks(blocking, finished, _group(finished), Policy()) == [Check.INDEPENDENCE]
    assert _failed_checks(delegate(), finished, _group(finished), Policy()) == []


def test_the_same_request_in_two_groups_launches_two_agents() -> None:
    launched = []
    for group in ("group-a", "group-b"):
        feed = Feed(group=group)
        feed.send(AgentStarted(task="security analysis", name="security-auditor"), REQUESTER)
        (launch,) = payloads(feed.send(delegate(), REQUESTER), EnvelopeType.LAUNCH, Target.TASKS)
        launched.append(launch.new_agent_id)
    assert launched[0] != launched[1]


def test_approved_parallel_delegation_launches_and_acknowledges() -> None:
    feed = Feed()
    feed.send(AgentStarted(task="security analysis", name="security-auditor"), REQUESTER)
    request = delegate()
    outcome = feed.send(request, REQUESTER)
    new_id = delegate_agent_id(GROUP, request.request_id())
    (launched,) = of_type(outcome, EnvelopeType.LAUNCH, Target.TASKS)
    assert launched.agent_id == new_id
    launch = one(outcome, EnvelopeType.LAUNCH, Target.TASKS)
    assert launch.model_dump() == {
        "request_id": request.request_id(),
        "new_agent_id": new_id,
        "parent_agent_id": REQUESTER,
        "reason": LaunchReason.DELEGATION,
        "task": request.new_task_description.strip(),
        "context": launch.context,
        "priority": Priority.P1,
        "depth": 1,
        "attempt": 1,
        "expires_at": launched.ts + timedelta(seconds=feed.policy.lost_timeout_seconds),
    }
    assert "AUTH_ANALYSIS.md" in (launch.context or "")
    assert "Continue security analysis of remaining modules" in (launch.context or "")
    approved = one(outcome, EnvelopeType.DELEGATION_APPROVED, Target.INBOX)
    assert approved.render().startswith(
        "## DELEGATION APPROVED\n\n"
        f"New agent launched: {new_id}\n"
        "Task: Refactor authentication module to use unified AuthProvider pattern\n"
        "Coordination: This agent: Continue security analysis of remaining modules"
    )
    assert of_type(outcome, EnvelopeType.DELEGATION_APPROVED)[0].agent_id == REQUESTER
    assert kinds(outcome) == [DecisionType.LAUNCH_REQUESTED, DecisionType.DELEGATION_APPROVED]
    assert decisions(outcome)[1].request_id == request.request_id()
    assert feed.state.agents[REQUESTER].state is AgentState.RUNNING
    child = feed.state.agents[new_id]
    assert (child.state, child.depth, child.parent_agent_id, child.blocks_parent) == (
        AgentState.RUNNING,
        1,
        REQUESTER,
        False,
    )
    assert feed.state.delegations[request.request_id()].status is DelegationStatus.APPROVED


def test_denied_delegation_gives_a_reason_and_an_alternative() -> None:
    feed = Feed()
    outcome = feed.send(delegate(task="Refactor auth"), REQUESTER)
    assert of_type(outcome, EnvelopeType.LAUNCH) == []
    denied = one(outcome, EnvelopeType.DELEGATION_DENIED, Target.INBOX)
    assert "shorter than 40 characters" in denied.reason
    assert denied.alternative.startswith("Continue the work yourself")
    text = denied.render()
    assert text.startswith("## DELEGATION DENIED\n\nReason: ")
    assert "## RESUME INSTRUCTIONS\nContinue your task without the delegated work." in text
    assert kinds(outcome)[-1] is DecisionType.DELEGATION_DENIED
    assert len(feed.state.agents) == 1


def test_full_group_denies_with_retry_alternative() -> None:
    feed = Feed(Policy(max_parallel_agents=1))
    outcome = feed.send(delegate(), REQUESTER)
    denied = one(outcome, EnvelopeType.DELEGATION_DENIED)
    assert "no parallel slot free (1 of 1 in use)" in denied.reason
    assert denied.alternative.startswith("Retry the delegation when a parallel slot frees")


def test_a_denied_request_asked_again_with_a_better_reason_is_evaluated() -> None:
    """The denial says to ask again with a concrete reason; an agent that keeps the timestamp and task
    (a copy of its block) and mends the reason asks a new request."""
    feed = Feed()
    one(feed.send(delegate(reason="big"), REQUESTER), EnvelopeType.DELEGATION_DENIED)
    again = feed.send(delegate(), REQUESTER)
    assert again.rejected is None
    one(again, EnvelopeType.DELEGATION_APPROVED)


def test_a_request_denied_for_want_of_a_slot_is_evaluated_again_when_asked_again() -> None:
    """Asked again as the denial says, with the time it is asked; the same block again is a recap."""
    feed = Feed(Policy(max_parallel_agents=1))
    one(feed.send(delegate(), REQUESTER), EnvelopeType.DELEGATION_DENIED)
    feed.policy = Policy(max_parallel_agents=2)  # a slot frees
    recap = feed.send(delegate(), REQUESTER)
    assert recap.rejected is not None and "already received" in recap.rejected
    again = feed.send(delegate(stamp="2026-01-11T11:00:00-05:00"), REQUESTER)
    assert again.rejected is None
    one(again, EnvelopeType.DELEGATION_APPROVED)


def test_the_same_request_twice_is_rejected() -> None:
    feed = Feed()
    feed.send(delegate(), REQUESTER)
    again = feed.send(delegate(), REQUESTER)  # same signal re-published under another entry id
    assert again.rejected is not None and "already received" in again.rejected
    assert of_type(again, EnvelopeType.LAUNCH) == []


def test_two_agents_that_print_the_same_request_make_two_requests() -> None:
    """The block names an agent id that is not its sender's (the seed's example, copied by both): each
    sender's request is its own, evaluated and answered; the same sender's block again is a recap."""
    feed = Feed()
    first = feed.send(delegate(), "auditor-a")
    second = feed.send(delegate(), "auditor-b")
    assert second.rejected is None
    assert one(first, EnvelopeType.DELEGATION_APPROVED, Target.INBOX).request_id == delegate().request_id(
        "auditor-a"
    )
    approved = of_type(second, EnvelopeType.DELEGATION_APPROVED, Target.INBOX)
    assert [e.agent_id for e in approved] == ["auditor-b"]
    assert {d.requester_id for d in feed.state.delegations.values()} == {"auditor-a", "auditor-b"}
    assert delegate().request_id(REQUESTER) == delegate().request_id()  # its own id: as before
    recap = feed.send(delegate(), "auditor-b")
    assert recap.rejected is not None and "already received" in recap.rejected


@pytest.mark.parametrize("in_a_run", [False, True])
def test_a_rejected_request_takes_back_its_sender_s_registration(in_a_run: bool) -> None:
    """The sender of a signal is registered before its rule runs; a rejection takes that back too."""
    feed = Feed()
    feed.send(delegate(), REQUESTER)
    stored = next(iter(feed.state.delegations.values()))
    received = stored.model_copy(update={"request_id": delegate().request_id("newcomer")})
    state = feed.state.model_copy(update={"delegations": {received.request_id: received}})
    run = Run() if in_a_run else None
    outcome = apply(state, feed.envelope(delegate(), "newcomer"), feed.policy, run)
    assert outcome.rejected is not None and "already received" in outcome.rejected
    assert "newcomer" not in outcome.state.agents and outcome.state.agents == state.agents
    assert [d.decision for d in decisions(outcome)] == [DecisionType.REJECTED]


def test_p2_waits_for_a_human_then_launches_on_approve() -> None:
    feed = Feed()
    request = delegate(priority="P2")
    pending = feed.send(request, REQUESTER)
    assert kinds(pending)[-1] is DecisionType.DELEGATION_PENDING
    assert decisions(pending)[-1].request_id == request.request_id()
    assert of_type(pending, EnvelopeType.LAUNCH) == []
    (listed,) = summarize(feed.state).pending_delegations
    assert (listed.request_id, listed.requester_id, listed.priority) == (
        request.request_id(),
        REQUESTER,
        Priority.P2,
    )
    approved = feed.send(HumanApprove(request_id=request.request_id(), reason="worth it"), "human")
    (launch,) = payloads(approved, EnvelopeType.LAUNCH, Target.TASKS)
    assert launch.new_agent_id == delegate_agent_id(GROUP, request.request_id())
    assert one(approved, EnvelopeType.DELEGATION_APPROVED).new_agent_id == launch.new_agent_id
    assert summarize(feed.state).pending_delegations == ()
    twice = feed.send(HumanApprove(request_id=request.request_id()), "human")
    assert twice.rejected == f"delegation request {request.request_id()!r} is already approved"


def test_a_human_approval_is_held_to_the_slots_and_the_request_waits_on() -> None:
    """The checklist's judgement is the human's, its resources are not: with no parallel slot free
    the approval is rejected, the request stays pending, and an approval once a slot frees launches."""
    feed = Feed(Policy(max_parallel_agents=2))
    request = delegate(priority="P2")
    feed.send(request, REQUESTER)
    feed.send(AgentStarted(task="other"), "other")
    full = feed.send(HumanApprove(request_id=request.request_id()), "human")
    assert full.rejected == (
        f"delegation request {request.request_id()} cannot be launched now: no parallel slot free "
        "(2 of 2 in use) (approve it again once that changes, or deny it)"
    )
    assert of_type(full, EnvelopeType.LAUNCH) == []
    assert [d.request_id for d in summarize(feed.state).pending_delegations] == [request.request_id()]
    feed.send(completion("other"), "other")
    approved = feed.send(HumanApprove(request_id=request.request_id()), "human")
    assert approved.rejected is None and len(payloads(approved, EnvelopeType.LAUNCH, Target.TASKS)) == 1


def test_p2_denied_by_a_human() -> None:
    feed = Feed()
    request = delegate(priority="P2")
    feed.send(request, REQUESTER)
    command = HumanDeny(
        request_id=request.request_id(),
        reason="Refactoring should be deferred until security analysis complete",
        alternative="Document refactoring recommendations in final report",
    )
    outcome = feed.send(command, REQUESTER)
    denied = one(outcome, EnvelopeType.DELEGATION_DENIED, Target.INBOX)
    assert denied.render().startswith(
        "## DELEGATION DENIED\n\n"
        "Reason: Refactoring should be deferred until security analysis complete\n"
        "Alternative: Document refactoring recommendations in final report"
    )
    assert feed.state.delegations[request.request_id()].status is DelegationStatus.DENIED
    assert of_type(outcome, EnvelopeType.LAUNCH) == []


def test_a_human_s_resume_instructions_replace_the_default_ones() -> None:
    """Seed 000's "Approve and Launch" and "Deny and Redirect" end with the parent's own resume
    instructions; a blocking request's requester is still told to wait for the results first."""
    feed = Feed()
    denied_request, parallel, blocking = (
        delegate(priority="P2", independence=independence, stamp=f"2026-01-11T10:0{n}:00-05:00")
        for n, independence in enumerate(("can_proceed_parallel",) * 2 + ("blocks_current_work",))
    )
    feed.send(denied_request, REQUESTER)
    deny = HumanDeny(
        request_id=denied_request.request_id(),
        reason="not now",
        instructions="Add refactoring recommendations to SECURITY_RECOMMENDATIONS.md",
    )
    denied = one(feed.send(deny, "human"), EnvelopeType.DELEGATION_DENIED, Target.INBOX)
    assert denied.render().endswith(
        "## RESUME INSTRUCTIONS\nAdd refactoring recommendations to SECURITY_RECOMMENDATIONS.md"
    )
    feed.send(parallel, REQUESTER)
    approve = HumanApprove(request_id=parallel.request_id(), instructions="Avoid src/auth/ meanwhile")
    approved = one(feed.send(approve, "human"), EnvelopeType.DELEGATION_APPROVED, Target.INBOX)
    assert approved.render().endswith("## RESUME INSTRUCTIONS\nAvoid src/auth/ meanwhile")
    feed.send(blocking, REQUESTER)
    approve = HumanApprove(request_id=blocking.request_id(), instructions="Rerun the audit")
    waits = one(feed.send(approve, "human"), EnvelopeType.DELEGATION_APPROVED, Target.INBOX)
    assert waits.render().endswith(
        f"## RESUME INSTRUCTIONS\nWait: you will be resumed with the results of {waits.new_agent_id} when "
        "it completes. Then: Rerun the audit"
    )
    done = feed.send(completion(waits.new_agent_id), waits.new_agent_id)
    assert one(done, EnvelopeType.DELEGATION_COMPLETED).resume_instructions == "Rerun the audit"


def test_unknown_request_id_is_rejected() -> None:
    feed = Feed()
    feed.send(delegate(priority="P2"), REQUESTER)
    outcome = feed.send(HumanApprove(request_id="dlg-nope"), "human")
    assert outcome.rejected == "unknown delegation request 'dlg-nope'"
    assert kinds(outcome) == [DecisionType.REJECTED]


def _blocking(feed: Feed) -> str:
    request = delegate(independence="blocks_current_work", priority="P0", task=BLOCKING_TASK)
    outcome = feed.send(request, REQUESTER)
    approved = one(outcome, EnvelopeType.DELEGATION_APPROVED)
    assert "Wait: you will be resumed" in approved.render()
    return str(approved.new_agent_id)


def test_a_delegate_s_retry_and_its_new_session_keep_the_request_s_priority() -> None:
    feed = Feed()
    delegate_id = _blocking(feed)  # P0
    failed = feed.send(completion(delegate_id, "failed", "ZAP would not install"), delegate_id)
    retry = one(failed, EnvelopeType.LAUNCH, Target.TASKS)
    assert (retry.reason, retry.priority) == (LaunchReason.RETRY, Priority.P0)
    feed.send(stop_dependency(retry.new_agent_id), retry.new_agent_id)
    feed.send(AgentExited(exit_code=0, resumable=False), retry.new_agent_id)
    resumed = feed.send(HumanResolve(resolution="Installed ZAP by hand"), retry.new_agent_id)
    again = one(resumed, EnvelopeType.LAUNCH, Target.TASKS)
    assert (again.reason, again.priority) == (LaunchReason.RESUME, Priority.P0)


@pytest.mark.parametrize("status", ["success", "partial_success"])
def test_a_blocking_request_s_own_resume_prompt_resumes_its_requester_on_success(status: str) -> None:
    """Seed 000's blocking request says what to resume its requester with once the delegate completes."""
    feed = Feed()
    coordination = (
        "This agent: Will STOP_WORK until infrastructure ready\n"
        "New agent: Set up infrastructure, report completion\n"
        'Resume: When new agent completes, resume with "Infrastructure ready, continue testing"'
    )
    request = delegate(independence="blocks_current_work", priority="P0", task=BLOCKING_TASK)
    request = request.model_copy(update={"coordination": coordination})
    delegate_id = one(feed.send(request, REQUESTER), EnvelopeType.DELEGATION_APPROVED).new_agent_id
    report = completion(delegate_id, status, "Infrastructure set up")
    directive = one(feed.send(report, delegate_id), EnvelopeType.DELEGATION_COMPLETED)
    assert directive.resume_instructions == (
        "Infrastructure ready, continue testing"
        if status == "success"
        else "The delegated work is done in part. Review its results, decide what of it you can rely on, "
        "and continue your task; report what it left undone."
    )


def test_blocking_delegation_resumes_the_requester_when_the_delegate_completes() -> None:
    feed = Feed()
    delegate_id = _blocking(feed)
    requester = feed.state.agents[REQUESTER]
    assert requester.state is AgentState.DELEGATING and requester.waiting_on == (delegate_id,)
    report = completion(delegate_id, summary="Infrastructure ready: ZAP configured, fixtures created")
    outcome = feed.send(report, delegate_id)
    (resumed,) = of_type(outcome, EnvelopeType.DELEGATION_COMPLETED, Target.INBOX)
    assert resumed.agent_id == REQUESTER
    directive = one(outcome, EnvelopeType.DELEGATION_COMPLETED)
    assert (directive.delegate_agent_id, directive.status) == (delegate_id, "SUCCESS")
    assert directive.deliverables == "- SECURITY_ANALYSIS.md"
    assert directive.render().startswith(
        "## DELEGATED WORK COMPLETE\n\n"
        f"Agent: {delegate_id}\nStatus: SUCCESS\n"
        "Summary: Infrastructure ready: ZAP configured, fixtures created"
    )
    requester = feed.state.agents[REQUESTER]
    assert requester.state is AgentState.RUNNING and requester.waiting_on == ()
    assert requester.resumed_at == T0 + timedelta(seconds=feed.count)
    resumed_decision = next(d for d in decisions(outcome) if d.decision is DecisionType.DELEGATION_COMPLETED)
    assert resumed_decision.state is AgentState.RUNNING
    assert resumed_decision.request_id == directive.request_id == feed.state.agents[delegate_id].request_id


def test_a_requester_is_resumed_with_its_delegates_result_report() -> None:
    feed = Feed()
    delegate_id = _blocking(feed)
    report = result("security-auditor", ResultStatus.PARTIAL, findings=[finding("security-auditor")])
    report = report.model_copy(
        update={
            "next_steps": ["Rotate the JWT secret"],
            "blockers": [ResultBlocker(description="No staging access", resolution="a staging token")],
            "issues": [Issue(title="Raw SQL", description="used in migrations", severity=Severity.IMPORTANT)],
        }
    )
    directive = one(feed.send(report, delegate_id), EnvelopeType.DELEGATION_COMPLETED)
    assert directive.results == (
        "Findings:\n- [critical] SEC-001 Hardcoded JWT secret (src/config/jwt.ts:8, confidence 95)\n"
        "Issues:\n- [important] Raw SQL: used in migrations\n"
        "Next steps:\n- Rotate the JWT secret\n"
        "Blockers:\n- No staging access (needs: a staging token)"
    )
    assert f"## RESULTS\n{directive.results}\n\n## RESUME INSTRUCTIONS\n" in directive.render()


def test_a_result_lists_at_most_twenty_findings_to_its_requester() -> None:
    feed = Feed()
    delegate_id = _blocking(feed)
    many = [finding("qa-engineer", id=f"QA-{n:03}", line=n + 1, title=f"case {n}") for n in range(25)]
    directive = one(
        feed.send(result("qa-engineer", findings=many), delegate_id), EnvelopeType.DELEGATION_COMPLETED
    )
    lines = directive.results.splitlines()
    assert lines[0] == "Findings:" and len(lines) == 22
    assert lines[-1] == f"- … and 5 more (`subagent-bus findings --group {GROUP}`)"


def test_blocking_delegate_that_fails_is_retried_and_the_requester_waits_for_the_retry() -> None:
    feed = Feed()
    delegate_id = _blocking(feed)
    failed = feed.send(completion(delegate_id, "failed", "ZAP would not install"), delegate_id)
    assert of_type(failed, EnvelopeType.DELEGATION_COMPLETED) == []
    retry = one(failed, EnvelopeType.LAUNCH).new_agent_id
    assert feed.state.agents[REQUESTER].waiting_on == (retry,)
    assert feed.state.agents[retry].blocks_parent
    done = feed.send(completion(retry, "partial_success", "ZAP installed, fixtures missing"), retry)
    directive = one(done, EnvelopeType.DELEGATION_COMPLETED)
    assert (directive.delegate_agent_id, directive.status) == (retry, "PARTIAL")
    assert "done in part. Review its results" in directive.resume_instructions  # not "done": seed 001
    assert directive.request_id == feed.state.agents[delegate_id].request_id  # the original request
    assert feed.state.agents[REQUESTER].state is AgentState.RUNNING


def test_blocking_delegate_that_fails_for_good_resumes_the_requester_with_the_failure() -> None:
    feed = Feed(Policy(max_retries=0))
    delegate_id = _blocking(feed)
    outcome = feed.send(completion(delegate_id, "failed", "ZAP would not install"), delegate_id)
    assert DecisionType.ESCALATED in kinds(outcome)
    directive = one(outcome, EnvelopeType.DELEGATION_COMPLETED)
    assert directive.status == "FAILED"
    assert "failed" in directive.resume_instructions
    assert feed.state.agents[REQUESTER].state is AgentState.RUNNING


def test_pending_blocking_request_holds_the_requester_until_denied() -> None:
    feed = Feed()
    request = delegate(independence="blocks_current_work", priority="P2", task=BLOCKING_TASK)
    pending = feed.send(request, REQUESTER)
    assert decisions(pending)[-1].state is AgentState.DELEGATING
    assert feed.state.agents[REQUESTER].state is AgentState.DELEGATING
    feed.send(HumanDeny(request_id=request.request_id(), reason="not now"), "human")
    assert feed.state.agents[REQUESTER].state is AgentState.RUNNING


def test_requester_with_two_blocking_delegates_resumes_after_both() -> None:
    feed = Feed()
    first = _blocking(feed)
    second_request = delegate(
        independence="blocks_current_work",
        task=BLOCKING_TASK + "\n- second",
        stamp="2026-01-11T10:05:00-05:00",
    )
    second = one(feed.send(second_request, REQUESTER), EnvelopeType.DELEGATION_APPROVED).new_agent_id
    assert feed.state.agents[REQUESTER].waiting_on == (first, second)
    halfway = feed.send(completion(first), first)
    assert feed.state.agents[REQUESTER].state is AgentState.DELEGATING
    assert f"still waiting for {second}" in decisions(halfway)[-1].detail
    assert one(halfway, EnvelopeType.DELEGATION_COMPLETED).resume_instructions == (
        "Do not go on yet: you will be resumed once the work you wait for is done. "
        "Then: The delegated work is done. Continue your task using its results."
    )
    last = feed.send(completion(second), second)
    assert feed.state.agents[REQUESTER].state is AgentState.RUNNING
    assert one(last, EnvelopeType.DELEGATION_COMPLETED).resume_instructions.startswith("The delegated work")


def test_a_requester_that_stops_to_wait_for_its_delegate_is_resumed_by_its_results() -> None:
    """Seed 000's blocking delegation: "This agent: Will STOP_WORK until infrastructure ready ... Resume:
    When new agent completes". That stop is the wait itself: no blocker for a human to resolve."""
    feed = Feed()
    delegate_id = _blocking(feed)
    stop = stop_dependency(REQUESTER)
    waiting = feed.send(stop, REQUESTER)
    (decision,) = decisions(waiting)
    assert decision.decision is DecisionType.STATE_CHANGED and "taken as its wait" in decision.detail
    requester = feed.state.agents[REQUESTER]
    assert (requester.state, requester.blocker) == (AgentState.DELEGATING, None)
    outcome = feed.send(completion(delegate_id), delegate_id)
    assert one(outcome, EnvelopeType.DELEGATION_COMPLETED).resume_instructions == (
        "The delegated work is done. Continue your task using its results."
    )
    assert feed.state.agents[REQUESTER].state is AgentState.RUNNING
    assert kinds(feed.send(stop, REQUESTER)) == [DecisionType.REJECTED]  # quoted once resumed: a recap


def test_a_requester_blocked_on_something_else_is_told_to_wait_for_its_blocker() -> None:
    """A stop a delegate cannot settle (missing information, a resource limit, an error) opens a blocker
    while the agent waits: the delegate's results tell it to wait for that blocker's resolution."""
    for blocker_type in (BlockerType.MISSING_INFO, BlockerType.RESOURCE_LIMIT, BlockerType.ERROR):
        feed = Feed()
        delegate_id = _blocking(feed)
        feed.send(_stop(blocker_type), REQUESTER)
        outcome = feed.send(completion(delegate_id), delegate_id)
        assert one(outcome, EnvelopeType.DELEGATION_COMPLETED).resume_instructions == (
            "Do not go on yet: you will be resumed once your blocker is resolved. "
            "Then: The delegated work is done. Continue your task using its results."
        ), blocker_type
        assert feed.state.agents[REQUESTER].state is AgentState.BLOCKED


def _stop(blocker_type: BlockerType) -> StopWork:
    fields = stop_dependency(REQUESTER).model_dump(mode="json", exclude_none=True)
    if blocker_type is BlockerType.ERROR:
        fields["stop_reason"] = "error"
    return StopWork.model_validate({**fields, "blocker_type": blocker_type.value})


def test_a_human_decision_on_a_request_does_not_tell_a_requester_held_since_to_go_on() -> None:
    """A P2 request waits for a human; the requester asks a question meanwhile (or stops): neither the
    approval of a parallel request nor a denial may tell it to continue before it is answered."""
    for held_by, signal, for_what in (
        ("questions", clarification(REQUESTER), "your questions are answered"),
        ("blocker", _stop(BlockerType.MISSING_INFO), "your blocker is resolved"),
    ):
        feed = Feed()
        parallel = delegate(priority="P2")
        blocking = delegate(
            independence="blocks_current_work",
            priority="P2",
            task=BLOCKING_TASK,
            stamp="2026-01-11T10:05:00-05:00",
        )
        feed.send(parallel, REQUESTER)
        feed.send(blocking, REQUESTER)
        feed.send(signal, REQUESTER)
        approved = one(
            feed.send(HumanApprove(request_id=parallel.request_id()), "human"),
            EnvelopeType.DELEGATION_APPROVED,
        )
        denied = one(
            feed.send(HumanDeny(request_id=blocking.request_id(), reason="not now"), "human"),
            EnvelopeType.DELEGATION_DENIED,
        )
        for directive in (approved, denied):
            assert directive.resume_instructions is not None, held_by
            assert directive.resume_instructions.startswith(
                f"Do not go on yet: you will be resumed once {for_what}. Then: Continue your"
            ), (held_by, directive.resume_instructions)
        assert feed.state.agents[REQUESTER].state is not AgentState.RUNNING


def test_a_requester_that_finished_meanwhile_gets_no_directive() -> None:
    feed = Feed()
    request = delegate(priority="P2")
    feed.send(request, REQUESTER)
    feed.send(completion(REQUESTER), REQUESTER)
    outcome = feed.send(HumanApprove(request_id=request.request_id()), "human")
    assert of_type(outcome, EnvelopeType.DELEGATION_APPROVED) == []
    assert one(outcome, EnvelopeType.LAUNCH).parent_agent_id == REQUESTER
    assert kinds(outcome)[-1] is DecisionType.DELEGATION_APPROVED


def test_a_blocking_request_still_waiting_for_a_human_is_withdrawn_when_its_requester_finishes() -> None:
    """Nothing would wait for its delegate's results: denied, so the group settles and no human is asked
    (a parallel request's work stands on its own, and waits on)."""
    feed = Feed()
    blocking = delegate(independence="blocks_current_work", priority="P2", task=BLOCKING_TASK)
    parallel = delegate(priority="P2", stamp="2026-01-11T10:05:00-05:00")
    feed.send(blocking, REQUESTER)
    feed.send(parallel, REQUESTER)
    outcome = feed.send(completion(REQUESTER), REQUESTER)
    withdrawn = feed.state.delegations[blocking.request_id()]
    assert withdrawn.status is DelegationStatus.DENIED
    assert withdrawn.reason is not None and withdrawn.reason.startswith(f"withdrawn: {REQUESTER} finished")
    assert feed.state.delegations[parallel.request_id()].status is DelegationStatus.PENDING_HUMAN
    denied = [d for d in decisions(outcome) if d.decision is DecisionType.DELEGATION_DENIED]
    assert [d.request_id for d in denied] == [blocking.request_id()]
    assert of_type(outcome, EnvelopeType.DELEGATION_DENIED) == []  # the requester finished: no directive
    refused = feed.send(HumanApprove(request_id=blocking.request_id()), "human")
    assert kinds(refused) == [DecisionType.REJECTED]
    feed.send(HumanDeny(request_id=parallel.request_id(), reason="not now"), "human")
    assert summarize(feed.state).status is not None  # settled


def test_a_blocking_delegate_declared_lost_that_completes_resumes_the_requester_with_its_results() -> None:
    """Slow, not gone: its results reach the requester, which waited for its retry by then; the retry's
    later loss is no news to the requester and no escalation."""
    policy = Policy(heartbeat_timeout_seconds=120, lost_timeout_seconds=900)
    feed = Feed(policy)
    delegate_id = _blocking(feed)
    feed.send(Tick(now=T0 + timedelta(seconds=500)), "coordinator", at=500)  # coordinators tick all along
    feed.send(Tick(now=T0 + timedelta(seconds=1000)), "coordinator", at=1000)  # lost: retried
    retry = feed.state.agents[delegate_id].retried_by
    assert retry is not None and feed.state.agents[REQUESTER].waiting_on == (retry,)
    outcome = feed.send(completion(delegate_id, summary="ZAP installed, fixtures created."), delegate_id)
    directive = one(outcome, EnvelopeType.DELEGATION_COMPLETED)
    assert (directive.delegate_agent_id, directive.status) == (delegate_id, "SUCCESS")
    requester = feed.state.agents[REQUESTER]
    assert requester.state is AgentState.RUNNING and requester.waiting_on == ()
    feed.send(Tick(now=T0 + timedelta(seconds=1800)), "coordinator", at=1800)
    later = feed.send(Tick(now=T0 + timedelta(seconds=2600)), "coordinator", at=2600)  # the retry is lost
    assert feed.state.agents[retry].state is AgentState.LOST
    assert of_type(later, EnvelopeType.DELEGATION_COMPLETED) == [] and feed.state.escalations == ()


def test_withdrawn_requests_are_decided_in_the_same_order_whatever_the_order_of_the_delegations_map() -> None:
    """A state loaded after a take-over holds its delegations in the stored hash's order: the emitted
    decisions (and the request each of their ids names) must not depend on it."""
    feed = Feed()
    for minute in range(6):
        stamp = f"2026-01-11T10:{minute:02d}:00-05:00"
        feed.send(delegate(independence="blocks_current_work", priority="P2", stamp=stamp), REQUESTER)
    reordered = feed.state.model_copy(update={"delegations": dict(reversed(feed.state.delegations.items()))})
    done = feed.envelope(completion(REQUESTER), REQUESTER)
    emitted = [[e.data for e in apply(state, done, Policy()).emits] for state in (feed.state, reordered)]
    assert emitted[0] == emitted[1]
    denied = [
        d for d in decisions(apply(reordered, done, Policy())) if d.decision is DecisionType.DELEGATION_DENIED
    ]
    assert len(denied) == 6
