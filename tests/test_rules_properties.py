"""Properties of the rules, checked on generated inputs.

- the merged findings view does not depend on the order in which reports arrive;
- applying an entry a second time changes nothing (same state, no emits);
- replaying a sequence from the same initial state gives byte-identical states and emits;
- no sequence of entries makes ``apply`` raise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rules_kit import GROUP, T0, answers, clarification, completion, delegate, result

from bus.directives import HumanApprove, HumanDeny, HumanRecover, HumanResolve, RecoveryOption
from bus.envelope import Envelope, EnvelopeType, Payload, encode, new_envelope
from bus.events import AgentExited, AgentStarted, Heartbeat, Tick
from bus.findings import Finding
from bus.results import ResultStatus
from bus.signals import StopWork
from coordinator.policy import Policy
from coordinator.rules import Outcome, Target, apply, merge_findings, merged_view
from coordinator.rules.apply import HANDLERS
from coordinator.rules.run import Run as BatchRun
from coordinator.rules.step import Step
from coordinator.state import GroupState

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
POLICY = Policy(
    max_parallel_agents=4, max_agents_per_group=12, heartbeat_timeout_seconds=300, lost_timeout_seconds=900
)

findings_st = st.builds(
    Finding,
    id=st.sampled_from(["SEC-001", "SEC-002", "QA-7", None]),
    title=st.sampled_from(["Hardcoded secret", "Missing rate limit"]),
    file=st.sampled_from(["src/a.ts", "src/b.ts", None]),
    line=st.sampled_from([8, 45, None]),
    category=st.sampled_from(["", "SEC", "PERF"]),
    severity=st.sampled_from([None, "critical", "important", "minor", "high"]),
    confidence=st.one_of(st.none(), st.integers(0, 100), st.floats(0, 100, allow_nan=False)),
    agent=st.sampled_from(["security-auditor", "qa-engineer", "Code Explorer", ""]),
)
weights_st = st.dictionaries(
    st.sampled_from(["security-auditor", "qa-engineer", "code-explorer"]), st.floats(0.1, 5), max_size=3
)


@SETTINGS
@given(reports=st.lists(findings_st, max_size=12), data=st.data(), weights=weights_st)
def test_merged_view_is_independent_of_arrival_order(
    reports: list[Finding], data: st.DataObject, weights: dict[str, float]
) -> None:
    policy = Policy(expertise=weights)
    shuffled = data.draw(st.permutations(reports))
    assert merge_findings(shuffled, policy) == merge_findings(reports, policy)


@SETTINGS
@given(reports=st.lists(findings_st, min_size=1, max_size=10), data=st.data())
def test_state_merged_view_is_independent_of_arrival_order(
    reports: list[Finding], data: st.DataObject
) -> None:
    def fold(order: list[Finding]) -> GroupState:
        state = GroupState(group_id=GROUP)
        for i, report in enumerate(order):
            envelope = new_envelope(report, agent_id="reporter", group_id=GROUP, id=f"f-{i}", ts=T0)
            state = apply(state, envelope, POLICY).state
        return state

    shuffled = data.draw(st.permutations(reports))
    first, second = fold(reports), fold(shuffled)
    assert merged_view(first, POLICY) == merged_view(second, POLICY)
    assert len(first.findings) == len(merge_findings(reports, POLICY))


# -- generated entry sequences ----------------------------------------------------------------------------

agent_st = st.integers(0, 5)
action_st = st.one_of(
    st.tuples(st.just("start"), agent_st),
    st.tuples(st.just("heartbeat"), agent_st),
    st.tuples(st.just("clarify"), agent_st),
    st.tuples(st.just("answer"), agent_st, st.sampled_from(["Q1", "Q2", "Q9"])),
    st.tuples(st.just("stop"), agent_st, st.sampled_from(["blocker", "error", "completion"])),
    st.tuples(st.just("resolve"), agent_st),
    st.tuples(st.just("recover"), agent_st, st.sampled_from(list(RecoveryOption))),
    st.tuples(
        st.just("delegate"),
        agent_st,
        st.sampled_from(["can_proceed_parallel", "blocks_current_work", "optional"]),
        st.sampled_from(["P0", "P1", "P2"]),
        st.sampled_from([0, 1, 2, 2]),
    ),
    st.tuples(st.sampled_from(["approve", "deny"]), st.integers(0, 4)),
    st.tuples(st.just("complete"), agent_st, st.sampled_from(["success", "partial_success", "failed"])),
    st.tuples(
        st.just("result"), agent_st, st.sampled_from(list(ResultStatus)), st.lists(findings_st, max_size=3)
    ),
    st.tuples(st.just("finding"), agent_st, findings_st),
    st.tuples(st.just("exit"), agent_st, st.sampled_from([0, 1, None])),
    st.tuples(st.just("tick"), st.integers(0, 2000)),
)
script_st = st.lists(st.tuples(action_st, st.integers(0, 400)), max_size=40)


@dataclass
class Run:
    """Turns actions into envelopes while applying them, so agents launched on the way can be addressed."""

    state: GroupState = field(default_factory=lambda: GroupState(group_id=GROUP))
    agents: list[str] = field(default_factory=lambda: ["a", "b", "c"])
    requests: list[str] = field(default_factory=list)
    envelopes: list[Envelope] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    clock: int = 0

    def agent(self, index: int) -> str:
        return self.agents[index % len(self.agents)]

    def play(self, script: list[tuple[tuple[Any, ...], int]]) -> None:
        for action, gap in script:
            self.clock += gap
            payload, agent_id = self.payload(action)
            envelope = new_envelope(
                payload,
                agent_id=agent_id,
                group_id=GROUP,
                id=f"in-{len(self.envelopes)}",
                ts=T0 + timedelta(seconds=self.clock),
            )
            self.envelopes.append(envelope)
            outcome = apply(self.state, envelope, POLICY)
            self.state = outcome.state
            self.outcomes.append(outcome)
            for emit in outcome.emits:
                if emit.target is Target.TASKS and emit.envelope.agent_id not in self.agents:
                    self.agents.append(emit.envelope.agent_id)

    def payload(self, action: tuple[Any, ...]) -> tuple[Payload, str]:
        kind = action[0]
        if kind == "approve":
            return HumanApprove(request_id=self.request(action[1])), "human"
        if kind == "deny":
            return HumanDeny(request_id=self.request(action[1]), reason="not now"), "human"
        if kind == "tick":
            return Tick(now=T0 + timedelta(seconds=self.clock + action[1])), "coordinator"
        agent_id = self.agent(action[1])
        if kind == "delegate":
            request = delegate(
                agent_id,
                independence=action[2],
                priority=action[3],
                task="Refactor the authentication module into one AuthProvider"[: 20 + 20 * action[4]],
                stamp=(T0 + timedelta(seconds=self.clock)).isoformat(),
            )
            self.requests.append(request.request_id())
            return request, agent_id
        return self.agent_payload(kind, action, agent_id), agent_id

    def agent_payload(self, kind: str, action: tuple[Any, ...], agent_id: str) -> Payload:  # noqa: PLR0911
        if kind == "start":
            return AgentStarted(task="scan", name="security-auditor")
        if kind == "heartbeat":
            return Heartbeat()
        if kind == "clarify":
            return clarification(agent_id)
        if kind == "answer":
            return answers((action[2], "yes"))
        if kind == "stop":
            return StopWork(agent_id=agent_id, stop_reason=action[2], blocker_type="error", details="boom")
        if kind == "resolve":
            return HumanResolve(resolution="fixed")
        if kind == "recover":
            return HumanRecover(option=action[2])
        if kind == "complete":
            return completion(agent_id, action[2])
        if kind == "result":
            return result("qa-engineer", action[2], findings=action[3])
        if kind == "finding":
            return action[2]  # type: ignore[no-any-return]
        return AgentExited(exit_code=action[2])

    def request(self, index: int) -> str:
        return self.requests[index % len(self.requests)] if self.requests else "dlg-none"


def _bytes(outcomes: list[Outcome]) -> list[tuple[list[tuple[str, bytes]], str | None, bytes]]:
    return [
        ([(e.target.value, encode(e.envelope)) for e in o.emits], o.rejected, o.state.to_json())
        for o in outcomes
    ]


@SETTINGS
@given(script=script_st)
def test_replaying_a_sequence_gives_identical_output(script: list[tuple[tuple[Any, ...], int]]) -> None:
    run = Run()
    run.play(script)
    state = GroupState(group_id=GROUP)
    replayed = []
    for envelope in run.envelopes:
        outcome = apply(state, envelope, POLICY)
        state = outcome.state
        replayed.append(outcome)
    assert _bytes(replayed) == _bytes(run.outcomes)
    assert GroupState.from_json(state.to_json()) == state


@SETTINGS
@given(script=script_st, data=st.data())
def test_applying_an_entry_again_changes_nothing(
    script: list[tuple[tuple[Any, ...], int]], data: st.DataObject
) -> None:
    run = Run()
    run.play(script)
    if not run.envelopes:
        return
    again = data.draw(st.sampled_from(run.envelopes))
    outcome = apply(run.state, again, POLICY)
    assert outcome.emits == [] and outcome.rejected is None and outcome.duplicate
    assert outcome.state == run.state
    # and immediately after the original, too
    index = run.envelopes.index(again)
    after = run.outcomes[index].state
    repeat = apply(after, again, POLICY)
    assert repeat.emits == [] and repeat.state == after


@SETTINGS
@given(script=script_st)
def test_emitted_ids_are_unique_and_every_entry_is_accounted_for(
    script: list[tuple[tuple[Any, ...], int]],
) -> None:
    run = Run()
    run.play(script)
    ids = [e.envelope.id for o in run.outcomes for e in o.emits]
    assert len(ids) == len(set(ids))
    rejected = sum(o.rejected is not None for o in run.outcomes)
    assert run.state.applied + rejected == len(run.envelopes)
    assert all(
        a.parent_agent_id is None or a.parent_agent_id in run.state.agents for a in run.state.agents.values()
    )


def _replaced(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    """Keys whose record is not the same object in both maps (new, replaced or removed)."""
    return {k for k in before.keys() | after.keys() if before.get(k) is not after.get(k)}


@SETTINGS
@given(script=script_st)
def test_an_outcome_names_every_record_it_replaced(script: list[tuple[tuple[Any, ...], int]]) -> None:
    """What lets the store write a batch's changes without comparing whole maps."""
    run = Run()
    run.play(script)
    before = GroupState(group_id=GROUP)
    for outcome in run.outcomes:
        after = outcome.state
        assert _replaced(before.agents, after.agents) <= outcome.agents_touched
        assert _replaced(before.findings, after.findings) <= outcome.findings_touched
        before = after


