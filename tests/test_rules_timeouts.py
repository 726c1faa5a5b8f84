"""Timeouts from TICK envelopes: timed_out, lost (handled as a failure), and revival."""

from __future__ import annotations

from datetime import timedelta

import pytest
from rules_kit import (
    GROUP,
    T0,
    Feed,
    answers,
    clarification,
    completion,
    decisions,
    delegate,
    kinds,
    of_type,
    one,
    stop_dependency,
)

from agents.lost import lost_signal
from bus.directives import HumanResolve, LaunchReason, LaunchRequest
from bus.envelope import EnvelopeType, new_envelope
from bus.events import AgentExited, AgentStarted, AgentState, DecisionType, Heartbeat, Tick
from bus.findings import Finding
from coordinator.policy import Policy
from coordinator.rules import apply
from coordinator.rules.ids import retry_agent_id

AGENT = "bg-task-abc123"
TICKER = "coordinator"
POLICY = Policy(heartbeat_timeout_seconds=120, lost_timeout_seconds=900)


def _tick(feed: Feed, seconds: float) -> list[DecisionType]:
    now = T0 + timedelta(seconds=seconds)
    return kinds(feed.send(Tick(now=now), TICKER, at=seconds))


def test_silence_times_out_then_loses_the_agent() -> None:
    feed = Feed(POLICY)
    feed.send(AgentStarted(task="scan", name="security-auditor"), AGENT, at=0)
    assert _tick(feed, 120) == []
    outcome = feed.send(Tick(now=T0 + timedelta(seconds=121)), TICKER, at=121)
    (timed_out,) = decisions(outcome)
    assert timed_out.decision is DecisionType.TIMED_OUT and timed_out.state is AgentState.TIMED_OUT
    assert outcome.emits[0].envelope.agent_id == AGENT
    assert "silent for 121s (timeout 120s)" in timed_out.detail
    assert _tick(feed, 500) == []  # already timed out: nothing new
    lost = feed.send(Tick(now=T0 + timedelta(seconds=901)), TICKER, at=901)
    assert kinds(lost)[0] is DecisionType.LOST
    assert feed.state.agents[AGENT].state is AgentState.LOST
    launch = one(lost, EnvelopeType.LAUNCH)
    assert (launch.reason, launch.new_agent_id) == (LaunchReason.RETRY, retry_agent_id(GROUP, AGENT, 2))
    assert TICKER not in feed.state.agents


def test_a_long_silence_goes_straight_to_lost() -> None:
    feed = Feed(POLICY)
    feed.send(AgentStarted(), AGENT, at=0)
    assert _tick(feed, 5000)[0] is DecisionType.LOST


def test_a_long_silence_is_written_in_plain_seconds() -> None:
    feed = Feed(Policy(heartbeat_timeout_seconds=1.5e6, lost_timeout_seconds=2e7))
    feed.send(AgentStarted(), AGENT, at=0)
    [timed_out] = decisions(feed.send(Tick(now=T0 + timedelta(seconds=1_500_000.25)), TICKER, at=1))
    assert timed_out.detail == "silent for 1500000.2s (timeout 1500000s)"
    lost = feed.send(Tick(now=T0 + timedelta(seconds=27_867_512.3)), TICKER, at=2)
    assert "lost: silent for 27867512.3s (limit 20000000s)" in decisions(lost)[0].detail


def test_heartbeats_keep_an_agent_alive() -> None:
    feed = Feed(POLICY)
    feed.send(AgentStarted(), AGENT, at=0)
    feed.send(Heartbeat(pid=42), AGENT, at=100)
    # an out-of-order (older) envelope does not move last_seen back
    feed.send(Heartbeat(pid=42), AGENT, at=50)
    assert feed.state.agents[AGENT].last_seen == T0 + timedelta(seconds=100)
    assert _tick(feed, 200) == []
    assert feed.state.agents[AGENT].last_seen == T0 + timedelta(seconds=100)
    # one after a tick was sent after it, whatever its timestamp says (its adapter's clock is behind)
    feed.send(Heartbeat(pid=42), AGENT, at=50)
    assert feed.state.agents[AGENT].last_seen == T0 + timedelta(seconds=200)


