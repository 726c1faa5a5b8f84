"""What the rules build without validation is valid, and applying an entry never mutates its input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import orjson
import pytest
from hypothesis import given
from pydantic import BaseModel
from rules_kit import GROUP, T0
from test_rules_properties import POLICY, SETTINGS, Run, script_st

from bus.envelope import PAYLOADS, Envelope, decode, encode, new_envelope
from bus.events import AgentState, Decision, DecisionType
from bus.fields import Model
from bus.findings import Finding
from bus.signals import Progress
from coordinator import state as state_module
from coordinator.rules import apply
from coordinator.rules.trusted import compact, construct, evolve
from coordinator.state import AgentRecord, GroupState
from coordinator.store import decode_slots, load_state


def pydantic_encoded(envelope: Envelope) -> bytes:
    """The form :func:`bus.envelope.encode` produces faster."""
    return orjson.dumps(envelope.model_dump(mode="json", exclude_none=True))


@pytest.mark.parametrize(
    "ts",
    [
        datetime(2026, 1, 11, 8, 45, tzinfo=UTC),
        datetime(2026, 1, 11, 8, 45, 0, 120000, tzinfo=timezone(timedelta(hours=-5))),
        datetime(2026, 1, 11, 8, 45, 0, 5, tzinfo=timezone(timedelta(hours=5, minutes=30))),
        datetime(2026, 1, 11, 8, 45, tzinfo=timezone(timedelta(seconds=30))),  # pydantic truncates these
    ],
)
def test_encode_is_byte_for_byte_pydantic_json(ts: datetime) -> None:
    envelope = new_envelope(
        Finding(title="t", file="a.py", line=1, severity="minor"), agent_id="a", group_id="g", ts=ts
    )
    assert encode(envelope) == pydantic_encoded(envelope)


@SETTINGS
@given(script=script_st)
def test_everything_the_rules_emit_and_store_validates_to_the_same_value(
    script: list[tuple[tuple[Any, ...], int]],
) -> None:
    run = Run()
    run.play(script)
    for envelope in run.envelopes:
        assert encode(envelope) == pydantic_encoded(envelope)
    for outcome in run.outcomes:
        for emit in outcome.emits:
            assert encode(emit.envelope) == pydantic_encoded(emit.envelope)
            assert decode(encode(emit.envelope)) == emit.envelope
            assert Envelope.model_validate(emit.envelope.model_dump()) == emit.envelope
        state = outcome.state
        assert GroupState.model_validate_json(state.model_dump_json()) == state
        assert GroupState.from_json(state.to_json()).to_json() == state.to_json()


@SETTINGS
@given(script=script_st)
def test_applying_an_entry_leaves_the_input_state_as_it_was(
    script: list[tuple[tuple[Any, ...], int]],
) -> None:
    run = Run()
    run.play(script)
    state = GroupState(group_id=GROUP)
    for envelope in run.envelopes:
        before = state.to_json()
        outcome = apply(state, envelope, POLICY)
        assert state.to_json() == before
        state = outcome.state


def test_construct_equals_validation_field_for_field_and_byte_for_byte() -> None:
    values: dict[str, Any] = {"cause": "c", "decision": DecisionType.REJECTED, "state": AgentState.RUNNING}
    built, validated = construct(Decision, **values), Decision(**values)
    assert built == validated
    assert built.model_dump_json() == validated.model_dump_json()
    assert built.model_fields_set == validated.model_fields_set
    state = construct(GroupState, group_id="g")  # a default factory makes a value for each instance
    assert state.agents == {} and state.agents is not construct(GroupState, group_id="h").agents
    # the instance is made by object.__new__: no model (nor pydantic's base) may have a __new__ of its own
    models: list[type[BaseModel]] = [Envelope, GroupState, *(model for _, model in PAYLOADS.values())]
    models += [v for v in vars(state_module).values() if isinstance(v, type) and issubclass(v, Model)]
    assert all(model.__new__ is object.__new__ for model in models)


def test_construct_refuses_missing_and_unknown_fields_and_open_models() -> None:
    with pytest.raises(TypeError, match="missing field 'decision'"):
        construct(Decision, detail="x")
    with pytest.raises(TypeError, match="unknown fields"):
        construct(Decision, decision=DecisionType.REJECTED, colour="red")
    with pytest.raises(TypeError, match="extra fields"):
        construct(Progress, percent=1.0)


def test_evolve_is_model_copy() -> None:
    record = AgentRecord(agent_id="a", registered_at=T0, last_seen=T0)
    changed = evolve(record, applied=3, last_applied_id="x")
    assert changed == record.model_copy(update={"applied": 3, "last_applied_id": "x"})
    assert (
        changed.model_fields_set
        == record.model_copy(update={"applied": 3, "last_applied_id": "x"}).model_fields_set
    )
    assert record.applied == 0 and record.last_applied_id is None
    finding = Finding(title="t", file="a.py", line=1)
    envelope = new_envelope(finding, agent_id="a", group_id=GROUP, ts=T0)
    assert decode(encode(evolve(envelope, agent_id="b"))).agent_id == "b"


def test_compacted_reports_equal_their_originals_and_share_only_immutable_parts() -> None:
    def report(title: str) -> Finding:
        # strings of its own, as reports read back from storage have
        data = {
            "title": title,
            "file": "".join(("src/", "app.py")),
            "line": 3,
            "agent": "-".join(("qa", "engineer")),
        }
        return Finding.model_validate(data)

    first, second = report("one"), report("two")
    one = compact(first)
    two = compact(second, file=one.file, agent=one.agent, category="not the same")
    assert one == first and two == second  # a shared value that differs is not taken
    assert one.model_dump_json() == first.model_dump_json()
    assert one.model_fields_set == first.model_fields_set
    assert two.file is one.file and two.agent is one.agent and first.file is not second.file
    assert one.__pydantic_fields_set__ is two.__pydantic_fields_set__
    # changing a copy leaves the instances that share its set as they were
    changed = one.model_copy(update={"severity": "minor"})
    assert "severity" in changed.model_fields_set and "severity" not in two.model_fields_set
    assert "severity" not in evolve(two, confidence=50).model_fields_set - {"confidence"}
    assert "confidence" not in two.model_fields_set


def test_slots_read_back_hold_compacted_reports() -> None:
    state = GroupState(group_id=GROUP)
    for i, agent in enumerate(["qa-engineer", "security-auditor"]):
        finding = Finding(title=f"t{i}", file="src/app.py", line=3, category="SEC", agent=agent)
        state = apply(
            state, new_envelope(finding, agent_id=agent, group_id=GROUP, id=f"f{i}", ts=T0), POLICY
        ).state
    (slot,) = state.findings.values()
    raw = {k: v.model_dump_json() for k, v in state.findings.items()}
    (loaded,) = load_state(GROUP, {"meta": b"{}"}, [], decode_slots(raw)).findings.values()
    assert loaded == slot
    a, b = loaded.reports.values()
    assert a.file is b.file and a.__pydantic_fields_set__ is b.__pydantic_fields_set__
