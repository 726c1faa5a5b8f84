"""What an agent waits on: a directive that answers one thing leaves it waiting on the others, and an
agent whose outcome is decided waits on nothing any more."""

from __future__ import annotations

from rules_kit import Feed, answers, clarification, completion, decisions, delegate, kinds, stop_dependency

from bus.directives import HumanApprove, HumanResolve
from bus.envelope import EnvelopeType, Payload
from bus.events import AgentState, DecisionType
from coordinator.policy import Policy
from coordinator.rules import summarize

AGENT = "bg-task-abc123"


def test_a_signal_after_the_agents_outcome_is_decided_is_rejected() -> None:
    for status in ("success", "failed"):
        feed = Feed()
        feed.send(completion(AGENT, status), AGENT)
        decided = feed.state.agents[AGENT].state
        signals: list[tuple[EnvelopeType, Payload]] = [
            (EnvelopeType.CLARIFICATION_NEEDED, clarification(AGENT)),
            (EnvelopeType.STOP_WORK, stop_dependency(AGENT)),
            (EnvelopeType.DELEGATE_WORK, delegate(AGENT)),
        ]
        for kind, signal in signals:
            outcome = feed.send(signal, AGENT)
            assert outcome.rejected == f"agent {AGENT!r} is {decided.value}: its {kind.value} is ignored"
            assert kinds(outcome) == [DecisionType.REJECTED]
        record = feed.state.agents[AGENT]
        assert record.state is decided and record.questions is None and record.blocker is None
        assert summarize(feed.state).open_questions == () and summarize(feed.state).pending_delegations == ()


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


def test_a_resolution_leaves_an_agent_waiting_for_its_delegate() -> None:
    feed = Feed()
    feed.send(delegate(AGENT, independence="blocks_current_work"), AGENT)
    assert feed.state.agents[AGENT].state is AgentState.DELEGATING
    feed.send(stop_dependency(AGENT), AGENT)
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