def test_waiting_agents_do_not_time_out_and_the_resume_restarts_the_clock() -> None:
    feed = Feed(POLICY)
    feed.send(clarification(AGENT), AGENT, at=0)
    assert _tick(feed, 5000) == []
    assert feed.state.agents[AGENT].state is AgentState.AWAITING_CLARIFICATION
    feed.send(answers(("Q1", "both"), ("Q2", "3.0")), AGENT, at=6000)
    assert _tick(feed, 6100) == []
    assert _tick(feed, 6121) == [DecisionType.TIMED_OUT]


def test_a_timed_out_or_lost_agent_heard_from_again_runs_again() -> None:
    feed = Feed(POLICY)
    feed.send(AgentStarted(), AGENT, at=0)
    _tick(feed, 200)
    back = feed.send(Heartbeat(), AGENT, at=210)
    (revived,) = decisions(back)
    assert revived.decision is DecisionType.STATE_CHANGED and "after timed_out" in revived.detail
    assert feed.state.agents[AGENT].state is AgentState.RUNNING
    _tick(feed, 2000)
    assert feed.state.agents[AGENT].state is AgentState.LOST
    feed.send(Heartbeat(), AGENT, at=2010)
    assert feed.state.agents[AGENT].state is AgentState.RUNNING


def test_a_finding_imported_from_a_file_is_no_sign_of_life_but_one_the_agent_sends_is() -> None:
    """``import-findings`` is run by whoever imports the agent's file, often long after: a lost agent
    it names came back to running, and was declared lost again."""
    feed = Feed(POLICY)
    feed.send(AgentStarted(), AGENT, at=0)
    _tick(feed, 2000)
    for source in ("findings:/work/SECURITY_FINDINGS.jsonl", "findings:/work/f.jsonl#1"):
        imported = new_envelope(
            Finding(title="Hardcoded secret", file="a.py", line=3),
            agent_id=AGENT,
            group_id=GROUP,
            source=source,
            ts=T0 + timedelta(seconds=2010),
        )
        assert decisions(feed.apply(imported)) == []
        record = feed.state.agents[AGENT]
        assert (record.state, record.last_seen) == (AgentState.LOST, T0)
    assert len(feed.state.findings) == 1  # the finding counts all the same
    feed.send(Finding(title="Another", file="b.py", line=1), AGENT, at=2020)  # its adapter's: it lives
    assert feed.state.agents[AGENT].state is AgentState.RUNNING


def test_one_tick_gives_each_group_its_own_emitted_ids() -> None:
    """A TICK is applied to every group of its shard, whose decisions share the shard's events stream."""
    at = T0 + timedelta(seconds=121)
    tick = new_envelope(Tick(now=at), agent_id=TICKER, group_id="*", source="tick", id="tick-1", ts=at)
    ids: list[str] = []
    for group in ("group-a", "group-b"):
        feed = Feed(POLICY, group=group)
        feed.send(AgentStarted(task="scan"), AGENT, at=0)
        outcome = feed.apply(tick)
        assert kinds(outcome) == [DecisionType.TIMED_OUT]
        ids += [emit.envelope.id for emit in outcome.emits]
    assert len(ids) == len(set(ids)) == 2


def _lost_and_retried(feed: Feed) -> str:
    """AGENT started, lost at 1000 s and retried; the retry's id, started then."""
    feed.send(AgentStarted(), AGENT, at=0)
    _tick(feed, 1000)
    retry = retry_agent_id(GROUP, AGENT, 2)
    feed.send(AgentStarted(), retry, at=1000)
    return retry


def test_a_lost_agent_that_completes_after_its_retry_was_lost_too_completes_the_work() -> None:
    feed = Feed(POLICY)  # one retry
    retry = _lost_and_retried(feed)
    assert DecisionType.ESCALATED in _tick(feed, 2000)  # the retry lost too: escalated
    feed.send(Heartbeat(), retry, at=2001)  # heard from again...
    assert _tick(feed, 3000)[:2] == [DecisionType.LOST, DecisionType.ESCALATED]  # ...and lost again
    assert [e.agent_id for e in feed.state.escalations] == [retry]  # one escalation in the inbox
    done = feed.send(completion(AGENT), AGENT, at=3001)  # the first attempt was slow, not gone
    [status] = [d.detail for d in decisions(done) if d.decision is DecisionType.GROUP_STATUS]
    assert status.startswith("continue")


