"""Clocks that differ: an adapter's, a human's and a coordinator's timestamps measured against the ticks.

Every time here is seconds after ``T0`` on the coordinators' clock (the ticks'); a skewed sender writes
its own. Timeouts are 120 s (timed out) and 900 s (lost), and ticks come every few seconds, as they do.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from rules_kit import T0, Feed, answers, clarification, completion, delegate, kinds, payloads

from bus.directives import LaunchRequest
from bus.envelope import EnvelopeType
from bus.events import AgentStarted, AgentState, Decision, DecisionType, Heartbeat, Tick
from coordinator.policy import Policy
from coordinator.rules import Outcome, Target

AGENT = "bg-task-abc123"
TICKER = "coordinator"
HOUR = 3600.0
POLICY = Policy(heartbeat_timeout_seconds=120, lost_timeout_seconds=900)
END_OF_TIME = datetime(9999, 12, 31, 23, 59, 59, tzinfo=timezone(timedelta(hours=-5)))
"""Past the last instant UTC can write."""


def _tick(feed: Feed, seconds: float, *, skew: float = 0) -> list[DecisionType]:
    """A tick at ``seconds``, by a coordinator whose clock is ``skew`` seconds ahead."""
    now = T0 + timedelta(seconds=seconds + skew)
    return kinds(feed.send(Tick(now=now), TICKER, at=seconds + skew))


def _at(feed: Feed, payload: Heartbeat | AgentStarted, ts: datetime) -> None:
    envelope = feed.envelope(payload, AGENT)
    feed.apply(envelope.model_copy(update={"ts": ts}))


def test_an_adapter_clock_an_hour_behind_does_not_lose_a_live_agent() -> None:
    feed = Feed(POLICY)
    _tick(feed, 0)  # a new group starts with its shard's last tick (coordinator.batch)
    feed.send(AgentStarted(task="scan"), AGENT, at=1 - HOUR)
    seen = []
    for second in range(5, 400, 5):
        if second % 60 == 0:
            feed.send(Heartbeat(pid=1), AGENT, at=second - HOUR)
        seen += _tick(feed, second)
    assert seen == []
    assert feed.state.agents[AGENT].state is AgentState.RUNNING
    # once it falls silent, its silence counts from the tick before its last heartbeat (at 360)
    assert _tick(feed, 355 + 120) == []
    assert _tick(feed, 355 + 121) == [DecisionType.TIMED_OUT]


def test_an_adapter_clock_an_hour_ahead_does_not_put_off_its_timeout() -> None:
    feed = Feed(POLICY)
    _tick(feed, 0)
    feed.send(AgentStarted(task="scan"), AGENT, at=2 + HOUR)
    assert _tick(feed, 5) == []
    assert feed.state.agents[AGENT].last_seen == T0 + timedelta(seconds=5)  # not an hour ahead
    assert _tick(feed, 125) == []
    assert _tick(feed, 126) == [DecisionType.TIMED_OUT]


def test_a_timestamp_at_the_end_of_time_does_not_keep_an_agent_alive_for_ever() -> None:
    feed = Feed(POLICY)
    _tick(feed, 0)
    feed.send(AgentStarted(task="scan"), AGENT, at=1)
    _at(feed, Heartbeat(pid=1), END_OF_TIME)
    assert _tick(feed, 5) == []
    assert _tick(feed, 5 + 121) == [DecisionType.TIMED_OUT]
    assert _tick(feed, 5 + 901)[0] is DecisionType.LOST


def test_a_correct_signal_after_a_future_one_counts() -> None:
    feed = Feed(POLICY)
    _tick(feed, 0)
    feed.send(AgentStarted(task="scan"), AGENT, at=1 + HOUR)  # its adapter's clock, then put right
    _tick(feed, 5)
    feed.send(Heartbeat(pid=1), AGENT, at=100)
    assert feed.state.agents[AGENT].last_seen == T0 + timedelta(seconds=100)
    assert _tick(feed, 220) == []
    assert _tick(feed, 221) == [DecisionType.TIMED_OUT]


def test_a_coordinator_an_hour_behind_that_takes_over_times_out_on_its_own_clock() -> None:
    feed = Feed(POLICY)
    feed.send(AgentStarted(task="scan"), AGENT, at=0)
    _tick(feed, 5)
    feed.send(Heartbeat(pid=1), AGENT, at=100)
    _tick(feed, 100)
    # the shard's lease passes to a coordinator whose clock is an hour behind: its now is older than
    # everything the group holds
    assert _tick(feed, 105, skew=-HOUR) == []
    assert _tick(feed, 225, skew=-HOUR) == []
    assert _tick(feed, 226, skew=-HOUR) == [DecisionType.TIMED_OUT]


def test_a_human_clock_behind_does_not_lose_the_agent_it_answers() -> None:
    feed = Feed(POLICY)
    _tick(feed, 0)
    feed.send(clarification(AGENT), AGENT, at=0)
    for second in range(5, 1000, 5):
        _tick(feed, second)
    feed.send(answers(("Q1", "both"), ("Q2", "3.0")), AGENT, at=1000 - HOUR)
    assert feed.state.agents[AGENT].state is AgentState.RUNNING
    assert _tick(feed, 1000) == []
    assert _tick(feed, 995 + 120) == []
    assert _tick(feed, 995 + 121) == [DecisionType.TIMED_OUT]


def test_a_timestamp_at_the_end_of_time_does_not_keep_a_group_from_retirement() -> None:
    day = 86_400.0
    feed = Feed(Policy(retire_after_seconds=7 * day))
    _tick(feed, 0)
    feed.send(completion(AGENT), AGENT, at=1)
    _at(feed, Heartbeat(pid=1), END_OF_TIME)  # its adapter says hello from the end of time
    assert _tick(feed, 5) == []
    assert _tick(feed, 5 + 7 * day) == [DecisionType.GROUP_RETIRED]


def test_timestamps_are_instants_whatever_their_offset() -> None:
    feed = Feed(POLICY)
    _tick(feed, 0)
    feed.send(AgentStarted(task="scan"), AGENT, at=1)
    tokyo = (T0 + timedelta(seconds=100)).astimezone(timezone(timedelta(hours=9)))
    _at(feed, Heartbeat(pid=1), tokyo)
    assert feed.state.agents[AGENT].last_seen == T0 + timedelta(seconds=100)
    assert _tick(feed, 220) == []
    assert _tick(feed, 221) == [DecisionType.TIMED_OUT]


def test_a_launch_by_a_sender_whose_clock_is_ahead_expires_before_its_agent_is_lost() -> None:
    # a launch request must be stale to a launcher (by the server's clock, the ticks') once its agent is
    # declared lost and retried: a launcher would otherwise start it beside its retry
    feed = Feed(POLICY)
    _tick(feed, 0)
    feed.send(AgentStarted(task="scan", name="security-auditor"), AGENT, at=1)
    launched = feed.send(delegate(AGENT), AGENT, at=2 + HOUR)  # its adapter's clock, an hour ahead
    [request] = payloads(launched, EnvelopeType.LAUNCH, Target.TASKS)
    assert isinstance(request, LaunchRequest) and request.expires_at is not None
    for second in range(5, 2000, 5):
        lost = [
            e.envelope
            for e in _ticked(feed, second).emits
            if isinstance(e.envelope.payload, Decision)
            and e.envelope.payload.decision is DecisionType.LOST
            and e.envelope.agent_id == request.new_agent_id
        ]
        if lost:
            break
    else:
        raise AssertionError("the launched agent was never declared lost")
    assert T0 + timedelta(seconds=second) > request.expires_at


def test_a_launch_expires_lost_timeout_after_the_request_for_a_clock_in_step() -> None:
    feed = Feed(POLICY)
    _tick(feed, 0)
    feed.send(AgentStarted(task="scan", name="security-auditor"), AGENT, at=1)
    [request] = payloads(feed.send(delegate(AGENT), AGENT, at=2), EnvelopeType.LAUNCH, Target.TASKS)
    # from the tick before it: no later than the agent can be lost, at most a tick interval earlier
    assert request.expires_at == T0 + timedelta(seconds=900)


def _ticked(feed: Feed, seconds: float) -> Outcome:
    return feed.send(Tick(now=T0 + timedelta(seconds=seconds)), TICKER, at=seconds)
