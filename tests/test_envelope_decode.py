"""``decode`` validates an envelope in one pass when it can; it must agree with ``Envelope.model_validate``.

The one-pass validation (a union of per-type variants, chosen by ``type``) may only ever say "valid, and
here is exactly the envelope the canonical validation gives" or "ask the canonical validation". The
corpus holds an envelope of every type, taken from a run of the rules over the seed scenarios, and the
mutations below break each field in turn.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from rules_kit import (
    T0,
    Feed,
    answers,
    clarification,
    completion,
    delegate,
    finding,
    result,
    stop_dependency,
    stop_error,
)

from bus.directives import HumanApprove, HumanDeny, HumanDismiss, HumanRecover, HumanResolve, RecoveryOption
from bus.envelope import MAX_DEPTH, PAYLOADS, Envelope, Kind, _decoded, decode, encode, new_envelope
from bus.errors import DecodeError
from bus.events import AgentExited, AgentStarted, Heartbeat, Tick
from bus.results import ResultStatus
from bus.signals import DelegateWork, Progress
from coordinator.policy import Policy


def _corpus() -> list[Envelope]:
    """Inputs and outputs of the rules: every envelope type at least once."""
    envelopes: list[Envelope] = []

    def send(feed: Feed, payload: Any, agent_id: str) -> None:
        envelope = feed.envelope(payload, agent_id)
        envelopes.append(envelope)
        envelopes.extend(emit.envelope for emit in feed.apply(envelope).emits)

    feed = Feed()
    for agent in ("bg-a", "bg-b", "bg-c", "bg-d"):
        send(feed, AgentStarted(task="scan", name="security-auditor"), agent)
    send(feed, clarification("bg-a"), "bg-a")
    send(feed, answers(("Q1", "JWT"), ("Q2", "3.0")), "bg-a")
    send(feed, stop_dependency("bg-b"), "bg-b")
    send(feed, HumanResolve(resolution="fixed"), "bg-b")
    send(feed, stop_error("bg-c"), "bg-c")
    send(feed, HumanRecover(option=RecoveryOption.SKIP_AND_CONTINUE), "bg-c")
    send(feed, delegate("bg-d"), "bg-d")
    send(feed, delegate("bg-d", priority="P0", task="Write the migration guide for the new API"), "bg-d")
    pending = [e.payload.request_id() for e in envelopes if isinstance(e.payload, DelegateWork)]
    send(feed, HumanDeny(request_id=pending[-1], reason="not now"), "human")
    send(feed, HumanApprove(request_id=pending[0]), "human")
    send(feed, Progress(agent_id="bg-a", percent=10.5, message="step 1", files=3), "bg-a")
    send(feed, Heartbeat(pid=7), "bg-a")
    send(feed, finding("security-auditor"), "bg-a")
    send(feed, result("qa-engineer", ResultStatus.FAILED, findings=[finding("qa-engineer")]), "bg-a")
    send(feed, completion("bg-a"), "bg-a")
    send(feed, AgentExited(exit_code=1), "bg-b")
    send(feed, Tick(now=T0 + timedelta(hours=5)), "coordinator")
    blocking = Feed()
    send(blocking, delegate("bg-e", independence="blocks_current_work", priority="P0"), "bg-e")
    approved = next(e for e in envelopes if e.type.value == "DELEGATION_APPROVED" and e.agent_id == "bg-e")
    delegate_id = approved.payload.new_agent_id  # type: ignore[union-attr]
    send(blocking, completion(delegate_id), delegate_id)
    escalating = Feed(Policy(max_retries=0))
    send(escalating, AgentStarted(task="scan", name="qa-engineer"), "bg-f")
    send(escalating, completion("bg-f", "failed"), "bg-f")
    send(escalating, HumanDismiss(note="handled"), "bg-f")
    return envelopes


CORPUS = _corpus()


def test_the_corpus_has_every_type() -> None:
    assert {e.type for e in CORPUS} == set(PAYLOADS)


@pytest.mark.parametrize("envelope", CORPUS, ids=lambda e: e.type.value)
def test_a_valid_envelope_decodes_in_one_pass_to_the_canonical_one(envelope: Envelope) -> None:
    raw = orjson.loads(encode(envelope))
    fast = _decoded(raw)
    assert fast is not None
    slow = Envelope.model_validate(raw)
    assert type(fast) is Envelope
    assert fast == slow
    assert list(fast.__dict__) == list(slow.__dict__)
    assert fast.model_fields_set == slow.model_fields_set
    assert encode(fast) == encode(slow)
    assert decode(encode(envelope)) == slow


ODD_VALUES: list[Any] = [
    None, "", 0, 1, -1, 2, 1.5, True, "x" * 300, [], {}, "FINDING", "DECISION", "2026-01-11T08:00:00",
    "2026-01-11T08:00:00Z", {"title": "t"}, ["a"], "P0", "critical", *(k.value for k in Kind),
]  # fmt: skip


def _agree(raw: dict[str, Any]) -> None:
    """The one pass gives the canonical envelope or nothing, and decode() agrees with the canonical one."""
    fast = _decoded(raw)
    try:
        slow = Envelope.model_validate(raw)
    except ValidationError:
        assert fast is None, raw
        with pytest.raises(DecodeError):
            decode(orjson.dumps(raw))
        return
    if fast is not None:
        assert fast == slow and list(fast.__dict__) == list(slow.__dict__)
        assert fast.model_fields_set == slow.model_fields_set
    assert decode(orjson.dumps(raw)) == slow


def test_every_envelope_field_broken_every_way() -> None:
    for envelope in CORPUS:
        original = orjson.loads(encode(envelope))
        for key in [*original, "extra"]:
            for value in [*ODD_VALUES, _DELETE]:
                raw = dict(original)
                if value is _DELETE:
                    raw.pop(key, None)
                else:
                    raw[key] = value
                _agree(raw)


_DELETE = object()


@settings(max_examples=600, deadline=None)
@given(data=st.data(), index=st.integers(0, len(CORPUS) - 1), value=st.sampled_from([*ODD_VALUES, _DELETE]))
def test_payload_fields_broken(data: st.DataObject, index: int, value: Any) -> None:
    raw = orjson.loads(encode(CORPUS[index]))
    key = data.draw(st.sampled_from([*raw["payload"], "extra"]))
    if value is _DELETE:
        raw["payload"].pop(key, None)
    else:
        raw["payload"][key] = value
    _agree(raw)


def test_an_integer_beyond_64_bits_keeps_its_value_through_a_round_trip() -> None:
    """JSON is parsed straight into the models, where an integer stays exact (a parse into Python values
    first would have made it a float)."""
    big = 2**100 + 1
    envelope = new_envelope(Progress(agent_id="a", percent=5, files=big), agent_id="a", group_id="g")
    decoded = decode(encode(envelope))
    assert decoded == envelope
    assert decoded.payload.model_extra == {"files": big}


@pytest.mark.parametrize(
    "data",
    [
        b'{"id":"x","v":1,"kind":"event","type":"HEARTBEAT","agent_id":"a","group_id":"g",'
        b'"ts":"2026-01-01T00:00:00Z","payload":{"pid":NaN}}',
        b'{"id":"\\ud800","v":1,"kind":"event","type":"HEARTBEAT","agent_id":"a","group_id":"g",'
        b'"ts":"2026-01-01T00:00:00Z","payload":{"pid":1}}',
        b'{"id":"\xff","v":1,"kind":"event","type":"HEARTBEAT","agent_id":"a","group_id":"g",'
        b'"ts":"2026-01-01T00:00:00Z","payload":{"pid":1}}',
        b'{"id":"x","v":1,"kind":"event","type":"HEARTBEAT","agent_id":"a","group_id":"g",'
        b'"ts":"2026-01-01T00:00:00Z","payload":{"pid":1}} trailing',
    ],
    ids=["nan", "lone-surrogate", "invalid-utf8", "trailing-data"],
)
def test_json_that_is_not_strictly_valid_is_refused_as_not_json(data: bytes) -> None:
    with pytest.raises(DecodeError, match="not JSON"):
        decode(data)


@pytest.mark.parametrize("kind", ["ok", "wrong-kind"])
def test_an_extra_field_nested_to_the_limit_round_trips_and_one_level_more_is_refused(kind: str) -> None:
    """Both paths agree on how deep an entry may nest, and what they take can be written back: the
    path through orjson (taken for the wrong kind) once took deeper entries that failed, or ended the
    process, further on."""
    envelope = new_envelope(Progress(agent_id="a", percent=5), agent_id="a", group_id="g")
    head = encode(envelope)[:-2]
    if kind == "wrong-kind":
        head = head.replace(b'"kind":"signal"', b'"kind":"human"')
    fits = MAX_DEPTH - 2  # the envelope's object and the payload's
    for depth in (fits, fits + 1, 2 * MAX_DEPTH, 5 * MAX_DEPTH):
        data = head + b',"deep":' + b"[" * depth + b"1" + b"]" * depth + b"}}"
        if depth > fits:
            with pytest.raises(DecodeError, match=f"nested more than {MAX_DEPTH} deep"):
                decode(data)
        elif kind == "ok":
            decoded = decode(data)
            assert decode(encode(decoded)) == decoded
        else:
            with pytest.raises(DecodeError, match="does not match type PROGRESS"):
                decode(data)