def test_work_a_slow_first_attempt_completed_is_not_counted_active_for_its_retry_still_running() -> None:
    # "1/1 completed, 0 failed, 1 active": the one piece of work counted twice
    feed = Feed(POLICY)
    _lost_and_retried(feed)
    feed.send(completion(AGENT), AGENT, at=1001)  # slow, not gone: its retry still runs
    progress = feed.state.progress
    assert (progress.total, progress.completed, progress.failed, progress.active) == (1, 1, 0, 0)


def test_a_slow_first_attempt_that_completes_with_a_blocker_open_is_reviewed() -> None:
    """Its outcome is the work's once its retry failed: so is the blocker it left unresolved."""
    feed = Feed(POLICY)
    feed.send(AgentStarted(), AGENT, at=0)
    _tick(feed, 1000)  # lost: retried
    retry = retry_agent_id(GROUP, AGENT, 2)
    feed.send(AgentStarted(), retry, at=1000)
    feed.send(completion(retry, "failed"), retry, at=1001)
    feed.send(lost_signal(AGENT, EnvelopeType.RESULT, "line 3", "no summary"), AGENT, at=1002)
    done = feed.send(completion(AGENT), AGENT, at=1003)
    [status] = [d.detail for d in decisions(done) if d.decision is DecisionType.GROUP_STATUS]
    assert status.startswith("review: ")
    assert status.endswith("; 1 agent(s) finished with a blocker unresolved (see status), for review")


def test_a_tick_emits_the_same_whatever_the_order_of_the_agents_map() -> None:
    """A state loaded after a take-over holds its agents in the stored hash's order, not in the order
    they registered: a tick must emit the same bytes (the same ids) either way."""
    feed = Feed(POLICY)
    for agent in ("bg-b", "bg-a", "bg-c"):
        feed.send(AgentStarted(), agent, at=0)
    reordered = feed.state.model_copy(update={"agents": dict(reversed(feed.state.agents.items()))})
    tick = feed.envelope(Tick(now=T0 + timedelta(seconds=200)), TICKER, at=200)
    emitted = [[e.data for e in apply(state, tick, POLICY).emits] for state in (feed.state, reordered)]
    assert emitted[0] == emitted[1] and len(emitted[0]) == 3


def test_a_tick_is_not_counted_for_an_agent_that_has_its_coordinator_s_name() -> None:
    """A tick's agent id is the coordinator's name: an agent of that id does not count it as applied."""
    feed = Feed(POLICY)
    feed.send(AgentStarted(), TICKER, at=0)
    before = feed.state.agents[TICKER]
    _tick(feed, 10)
    after = feed.state.agents[TICKER]
    assert (after.applied, after.last_applied_id) == (1, before.last_applied_id)
    assert feed.state.applied == 2  # the group counts it


def test_a_retry_lost_after_the_slow_first_attempt_completed_the_work_is_not_retried_nor_escalated() -> None:
    feed = Feed(Policy(heartbeat_timeout_seconds=120, lost_timeout_seconds=900, max_retries=2))
    _lost_and_retried(feed)
    feed.send(completion(AGENT), AGENT, at=1001)  # the first attempt was slow, not gone
    lost = _tick(feed, 3000)
    assert DecisionType.ESCALATED not in lost and DecisionType.RETRY_REQUESTED not in lost, lost
    assert retry_agent_id(GROUP, AGENT, 3) not in feed.state.agents
    assert feed.state.escalations == ()
    progress = feed.state.progress
    assert (progress.total, progress.completed, progress.failed) == (1, 1, 0)


def test_the_slow_attempt_that_completes_the_work_withdraws_a_retry_s_escalation() -> None:
    feed = Feed(POLICY)  # one retry
    _lost_and_retried(feed)
    assert DecisionType.ESCALATED in _tick(feed, 2000)  # the retry lost too: escalated
    done = feed.send(completion(AGENT), AGENT, at=2001)
    assert DecisionType.ESCALATION_DISMISSED in kinds(done)
    assert feed.state.escalations == ()


