"""Turn-based agents: a clean exit ends a turn, not the agent; ticks carry the shard-wide group id."""

from __future__ import annotations

from datetime import timedelta

from rules_kit import T0, Feed, kinds

from bus.envelope import new_envelope
from bus.events import AgentExited, AgentStarted, AgentState, DecisionType, Tick
from coordinator.policy import Policy

A = "agent-a"


def test_a_clean_exit_while_running_ends_a_turn_not_the_agent() -> None:
    feed = Feed()
    feed.send(AgentStarted(task="audit"), A)
    outcome = feed.send(AgentExited(exit_code=0), A)
    assert kinds(outcome) == []
    assert feed.state.agents[A].state is AgentState.RUNNING
    assert feed.state.agents[A].exited


def test_an_end_with_an_unknown_exit_code_ends_a_turn() -> None:
    """The end of a piped output (`adapter stdin`) or of a watched process: nobody knows how it ended."""
    feed = Feed()
    feed.send(AgentStarted(task="audit"), A)
    outcome = feed.send(AgentExited(exit_code=None), A)
    assert kinds(outcome) == []
    assert feed.state.agents[A].state is AgentState.RUNNING
    assert feed.state.agents[A].exited


def test_a_failing_exit_while_running_fails_the_agent() -> None:
    feed = Feed()
    feed.send(AgentStarted(task="audit"), A)
    feed.send(AgentExited(exit_code=2), A)
    assert feed.state.agents[A].state is AgentState.FAILED


def test_a_tick_for_every_group_reaches_each_group() -> None:
    feed = Feed(Policy(heartbeat_timeout_seconds=10, lost_timeout_seconds=100))
    feed.send(AgentStarted(task="audit"), A, at=0)
    tick = new_envelope(Tick(now=T0 + timedelta(seconds=30)), agent_id="coord", group_id="*", id="tick-1",
                        ts=T0 + timedelta(seconds=30))  # fmt: skip
    outcome = feed.apply(tick)
    assert outcome.rejected is None
    assert DecisionType.TIMED_OUT in [e.envelope.payload.decision for e in outcome.emits]  # type: ignore[union-attr]
    assert feed.state.agents[A].state is AgentState.TIMED_OUT