def batches(entries: list[Envelope], data: st.DataObject) -> list[list[Envelope]]:
    """``entries`` cut at up to six drawn places: the batches a coordinator might read them in."""
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(entries) - 1)), max_size=6)))
    return [entries[begin:end] for begin, end in zip([0, *cuts], [*cuts, len(entries)], strict=True)]


@SETTINGS
@given(script=script_st, data=st.data())
def test_applying_in_runs_gives_what_applying_one_by_one_gives(
    script: list[tuple[tuple[Any, ...], int]], data: st.DataObject
) -> None:
    """What the coordinator's batches rely on: the last state of a run (its ids added to the window) and
    the emits are those of applying each entry alone, duplicates inside a run included; the state a run
    started from is left as it was; the run names every record it replaced."""
    played = Run()
    played.play(script)
    entries = list(played.envelopes)
    for _ in range(data.draw(st.integers(0, 3)) if entries else 0):  # redeliveries, maybe in the same run
        entries.insert(data.draw(st.integers(0, len(entries))), data.draw(st.sampled_from(entries)))
    alone = GroupState(group_id=GROUP)
    alone_emits: list[bytes] = []
    for envelope in entries:
        outcome = apply(alone, envelope, POLICY)
        alone, alone_emits = outcome.state, alone_emits + [encode(e.envelope) for e in outcome.emits]

    state = GroupState(group_id=GROUP)
    emits: list[bytes] = []
    for batch in batches(entries, data):
        start, stored = state, state.to_json()
        run = BatchRun()
        for envelope in batch:
            outcome = apply(state, envelope, POLICY, run)
            state, emits = outcome.state, emits + [encode(e.envelope) for e in outcome.emits]
        window = state.window.extend(tuple(run.ids), POLICY.idempotency_window)
        state = state.model_copy(update={"window": window})
        assert start.to_json() == stored
        assert _replaced(start.agents, state.agents) <= run.agents_touched
        assert _replaced(start.findings, state.findings) <= run.findings_touched
    assert emits == alone_emits
    assert state.to_json() == alone.to_json()