def _delegate_launched_at(feed: Feed, seconds: float, stamp: str = "2026-01-11T10:00:00-05:00") -> str:
    """A delegate approved by policy for :data:`AGENT` at ``seconds`` (a request stamped ``stamp``); its id."""
    request = delegate(AGENT, stamp=stamp)
    return str(one(feed.send(request, AGENT, at=seconds), EnvelopeType.LAUNCH).new_agent_id)


def test_a_launch_after_a_gap_in_the_ticks_longer_than_a_request_lives_is_requested_again() -> None:
    """No coordinator ran from 0 to 1005 s; the delegation came at 10 s and was applied at the end of the
    outage, so its request, which expires 900 s after it came, was written expired: the delegate is
    not lost for that (nor retried with reduced scope), its launch is requested again, once."""
    feed = Feed(POLICY)
    _tick(feed, 0)
    feed.send(AgentStarted(task="scan"), AGENT, at=0)
    delegate_id = _delegate_launched_at(feed, 10)
    feed.send(Heartbeat(), AGENT, at=1000)
    outcome = feed.send(Tick(now=T0 + timedelta(seconds=1005)), TICKER, at=1005)
    assert kinds(outcome) == [DecisionType.LAUNCH_REQUESTED]
    again = one(outcome, EnvelopeType.LAUNCH)
    assert again.new_agent_id == delegate_id and again.reason is LaunchReason.DELEGATION
    assert again.request_id != feed.state.agents[delegate_id].request_id  # a launcher marks requests
    assert again.expires_at == T0 + timedelta(seconds=1005 + 900)
    assert feed.state.agents[delegate_id].state is AgentState.RUNNING
    assert "no coordinator ticked the group" in decisions(outcome)[0].detail
    for seconds in range(1010, 1905, 300):  # ticking all along again: silent from the new request on
        feed.send(Heartbeat(), AGENT, at=seconds)
        assert _tick(feed, seconds) == ([DecisionType.TIMED_OUT] if seconds == 1310 else [])
    feed.send(Heartbeat(), AGENT, at=1906)
    lost = feed.send(Tick(now=T0 + timedelta(seconds=1906)), TICKER, at=1906)
    assert kinds(lost)[0] is DecisionType.LOST  # never started after all: lost and retried, as always
    assert one(lost, EnvelopeType.LAUNCH).reason is LaunchReason.RETRY


def test_a_gap_in_the_ticks_loses_agents_heard_from_or_launched_before_it_as_always() -> None:
    feed = Feed(POLICY)
    _tick(feed, 0)
    feed.send(AgentStarted(task="scan"), AGENT, at=0)
    early = _delegate_launched_at(feed, 0)  # launched before the last tick before the gap
    _tick(feed, 1)
    feed.send(AgentStarted(), "heard", at=2)  # heard from, then silent through the gap
    late = _delegate_launched_at(feed, 3, "2026-01-11T10:05:00-05:00")
    feed.send(Heartbeat(), late, at=4)  # started: its request did its work
    feed.send(Heartbeat(), AGENT, at=1000)
    outcome = feed.send(Tick(now=T0 + timedelta(seconds=1005)), TICKER, at=1005)
    assert not any("requested again" in d.detail for d in decisions(outcome))
    for agent_id in (early, "heard", late):
        assert feed.state.agents[agent_id].state is AgentState.LOST


