"""Resuming an agent whose adapter stopped with it: a launcher starts it again with the directive in its
prompt (AGENT_EXITED ``resumable: false``), where an inbox directive would wait for a reader for ever."""

from __future__ import annotations

from datetime import timedelta

from rules_kit import (
    Feed,
    answers,
    clarification,
    completion,
    decisions,
    delegate,
    of_type,
    one,
    payloads,
    stop_error,
)

from bus.directives import HumanApprove, HumanRecover, LaunchReason, LaunchRequest, RecoveryOption
from bus.envelope import EnvelopeType
from bus.events import AgentExited, AgentStarted, AgentState, DecisionType
from bus.signals import DelegateWork
from coordinator.console import inbox_lines
from coordinator.policy import Policy
from coordinator.rules import Target, summarize
from coordinator.rules.launch import SENT_KEPT
from coordinator.rules.summary import ResumePath
from coordinator.state import DelegationStatus

PARENT = "bg-task-jkl012"


def _launched(feed: Feed) -> str:
    """A delegate the bus launched (approved by policy); its id."""
    outcome = feed.send(delegate(PARENT), PARENT)
    request: LaunchRequest = one(outcome, EnvelopeType.LAUNCH, Target.TASKS)
    return request.new_agent_id


def _failed_and_gone(feed: Feed, agent: str, *, resumable: bool | None) -> None:
    feed.send(AgentStarted(pid=42, task="scan"), agent)
    feed.send(stop_error(agent), agent)
    feed.send(AgentExited(exit_code=143, resumable=resumable), agent)
    assert feed.state.agents[agent].state is AgentState.BLOCKED


def test_a_recovery_for_a_launched_agent_whose_adapter_stopped_launches_it_again() -> None:
    feed = Feed()
    agent = _launched(feed)
    _failed_and_gone(feed, agent, resumable=False)
    assert feed.state.agents[agent].unreachable
    outcome = feed.send(HumanRecover(option=RecoveryOption.RETRY_FROM_CHECKPOINT), agent)
    assert of_type(outcome, EnvelopeType.ERROR_RECOVERY) == []  # not in the inbox as well
    [envelope] = of_type(outcome, EnvelopeType.LAUNCH, Target.TASKS)
    request = envelope.payload
    assert isinstance(request, LaunchRequest)
    first = feed.outcomes[0]
    original: LaunchRequest = one(first, EnvelopeType.LAUNCH, Target.TASKS)
    assert envelope.agent_id == agent and request.new_agent_id == agent
    assert request.reason is LaunchReason.RESUME and request.request_id.startswith("rsm-")
    assert (request.task, request.depth, request.parent_agent_id) == (original.task, 1, PARENT)
    assert request.context is not None and "new session with the same agent id" in request.context
    assert "## ERROR FIXED" in request.context and "checkpoint after item 50" in request.context
    record = feed.state.agents[agent]
    assert record.state is AgentState.RUNNING and record.blocker is None and not record.unreachable
    assert [d.decision for d in decisions(outcome)] == [
        DecisionType.LAUNCH_REQUESTED,
        DecisionType.BLOCKER_RESOLVED,
    ]
    # the same entries applied again (a replay, a redelivery) make the same request: one launch
    again = Feed()
    _failed_and_gone(again, _launched(again), resumable=False)
    replayed = again.send(HumanRecover(option=RecoveryOption.RETRY_FROM_CHECKPOINT), agent)
    assert one(replayed, EnvelopeType.LAUNCH, Target.TASKS) == request


def test_an_adapter_that_goes_on_reading_or_cannot_tell_gets_the_directive_in_the_inbox() -> None:
    for resumable in (True, None):
        feed = Feed()
        agent = _launched(feed)
        _failed_and_gone(feed, agent, resumable=resumable)
        outcome = feed.send(HumanRecover(option=RecoveryOption.RETRY_FROM_CHECKPOINT), agent)
        assert len(of_type(outcome, EnvelopeType.ERROR_RECOVERY, Target.INBOX)) == 1
        assert of_type(outcome, EnvelopeType.LAUNCH) == []


def test_an_agent_the_bus_did_not_launch_keeps_its_inbox() -> None:
    feed = Feed()
    _failed_and_gone(feed, "own-agent", resumable=False)
    outcome = feed.send(HumanRecover(option=RecoveryOption.SKIP_AND_CONTINUE), "own-agent")
    assert len(of_type(outcome, EnvelopeType.ERROR_RECOVERY, Target.INBOX)) == 1
    assert of_type(outcome, EnvelopeType.LAUNCH) == []