@SETTINGS
@given(script=script_st)
def test_a_rejected_entry_changes_nothing_but_the_window(script: list[tuple[tuple[Any, ...], int]]) -> None:
    """Rules may change records before they reject an entry (an agent's sign of life is recorded before
    its signal is looked at): all of it is taken back."""
    run = Run()
    run.play(script)
    before = GroupState(group_id=GROUP)
    for outcome in run.outcomes:
        if outcome.rejected is not None:
            assert outcome.state.model_copy(update={"window": before.window}) == before
        before = outcome.state


def test_a_rule_that_fails_midway_leaves_the_run_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rule bug (any exception) propagates, and what the rule changed before it is taken back."""
    started = new_envelope(AgentStarted(task="scan"), agent_id="a", group_id=GROUP, id="in-0", ts=T0)
    run = BatchRun()
    state = apply(GroupState(group_id=GROUP), started, POLICY, run).state
    stored = state.to_json()

    def failing(step: Step) -> None:
        step.update("a", task="changed")
        raise RuntimeError("a bug")

    monkeypatch.setitem(HANDLERS, EnvelopeType.HEARTBEAT, failing)
    beat = new_envelope(Heartbeat(), agent_id="a", group_id=GROUP, id="in-1", ts=T0 + timedelta(seconds=5))
    with pytest.raises(RuntimeError, match="a bug"):
        apply(state, beat, POLICY, run)
    assert state.to_json() == stored and "in-1" not in run.ids


def test_snapshots_of_a_step_in_a_run_stay_as_they_were_taken() -> None:
    """In a run the step changes the run's maps in place; what a rule read as ``state`` or ``initial``
    does not change under it."""
    run = BatchRun()
    started = new_envelope(AgentStarted(task="scan"), agent_id="a", group_id=GROUP, id="in-0", ts=T0)
    state = apply(GroupState(group_id=GROUP), started, POLICY, run).state
    assert run.agents is state.agents  # the run's own map, changed in place from here on
    beat = new_envelope(Heartbeat(), agent_id="a", group_id=GROUP, id="in-1", ts=T0)
    step = Step(state, beat, POLICY, run)
    taken = step.state
    step.update("a", task="changed")
    assert taken.agents["a"].task == "scan" and step.initial.agents["a"].task == "scan"
    assert step.state.agents["a"].task == "changed"