def _resumed_in_a_gap(feed: Feed, cause: str) -> tuple[str, LaunchRequest]:
    """A delegate of :data:`AGENT`, heard from before the last tick before a gap in the ticks, whose
    adapter ended with it, and which an entry that came at 10 s, in the gap, starts again: a human's
    answer to it (``answer``), its adapter's exit after an answer reached its inbox (``exit``), or the
    result of its own delegate (``result``). Its id and its resume launch request."""
    _tick(feed, 0)
    feed.send(AgentStarted(task="scan"), AGENT, at=0)
    delegate_id = _delegate_launched_at(feed, 0)
    feed.send(AgentStarted(pid=42), delegate_id, at=1)
    if cause == "result":
        waits = delegate(delegate_id, independence="blocks_current_work")
        grandchild = one(feed.send(waits, delegate_id, at=2), EnvelopeType.LAUNCH).new_agent_id
    else:
        feed.send(clarification(delegate_id), delegate_id, at=2)
    if cause == "exit":
        feed.send(answers(("Q1", "Both"), ("Q2", "3.0-beta")), delegate_id, at=3)  # into its inbox
    else:
        feed.send(AgentExited(exit_code=0, resumable=False), delegate_id, at=3)
    _tick(feed, 4)
    if cause == "answer":
        outcome = feed.send(answers(("Q1", "Both"), ("Q2", "3.0-beta")), delegate_id, at=10)
    elif cause == "exit":
        outcome = feed.send(AgentExited(exit_code=0, resumable=False), delegate_id, at=10)
    else:
        outcome = feed.send(completion(grandchild, summary="Refactored."), grandchild, at=10)
    request: LaunchRequest = one(outcome, EnvelopeType.LAUNCH)
    assert (request.new_agent_id, request.reason) == (delegate_id, LaunchReason.RESUME)
    return delegate_id, request


@pytest.mark.parametrize("cause", ["answer", "exit", "result"])
def test_a_resume_launch_after_a_gap_in_the_ticks_longer_than_a_request_lives_is_requested_again(
    cause: str,
) -> None:
    """No coordinator ran from 4 to 1005 s; the entry that resumes the delegate came at 10 s and was
    applied at the end of the outage, so its resume request was written expired: the delegate is not
    lost for that, its resume request is written again, with the same directives, once."""
    feed = Feed(POLICY)
    delegate_id, first = _resumed_in_a_gap(feed, cause)
    feed.send(Heartbeat(), AGENT, at=1000)
    outcome = feed.send(Tick(now=T0 + timedelta(seconds=1005)), TICKER, at=1005)
    assert kinds(outcome) == [DecisionType.LAUNCH_REQUESTED]
    assert "resume launch of" in decisions(outcome)[0].detail
    again: LaunchRequest = one(outcome, EnvelopeType.LAUNCH)
    assert again.request_id != first.request_id  # a launcher marks requests
    assert again.expires_at == T0 + timedelta(seconds=1005 + 900)
    unchanged = again.model_copy(update={"request_id": first.request_id, "expires_at": first.expires_at})
    assert unchanged == first
    record = feed.state.agents[delegate_id]
    assert record.state is AgentState.RUNNING and record.relaunch is None
    feed.send(Heartbeat(), AGENT, at=1906)
    lost = feed.send(Tick(now=T0 + timedelta(seconds=1906)), TICKER, at=1906)
    assert kinds(lost)[0] is DecisionType.LOST  # never started after all: lost and retried, as always
    assert one(lost, EnvelopeType.LAUNCH).reason is LaunchReason.RETRY


def test_a_resumed_agent_heard_from_after_its_resume_launch_is_lost_after_a_gap_as_always() -> None:
    for heard in (AgentStarted(pid=43), Heartbeat()):  # its new session started, or its adapter beat
        feed = Feed(POLICY)
        delegate_id, _ = _resumed_in_a_gap(feed, "answer")
        feed.send(heard, delegate_id, at=20)
        feed.send(Heartbeat(), AGENT, at=1000)
        outcome = feed.send(Tick(now=T0 + timedelta(seconds=1005)), TICKER, at=1005)
        assert not any("requested again" in d.detail for d in decisions(outcome))
        assert feed.state.agents[delegate_id].state is AgentState.LOST


def test_a_resume_launch_the_last_tick_saw_is_not_requested_again_after_a_gap() -> None:
    feed = Feed(POLICY)
    delegate_id, _ = _resumed_in_a_gap(feed, "answer")
    _tick(feed, 11)  # a coordinator ran when the request was written: a launcher could start it
    feed.send(Heartbeat(), AGENT, at=1000)
    outcome = feed.send(Tick(now=T0 + timedelta(seconds=1012)), TICKER, at=1012)
    assert not any("requested again" in d.detail for d in decisions(outcome))
    assert feed.state.agents[delegate_id].state is AgentState.LOST


