"""What an agent waits on: a directive that answers one thing leaves it waiting on the others, and an
agent whose outcome is decided waits on nothing any more."""

from __future__ import annotations

from rules_kit import Feed, answers, clarification, completion, decisions, delegate, kinds, stop_dependency

from agents.lost import lost_signal
from bus.directives import HumanApprove, HumanResolve
from bus.envelope import EnvelopeType, Payload
from bus.events import AgentState, DecisionType
from bus.signals import BlockerType, StopReason, StopWork
from coordinator.policy import Policy
from coordinator.rules import summarize
from coordinator.state import GroupVerdict, ViolationRule

AGENT = "bg-task-abc123"


def test_a_signal_after_the_agents_outcome_is_decided_is_rejected() -> None:
    for status in ("success", "failed"):
        feed = Feed()
        feed.send(completion(AGENT, status), AGENT)
        decided = feed.state.agents[AGENT].state
        signals: list[tuple[EnvelopeType, Payload]] = [
            (EnvelopeType.CLARIFICATION_NEEDED, clarification(AGENT)),
            (EnvelopeType.DELEGATE_WORK, delegate(AGENT)),
        ]
        for kind, signal in signals:
            outcome = feed.send(signal, AGENT)
            assert outcome.rejected == f"agent {AGENT!r} is {decided.value}: its {kind.value} is ignored"
            assert kinds(outcome) == [DecisionType.REJECTED]
        record = feed.state.agents[AGENT]
        assert record.state is decided and record.questions is None and record.blocker is None
        assert summarize(feed.state).open_questions == () and summarize(feed.state).pending_delegations == ()


def _unresolved(feed: Feed) -> list[str]:
    return [
        v.detail for v in feed.state.agents[AGENT].violations if v.rule is ViolationRule.UNRESOLVED_BLOCKER
    ]


def _lost_report() -> StopWork:
    return lost_signal(AGENT, EnvelopeType.RESULT, "line 12", "missing or empty '### Summary' section")


def test_a_completion_with_a_blocker_open_leaves_it_unresolved_for_review() -> None:
    """The adapter's blocker for a result report it could not read, then the agent's COMPLETION_REPORT:
    the completion is recorded, and the lost report is not lost with the blocker it closes."""
    feed = Feed()
    feed.send(_lost_report(), AGENT)
    done = feed.send(completion(AGENT), AGENT)
    assert kinds(done) == [DecisionType.CONTRACT_VIOLATION, DecisionType.COMPLETED, DecisionType.GROUP_STATUS]
    [flagged, _, group] = decisions(done)
    assert flagged.detail.startswith("unresolved_blocker: error: The agent printed a result report (line 12)")
    assert group.detail.startswith("review: ")
    assert group.detail.endswith("; 1 agent(s) finished with a blocker unresolved (see status), for review")
    assert feed.state.status is GroupVerdict.REVIEW and feed.state.agents[AGENT].blocker is None
    resolved = feed.send(HumanResolve(resolution="Sent it again"), AGENT)
    assert resolved.rejected == (
        f"agent {AGENT!r} has no open blocker (it is completed: nothing resumes it; `status` shows a blocker "
        "it left)"
    )
    assert _unresolved(feed) == [flagged.detail.removeprefix("unresolved_blocker: ")]
    [agent] = summarize(feed.state).agents
    assert agent.violations == (flagged.detail,) and summarize(feed.state).blockers == ()


def test_resolving_an_agent_that_finished_without_a_blocker_points_to_none() -> None:
    feed = Feed()
    feed.send(completion(AGENT), AGENT)
    resolved = feed.send(HumanResolve(resolution="Sent it again"), AGENT)
    assert resolved.rejected == f"agent {AGENT!r} has no open blocker (it is completed: nothing resumes it)"


def test_a_stop_after_the_outcome_is_decided_is_kept_and_the_group_reviewed() -> None:
    feed = Feed()
    feed.send(completion(AGENT), AGENT)
    assert feed.state.status is GroupVerdict.CONTINUE
    late = feed.send(_lost_report(), AGENT)
    assert late.rejected is None
    assert kinds(late) == [DecisionType.CONTRACT_VIOLATION, DecisionType.GROUP_STATUS]
    assert decisions(late)[1].detail.startswith("review: ")
    record = feed.state.agents[AGENT]
    assert record.state is AgentState.COMPLETED and record.blocker is None and len(_unresolved(feed)) == 1
    # A failed agent stays escalated: a failure takes precedence over a review.
    failed = Feed(Policy(max_retries=0))
    failed.send(completion(AGENT, "failed"), AGENT)
    kept = failed.send(stop_dependency(AGENT), AGENT)
    assert kinds(kept) == [DecisionType.CONTRACT_VIOLATION] and failed.state.status is GroupVerdict.ESCALATE