def test_a_new_adapter_makes_the_agent_reachable_again() -> None:
    feed = Feed()
    agent = _launched(feed)
    _failed_and_gone(feed, agent, resumable=False)
    feed.send(AgentStarted(pid=43), agent)  # someone started an adapter for it by hand
    assert not feed.state.agents[agent].unreachable
    outcome = feed.send(HumanRecover(option=RecoveryOption.RETRY_FROM_CHECKPOINT), agent)
    assert len(of_type(outcome, EnvelopeType.ERROR_RECOVERY, Target.INBOX)) == 1


def test_an_answer_to_a_turn_that_ended_relaunches_the_agent_with_the_answers() -> None:
    feed = Feed()
    agent = _launched(feed)
    feed.send(clarification(agent), agent)
    feed.send(AgentExited(exit_code=0, resumable=False), agent)  # the turn ended, its adapter with it
    assert feed.state.agents[agent].state is AgentState.AWAITING_CLARIFICATION
    outcome = feed.send(answers(("Q1", "Both"), ("Q2", "3.0-beta")), agent)
    assert of_type(outcome, EnvelopeType.CLARIFICATION_RESPONSE) == []
    request: LaunchRequest = one(outcome, EnvelopeType.LAUNCH, Target.TASKS)
    assert request.context is not None and "## CLARIFICATION RESPONSE" in request.context
    assert "A1: Both" in request.context
    # the relaunched agent completes as usual
    feed.send(AgentStarted(pid=44), agent)
    done = feed.send(completion(agent), agent)
    assert feed.state.agents[agent].state is AgentState.COMPLETED
    assert decisions(done)[0].decision is DecisionType.COMPLETED


def test_the_inbox_says_what_happens_to_a_directive_for_an_agent_whose_adapter_ended() -> None:
    feed = Feed()
    launched = _launched(feed)
    _failed_and_gone(feed, launched, resumable=False)
    _failed_and_gone(feed, "own-agent", resumable=False)
    _failed_and_gone(feed, "listening", resumable=True)
    summary = summarize(feed.state)
    paths = {a.agent_id: a.resume for a in summary.agents}
    assert (paths[launched], paths["own-agent"], paths["listening"], paths[PARENT]) == (
        ResumePath.RELAUNCH,
        ResumePath.UNREAD,
        ResumePath.INBOX,
        ResumePath.INBOX,
    )
    lines = inbox_lines([summary])
    heads = [i for i, line in enumerate(lines) if not line.startswith(" ")]  # an item's first line
    notes = [
        (lines[max(h for h in heads if h < i)], line)
        for i, line in enumerate(lines)
        if line.lstrip().startswith("note:")
    ]
    assert [(blocker.split()[1], note.strip()) for blocker, note in notes] == [
        (launched, "note: its adapter ended with it: a launcher starts it again with the directive"),
        ("own-agent", "note: its adapter ended with it: the directive waits in its inbox until an adapter "
         "(--deliver) or `listen` runs for it"),
    ]  # fmt: skip


def _parent_gone(feed: Feed, *requests: DelegateWork) -> tuple[str, list[str]]:
    """A bus-launched agent that asks for ``requests`` and ends its turn; its id and its delegates'."""
    parent = _launched(feed)
    children = []
    for request in requests:
        outcome = feed.send(request.model_copy(update={"agent_id": parent}), parent)
        children += [p.new_agent_id for p in payloads(outcome, EnvelopeType.LAUNCH, Target.TASKS)]
    feed.send(AgentExited(exit_code=0, resumable=False), parent)
    return parent, children


def test_a_parent_waiting_for_two_delegates_is_started_again_once_with_both_results() -> None:
    feed = Feed()
    first = delegate(independence="blocks_current_work", stamp="2026-01-11T10:00:00-05:00")
    second = delegate(independence="blocks_current_work", stamp="2026-01-11T10:05:00-05:00")
    parent, children = _parent_gone(feed, first, second)
    assert len(children) == 2 and feed.state.agents[parent].state is AgentState.DELEGATING
    one_done = feed.send(completion(children[0], summary="First half done."), children[0])
    assert (
        of_type(one_done, EnvelopeType.LAUNCH) == []
        and of_type(one_done, EnvelopeType.DELEGATION_COMPLETED) == []
    )
    both_done = feed.send(completion(children[1], summary="Second half done."), children[1])
    request: LaunchRequest = one(both_done, EnvelopeType.LAUNCH, Target.TASKS)
    assert request.new_agent_id == parent and request.reason is LaunchReason.RESUME
    assert request.context is not None
    assert "First half done." in request.context and "Second half done." in request.context
    assert request.context.startswith("Requested by")  # the original request's context comes first
    assert feed.state.agents[parent].held == ()