def _answered_while_blocked(feed: Feed) -> str:
    """A delegate of :data:`AGENT` with open questions and an open blocker, whose adapter ended with it
    before the tick at 4 s, and whose questions a human answers at 10 s, in a gap of the ticks; its id.
    The answer leaves it blocked: it is held for the relaunch the blocker's resolution causes, which
    starts the agent, rather than relaunching an agent that can only wait."""
    _tick(feed, 0)
    feed.send(AgentStarted(task="scan"), AGENT, at=0)
    delegate_id = _delegate_launched_at(feed, 0)
    feed.send(AgentStarted(pid=42), delegate_id, at=1)
    feed.send(clarification(delegate_id), delegate_id, at=2)
    feed.send(stop_dependency(delegate_id), delegate_id, at=2.5)
    feed.send(AgentExited(exit_code=0, resumable=False), delegate_id, at=3)
    _tick(feed, 4)
    answered = feed.send(answers(("Q1", "Both"), ("Q2", "3.0-beta")), delegate_id, at=10)
    assert of_type(answered, EnvelopeType.LAUNCH) == []
    record = feed.state.agents[delegate_id]
    assert (record.state, record.unreachable, record.relaunch) == (AgentState.BLOCKED, True, None)
    return delegate_id


def test_a_blocked_agent_resumed_by_its_resolution_in_a_gap_in_the_ticks_is_requested_again() -> None:
    """No coordinator ran from 4 to 1005 s; the answer and the resolution came in the gap: the resolution's
    resume request, with both directives, was written expired, and the first tick after the gap writes
    it again, once."""
    feed = Feed(POLICY)
    delegate_id = _answered_while_blocked(feed)
    resolved = feed.send(HumanResolve(resolution="Ran npm install."), delegate_id, at=11)
    first: LaunchRequest = one(resolved, EnvelopeType.LAUNCH)
    # expired before it is written: it counts from its entry's floor, the last tick (4 s) before the gap
    assert (first.reason, first.expires_at) == (LaunchReason.RESUME, T0 + timedelta(seconds=4 + 900))
    context = first.context or ""
    assert "## CLARIFICATION RESPONSE" in context and "Ran npm install." in context  # both directives
    assert feed.state.agents[delegate_id].state is AgentState.RUNNING
    feed.send(Heartbeat(), AGENT, at=1000)
    outcome = feed.send(Tick(now=T0 + timedelta(seconds=1005)), TICKER, at=1005)
    assert kinds(outcome) == [DecisionType.LAUNCH_REQUESTED]
    again: LaunchRequest = one(outcome, EnvelopeType.LAUNCH)
    assert again.expires_at == T0 + timedelta(seconds=1005 + 900)
    assert again.model_copy(update={"request_id": first.request_id, "expires_at": first.expires_at}) == first
    feed.send(Heartbeat(), AGENT, at=1010)
    assert _tick(feed, 1010) == []  # once


def test_a_blocked_agent_answered_in_a_gap_and_resolved_after_it_is_requested_once() -> None:
    """The answer in the gap started nothing, so nothing of it is written again; the resolution after
    the gap's tick is requested with a fresh expiry, and the next tick leaves it be."""
    feed = Feed(POLICY)
    delegate_id = _answered_while_blocked(feed)
    feed.send(Heartbeat(), AGENT, at=1000)
    gap = feed.send(Tick(now=T0 + timedelta(seconds=1005)), TICKER, at=1005)
    assert of_type(gap, EnvelopeType.LAUNCH) == []
    assert feed.state.agents[delegate_id].state is AgentState.BLOCKED
    resolved = feed.send(HumanResolve(resolution="Ran npm install."), delegate_id, at=1100)
    request: LaunchRequest = one(resolved, EnvelopeType.LAUNCH)
    assert request.expires_at == T0 + timedelta(seconds=1005 + 900)  # from the tick before it: alive
    assert "## CLARIFICATION RESPONSE" in (request.context or "")
    feed.send(Heartbeat(), AGENT, at=1105)
    assert _tick(feed, 1110) == []