def test_a_completion_stop_after_the_outcome_is_one_more_report() -> None:
    feed = Feed()
    feed.send(completion(AGENT), AGENT)
    again = StopWork(
        agent_id=AGENT, stop_reason=StopReason.COMPLETION, blocker_type=BlockerType.ERROR, details="Done"
    )
    assert kinds(feed.send(again, AGENT)) == []
    record = feed.state.agents[AGENT]
    assert (
        record.extra_reports == 1 and record.violations == () and feed.state.status is GroupVerdict.CONTINUE
    )


def test_an_answer_leaves_an_agent_blocked_while_its_blocker_is_open() -> None:
    feed = Feed()
    feed.send(clarification(AGENT), AGENT)
    feed.send(stop_dependency(AGENT), AGENT)
    answered = feed.send(answers(("Q1", "JWT"), ("Q2", "3.0")), AGENT)
    [decision] = decisions(answered)
    assert decision.detail.endswith("; resumed; still blocked")
    assert decision.state is AgentState.BLOCKED
    assert feed.state.agents[AGENT].state is AgentState.BLOCKED
    assert len(summarize(feed.state).blockers) == 1
    feed.send(HumanResolve(resolution="Installed it"), AGENT)
    assert feed.state.agents[AGENT].state is AgentState.RUNNING


def _missing_info() -> StopWork:
    """A stop while the agent waits for a delegate that the delegate cannot settle (one on an external
    dependency would be the wait itself)."""
    return stop_dependency(AGENT).model_copy(update={"blocker_type": BlockerType.MISSING_INFO})


def test_a_resolution_leaves_an_agent_waiting_for_its_delegate() -> None:
    feed = Feed()
    feed.send(delegate(AGENT, independence="blocks_current_work"), AGENT)
    assert feed.state.agents[AGENT].state is AgentState.DELEGATING
    feed.send(_missing_info(), AGENT)
    resolved = feed.send(HumanResolve(resolution="Installed it"), AGENT)
    assert decisions(resolved)[0].detail.endswith("; still delegating")
    assert feed.state.agents[AGENT].state is AgentState.DELEGATING  # not running: it cannot time out


def test_a_delegate_that_completes_leaves_its_parent_waiting_for_a_human_decision() -> None:
    feed = Feed(Policy(auto_approve=["P1"]))
    feed.send(delegate(AGENT, independence="blocks_current_work", priority="P1"), AGENT)
    [child] = feed.state.agents[AGENT].waiting_on
    second = delegate(
        AGENT, independence="blocks_current_work", priority="P2", stamp="2026-01-11T10:05:00-05:00"
    )
    feed.send(second, AGENT)
    done = feed.send(completion(child), child)
    [resumed] = [d for d in decisions(done) if d.decision is DecisionType.DELEGATION_COMPLETED]
    assert resumed.detail.endswith("; resumed; still delegating")
    assert feed.state.agents[AGENT].state is AgentState.DELEGATING
    [pending] = summarize(feed.state).pending_delegations
    approved = feed.send(HumanApprove(request_id=pending.request_id), AGENT)
    assert DecisionType.DELEGATION_APPROVED in kinds(approved)
    assert feed.state.agents[AGENT].state is AgentState.DELEGATING


def test_an_approval_leaves_a_blocked_agent_blocked_until_its_blocker_is_resolved() -> None:
    feed = Feed()
    feed.send(delegate(AGENT, independence="blocks_current_work", priority="P2"), AGENT)
    feed.send(_missing_info(), AGENT)
    assert feed.state.agents[AGENT].state is AgentState.BLOCKED
    [pending] = summarize(feed.state).pending_delegations
    approved = feed.send(HumanApprove(request_id=pending.request_id), AGENT)
    [decision] = [d for d in decisions(approved) if d.decision is DecisionType.DELEGATION_APPROVED]
    assert decision.state is AgentState.BLOCKED  # its blocker first, then the delegate's results
    assert feed.state.agents[AGENT].state is AgentState.BLOCKED
    resolved = feed.send(HumanResolve(resolution="Installed it"), AGENT)
    assert decisions(resolved)[0].detail.endswith("; still delegating")
    assert feed.state.agents[AGENT].state is AgentState.DELEGATING