def test_an_approval_that_only_says_wait_starts_no_session_and_comes_with_the_results() -> None:
    feed = Feed()
    parent, _ = _parent_gone(feed, delegate(independence="blocks_current_work", priority="P2"))
    [pending_request] = [
        r for r, d in feed.state.delegations.items() if d.status is DelegationStatus.PENDING_HUMAN
    ]
    approved = feed.send(HumanApprove(request_id=pending_request), parent)
    [child_launch] = payloads(approved, EnvelopeType.LAUNCH, Target.TASKS)
    assert child_launch.new_agent_id != parent  # the delegate only, not the waiting parent
    done = feed.send(completion(child_launch.new_agent_id, summary="Refactored."), child_launch.new_agent_id)
    request: LaunchRequest = one(done, EnvelopeType.LAUNCH, Target.TASKS)
    assert request.new_agent_id == parent and request.context is not None
    assert "## DELEGATION APPROVED" in request.context and "Refactored." in request.context


def _asked_and_answered(feed: Feed) -> str:
    """A launched agent whose question was answered while it still ran: the answer is in its inbox."""
    agent = _launched(feed)
    feed.send(AgentStarted(pid=42, task="scan"), agent)
    feed.send(clarification(agent), agent)
    outcome = feed.send(answers(("Q1", "Both"), ("Q2", "3.0-beta")), agent)
    assert len(of_type(outcome, EnvelopeType.CLARIFICATION_RESPONSE, Target.INBOX)) == 1
    return agent


def test_a_session_that_ends_after_a_directive_reached_its_inbox_is_started_again_with_it() -> None:
    feed = Feed()
    agent = _asked_and_answered(feed)
    outcome = feed.send(AgentExited(exit_code=0, resumable=False), agent)
    request: LaunchRequest = one(outcome, EnvelopeType.LAUNCH, Target.TASKS)
    assert (request.new_agent_id, request.reason) == (agent, LaunchReason.RESUME)
    assert request.context is not None and request.context.startswith("Requested by")
    assert "new session with the same agent id" in request.context and "A1: Both" in request.context
    record = feed.state.agents[agent]
    assert (record.state, record.sent, record.held, record.unreachable) == (AgentState.RUNNING, (), (), False)
    # the new session's adapter ends too, with nothing sent to it since: nothing more starts it
    feed.send(AgentStarted(pid=43), agent)
    assert of_type(feed.send(AgentExited(exit_code=0, resumable=False), agent), EnvelopeType.LAUNCH) == []


def test_directives_a_session_was_sent_need_no_new_one_when_it_completed_or_its_adapter_reads_on() -> None:
    done = Feed()
    agent = _asked_and_answered(done)
    done.send(completion(agent), agent)
    assert of_type(done.send(AgentExited(exit_code=0, resumable=False), agent), EnvelopeType.LAUNCH) == []
    assert done.state.agents[agent].sent == ()
    reading = Feed()
    agent = _asked_and_answered(reading)
    assert of_type(reading.send(AgentExited(exit_code=0, resumable=True), agent), EnvelopeType.LAUNCH) == []
    assert reading.state.agents[agent].sent == ()
    not_launched = Feed()
    not_launched.send(clarification("own-agent"), "own-agent")
    not_launched.send(answers(("Q1", "Both"), ("Q2", "3.0-beta")), "own-agent")
    outcome = not_launched.send(AgentExited(exit_code=0, resumable=False), "own-agent")
    assert of_type(outcome, EnvelopeType.LAUNCH) == [] and not_launched.state.agents["own-agent"].sent == ()


def test_a_session_that_ends_waiting_again_keeps_its_directives_for_the_one_that_starts_it() -> None:
    feed = Feed()
    agent = _asked_and_answered(feed)
    feed.send(clarification(agent, at="2026-01-11T10:45:00-05:00"), agent)  # asked again
    assert of_type(feed.send(AgentExited(exit_code=0, resumable=False), agent), EnvelopeType.LAUNCH) == []
    assert len(feed.state.agents[agent].held) == 1
    outcome = feed.send(answers(("Q1", "OAuth2 only"), ("Q2", "3.0-beta")), agent)
    request: LaunchRequest = one(outcome, EnvelopeType.LAUNCH, Target.TASKS)
    assert request.context is not None
    assert request.context.index("A1: Both") < request.context.index("A1: OAuth2 only")


