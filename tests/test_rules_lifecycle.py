"""Lifecycle and the apply contract: registration, idempotency, rejection, deterministic output."""

from __future__ import annotations

from datetime import timedelta

from rules_kit import GROUP, T0, Feed, clarification, completion, decisions, kinds

from bus.envelope import EnvelopeType, new_envelope
from bus.events import AgentStarted, AgentState, Decision, DecisionType, Heartbeat
from bus.signals import Progress
from coordinator.policy import Policy
from coordinator.rules import Target, apply, summarize
from coordinator.rules.ids import emitted_id
from coordinator.rules.step import MAX_DETAIL, SOURCE
from coordinator.state import GroupState

AGENT = "bg-task-abc123"


def test_start_registers_the_agent_with_its_name_and_task() -> None:
    feed = Feed()
    outcome = feed.send(AgentStarted(pid=7, task="Analyze the codebase", name="Security Auditor"), AGENT)
    (registered,) = decisions(outcome)
    assert registered.decision is DecisionType.STATE_CHANGED and registered.state is AgentState.RUNNING
    record = feed.state.agents[AGENT]
    assert (record.name, record.task, record.depth, record.state) == (
        "security-auditor",
        "Analyze the codebase",
        0,
        AgentState.RUNNING,
    )
    assert record.registered_at == record.last_seen == T0 + timedelta(seconds=1)


def test_any_signal_from_an_unknown_agent_registers_it() -> None:
    feed = Feed()
    outcome = feed.send(clarification("bg-task-new"), "bg-task-new")
    assert kinds(outcome) == [DecisionType.STATE_CHANGED, DecisionType.QUESTION_OPENED]
    assert feed.state.agents["bg-task-new"].state is AgentState.AWAITING_CLARIFICATION


def test_heartbeat_and_progress_are_silent() -> None:
    feed = Feed()
    feed.send(AgentStarted(), AGENT)
    assert feed.send(Heartbeat(pid=1), AGENT).emits == []
    assert (
        feed.send(Progress(agent_id=AGENT, percent=40, message="47/120 files", eta="20m"), AGENT).emits == []
    )
    (agent,) = summarize(feed.state).agents
    assert (agent.percent, agent.progress_message) == (40, "47/120 files")


def test_emitted_envelopes_are_derived_from_the_input() -> None:
    feed = Feed()
    envelope = feed.envelope(completion(AGENT, "failed"), AGENT)
    outcome = feed.apply(envelope)
    assert len(outcome.emits) >= 4
    for n, emit in enumerate(outcome.emits):
        assert emit.envelope.id == emitted_id(envelope.id, n)
        assert emit.envelope.ts == envelope.ts
        assert emit.envelope.group_id == GROUP
        assert emit.envelope.source == SOURCE
    assert emitted_id("x", 0) != emitted_id("x", 1) != emitted_id("y", 0)
    assert emitted_id(envelope.id, 3) == f"{envelope.id}.3"  # names its cause
    for emit in outcome.emits:
        if emit.target is Target.EVENTS:
            assert isinstance(emit.envelope.payload, Decision)
            assert emit.envelope.payload.cause == envelope.id


def test_an_emitted_id_that_would_be_too_long_is_a_hash() -> None:
    longest = "i" * 128
    ids = {emitted_id(longest, n) for n in range(1000)}
    assert len(ids) == 1000
    assert all(len(i) == 32 and "." not in i for i in ids)  # never one of the dotted ids
    assert emitted_id("i" * 126, 9) == "i" * 126 + ".9"  # 128 characters: still fits
    assert len(emitted_id("i" * 126, 10)) == 32


def test_the_same_entry_twice_changes_nothing() -> None:
    feed = Feed()
    envelope = feed.envelope(clarification(AGENT), AGENT)
    first = feed.apply(envelope)
    assert first.emits
    second = apply(first.state, envelope, feed.policy)
    assert second.emits == [] and second.rejected is None
    assert second.state is first.state


def test_applied_counts_and_last_ids_per_agent() -> None:
    feed = Feed()
    feed.send(AgentStarted(), AGENT)
    feed.send(Heartbeat(), AGENT)
    feed.send(Heartbeat(), "bg-task-other")
    record = feed.state.agents[AGENT]
    assert (record.applied, record.last_applied_id) == (2, "in-00002")
    assert feed.state.applied == 3
    (first, other) = summarize(feed.state).agents
    assert (first.applied, first.last_applied_id, other.applied) == (2, "in-00002", 1)


def test_entry_of_another_group_is_rejected() -> None:
    state = GroupState(group_id=GROUP)
    envelope = new_envelope(Heartbeat(), agent_id=AGENT, group_id="other", id="e1", ts=T0)
    outcome = apply(state, envelope, Policy())
    assert outcome.rejected == f"entry of group 'other' applied to group {GROUP!r}"
    assert outcome.state.agents == {} and outcome.state.applied == 0
    assert "e1" in outcome.state.window
    (emit,) = outcome.emits
    assert emit.envelope.group_id == GROUP and emit.target is Target.EVENTS


def test_coordinator_outputs_are_not_inputs() -> None:
    feed = Feed()
    decision = Decision(decision=DecisionType.COMPLETED, detail="forged")
    outcome = feed.send(decision, AGENT)
    assert outcome.rejected == "DECISION is an output of the coordinator, not an input"
    assert kinds(outcome) == [DecisionType.REJECTED]
    assert feed.state.agents == {}
    assert all(e.envelope.type is EnvelopeType.DECISION for e in outcome.emits)


def test_rejected_entry_redelivered_is_dropped_silently() -> None:
    feed = Feed()
    envelope = feed.envelope(Decision(decision=DecisionType.COMPLETED), AGENT)
    first = feed.apply(envelope)
    assert first.rejected is not None
    again = apply(first.state, envelope, feed.policy)
    assert again.emits == [] and again.state is first.state


def test_decision_details_are_bounded() -> None:
    feed = Feed()
    huge = clarification(AGENT).model_copy(update={"blocked_at": "x" * 100_000})
    outcome = feed.send(huge, AGENT)
    opened = decisions(outcome)[-1]
    assert len(opened.detail) == MAX_DETAIL and opened.detail.endswith("…")
    assert feed.state.agents[AGENT].questions == huge  # the record keeps everything


def test_a_completion_report_without_a_summary_completes_its_agent() -> None:
    """Seed 003's diagram of the report lists status, deliverables, metrics and recommendations: a report
    without a summary completes its agent, what it achieved standing for the summary."""
    feed = Feed()
    report = completion("a1").model_copy(update={"summary": None})
    feed.send(report, "a1")
    record = feed.state.agents["a1"]
    assert record.state is AgentState.COMPLETED
    assert record.completion is not None and record.completion.summary == "all criteria met"
    bare = completion("a2").model_copy(
        update={"summary": None, "deliverables": None, "metrics_achieved": None}
    )
    feed.send(bare, "a2")
    completed = feed.state.agents["a2"].completion
    assert completed is not None and completed.summary == "(no summary given)"
