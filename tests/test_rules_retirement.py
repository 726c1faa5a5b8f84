"""Retirement at a tick: a group with no active agent and nothing waiting for a human, quiet long enough."""

from __future__ import annotations

from datetime import timedelta

from rules_kit import T0, Feed, completion, decisions, finding, kinds

from bus.directives import HumanDismiss
from bus.events import AgentStarted, DecisionType, Heartbeat, Tick
from coordinator.policy import Policy

A, B = "bg-a", "bg-b"
TICKER = "coordinator"
DAY = 86_400.0
POLICY = Policy(retire_after_seconds=7 * DAY, heartbeat_timeout_seconds=120, lost_timeout_seconds=900)


def _tick(feed: Feed, seconds: float) -> list[DecisionType]:
    return kinds(feed.send(Tick(now=T0 + timedelta(seconds=seconds)), TICKER, at=seconds))


def _done(feed: Feed, *agents: str, status: str = "success") -> None:
    for agent in agents:
        feed.send(AgentStarted(task="scan"), agent, at=0)
    for agent in agents:
        feed.send(completion(agent, status), agent, at=10)


def test_a_settled_group_is_retired_once_quiet_for_long_enough() -> None:
    feed = Feed(POLICY)
    _done(feed, A, B)
    assert _tick(feed, 10 + 7 * DAY - 1) == []
    assert feed.state.retired_at is None
    outcome = feed.send(Tick(now=T0 + timedelta(seconds=10 + 7 * DAY)), TICKER, at=10 + 7 * DAY)
    (retired,) = decisions(outcome)
    assert retired.decision is DecisionType.GROUP_RETIRED
    since = (T0 + timedelta(seconds=10)).isoformat()
    assert retired.detail == f"retired: status continue, 2 agent(s), nothing applied since {since}"
    assert feed.state.retired_at == T0 + timedelta(seconds=10 + 7 * DAY)


def test_the_latest_entry_applied_counts() -> None:
    feed = Feed(POLICY)
    _done(feed, A, B)
    feed.send(Heartbeat(pid=1), B, at=3 * DAY)  # a finished agent's adapter still says hello
    assert _tick(feed, 8 * DAY) == []
    assert _tick(feed, 10 * DAY) == [DecisionType.GROUP_RETIRED]


def test_a_group_with_an_active_agent_is_not_retired() -> None:
    feed = Feed(POLICY)
    _done(feed, A)
    feed.send(AgentStarted(task="a long one"), B, at=5)
    feed.send(Heartbeat(pid=1), B, at=8 * DAY - 60)
    assert _tick(feed, 8 * DAY) == []
    assert feed.state.retired_at is None


def test_an_undismissed_escalation_keeps_the_group_until_dismissed_and_quiet() -> None:
    feed = Feed(Policy(retire_after_seconds=DAY, max_retries=0))
    _done(feed, A, status="failed")
    assert feed.state.escalations
    assert _tick(feed, 30 * DAY) == []
    feed.send(HumanDismiss(note="seen"), A, at=30 * DAY + 1)  # a human looked at it just now
    assert _tick(feed, 30 * DAY + 2) == []
    assert _tick(feed, 31 * DAY + 1) == [DecisionType.GROUP_RETIRED]


def test_a_severity_conflict_keeps_the_group() -> None:
    feed = Feed(POLICY)
    _done(feed, A, B)
    feed.send(finding(A, severity="critical"), A, at=20)
    feed.send(finding(B, severity="minor"), B, at=20)
    assert feed.state.severity_conflicts == 1
    assert _tick(feed, 30 * DAY) == []


def test_a_group_of_findings_only_is_retired() -> None:
    """Scripts that only send findings are no agents to wait for (``findings add``, ``import-findings``)."""
    feed = Feed(POLICY)
    feed.send(finding("importer"), "importer", at=0)
    assert feed.state.agents["importer"].watched is False
    assert _tick(feed, 8 * DAY) == [DecisionType.GROUP_RETIRED]


def test_zero_the_default_means_never() -> None:
    feed = Feed(Policy())
    _done(feed, A)
    assert _tick(feed, 3650 * DAY) == []
    assert feed.state.retired_at is None