def test_launch_requests_expire_when_their_agent_would_be_declared_lost() -> None:
    feed = Feed(Policy(lost_timeout_seconds=1800))
    agent = _asked_and_answered(feed)
    feed.send(AgentExited(exit_code=0, resumable=False), agent)
    for outcome, reason in (
        (feed.outcomes[0], LaunchReason.DELEGATION),
        (feed.outcomes[-1], LaunchReason.RESUME),
    ):
        [envelope] = of_type(outcome, EnvelopeType.LAUNCH, Target.TASKS)
        request = envelope.payload
        assert isinstance(request, LaunchRequest) and request.reason is reason
        assert request.expires_at == envelope.ts + timedelta(seconds=1800)


def test_a_session_keeps_its_latest_directives_only() -> None:
    feed = Feed()
    agent = _asked_and_answered(feed)
    for n in range(SENT_KEPT + 4):
        feed.send(clarification(agent, at=f"2026-01-12T{n:02}:00:00Z"), agent)
        feed.send(answers(("Q1", f"answer {n}"), ("Q2", "3.0-beta")), agent)
    sent = feed.state.agents[agent].sent
    assert len(sent) == SENT_KEPT
    assert "A1: answer 4\n" in sent[0] and f"A1: answer {SENT_KEPT + 3}\n" in sent[-1]


def _answer_id(feed: Feed) -> str:
    """The envelope id of the answer the last entry put in the inbox."""
    [response] = of_type(feed.outcomes[-1], EnvelopeType.CLARIFICATION_RESPONSE, Target.INBOX)
    return response.id


def test_the_directives_a_new_session_is_given_are_acknowledged_in_the_inbox_unread() -> None:
    # started again with them, done, or kept for the directive that starts it: from the adapter's end on,
    # the rules carry them, and a reader of the inbox must not deliver them a second time
    running, done, waiting = Feed(), Feed(), Feed()
    agent = _asked_and_answered(running)
    answer = _answer_id(running)
    exited = running.send(AgentExited(exit_code=0, resumable=False), agent)
    assert one(exited, EnvelopeType.LAUNCH, Target.TASKS).reason is LaunchReason.RESUME
    assert exited.superseded == ((agent, (answer,)),)
    assert running.state.agents[agent].sent_ids == ()

    agent = _asked_and_answered(done)
    answer = _answer_id(done)
    done.send(completion(agent), agent)
    assert done.send(AgentExited(exit_code=0, resumable=False), agent).superseded == ((agent, (answer,)),)

    agent = _asked_and_answered(waiting)
    first = _answer_id(waiting)
    waiting.send(clarification(agent, at="2026-01-11T10:45:00-05:00"), agent)
    assert waiting.send(AgentExited(exit_code=0, resumable=False), agent).superseded == ((agent, (first,)),)
    outcome = waiting.send(answers(("Q1", "OAuth2 only"), ("Q2", "3.0-beta")), agent)
    assert one(outcome, EnvelopeType.LAUNCH, Target.TASKS).reason is LaunchReason.RESUME
    assert outcome.superseded == ()  # the second answer went to no inbox: the prompt alone has it


def test_directives_left_to_the_inbox_are_not_acknowledged() -> None:
    reading = Feed()
    agent = _asked_and_answered(reading)
    assert reading.send(AgentExited(exit_code=0, resumable=True), agent).superseded == ()
    assert reading.state.agents[agent].sent_ids == ()
    not_launched = Feed()
    not_launched.send(clarification("own-agent"), "own-agent")
    not_launched.send(answers(("Q1", "Both"), ("Q2", "3.0-beta")), "own-agent")
    assert not_launched.send(AgentExited(exit_code=0, resumable=False), "own-agent").superseded == ()


def test_only_the_directives_the_new_prompt_holds_are_acknowledged() -> None:
    feed = Feed()
    agent = _asked_and_answered(feed)
    ids = [_answer_id(feed)]
    for n in range(SENT_KEPT + 2):
        feed.send(clarification(agent, at=f"2026-01-12T{n:02}:00:00Z"), agent)
        feed.send(answers(("Q1", f"answer {n}"), ("Q2", "3.0-beta")), agent)
        ids.append(_answer_id(feed))
    [(whose, superseded)] = feed.send(AgentExited(exit_code=0, resumable=False), agent).superseded
    assert whose == agent and superseded == tuple(ids[-SENT_KEPT:])
