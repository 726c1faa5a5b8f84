"""The envelope: round trip, type/kind consistency, strict timestamps, size limits."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson
import pytest
from pydantic import ValidationError

from bus.envelope import (
    MAX_ENVELOPE_BYTES,
    Envelope,
    EnvelopeType,
    Kind,
    decode,
    deterministic_id,
    encode,
    new_envelope,
)
from bus.errors import DecodeError
from bus.findings import Finding, Severity
from bus.signals import DelegateWork, Independence, Priority, Progress, StopWork

STOP = StopWork.model_validate(
    {"agent_id": "a1", "stop_reason": "blocker", "blocker_type": "missing_info", "details": "need input"}
)


def test_round_trip_keeps_every_field() -> None:
    envelope = new_envelope(STOP, agent_id="a1", group_id="g1", source="test")
    again = decode(encode(envelope))
    assert again == envelope
    assert again.kind is Kind.SIGNAL
    assert again.type is EnvelopeType.STOP_WORK
    assert isinstance(again.payload, StopWork)


def test_kind_must_match_type() -> None:
    raw = orjson.loads(encode(new_envelope(STOP, agent_id="a1", group_id="g1")))
    raw["kind"] = "finding"
    with pytest.raises(DecodeError, match="does not match type STOP_WORK"):
        decode(orjson.dumps(raw))


def test_timestamp_without_zone_is_rejected() -> None:
    raw = orjson.loads(encode(new_envelope(STOP, agent_id="a1", group_id="g1")))
    raw["ts"] = "2026-01-11T08:45:00"
    with pytest.raises(DecodeError, match="ts: Input should have timezone info"):
        decode(orjson.dumps(raw))
    with pytest.raises(ValidationError, match="timezone"):
        StopWork.model_validate({**STOP.model_dump(), "timestamp": "2026-01-11T08:45:00"})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (None, "no 'data' field"),
        (b"\xff\xfe not json", "not JSON"),
        (b"[1, 2]", "invalid envelope"),
        (b'{"type": "NOPE"}', "invalid envelope"),
        (b"x" * (MAX_ENVELOPE_BYTES + 1), "over the"),
        ("é" * (MAX_ENVELOPE_BYTES // 2 + 1), f"{MAX_ENVELOPE_BYTES + 2} bytes, over"),  # in UTF-8
    ],
)
def test_bad_entries_are_decode_errors(data: bytes | None, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        decode(data)


def test_deterministic_ids_are_stable_and_distinct() -> None:
    assert deterministic_id("a", "out.log", 10) == deterministic_id("a", "out.log", 10)
    assert deterministic_id("a", "out.log", 10) != deterministic_id("a", "out.log", 11)
    assert deterministic_id("a", "out.log", 10) != deterministic_id("b", "out.log", 10)


def test_delegation_request_id_is_stable_per_request() -> None:
    base = {
        "agent_id": "bg-1",
        "timestamp": datetime(2026, 1, 11, 10, tzinfo=UTC),
        "delegation_reason": "parallel refactor",
        "new_task_description": "Refactor auth",
        "independence": Independence.CAN_PROCEED_PARALLEL,
        "priority": Priority.P1,
    }
    first = DelegateWork.model_validate(base)
    assert first.request_id() == DelegateWork.model_validate(base).request_id()
    other = DelegateWork.model_validate({**base, "new_task_description": "Something else"})
    assert first.request_id() != other.request_id()
    assert first.request_id().startswith("dlg-")


def test_finding_category_defaults_from_the_id_prefix() -> None:
    finding = Finding(id="SEC-001", title="Hardcoded JWT secret", file="src/config/jwt.ts", line=8)
    assert finding.category == "SEC"
    assert finding.location == "src/config/jwt.ts:8"
    assert Finding(title="no id").category == "general"
    assert Finding(title="x", severity="Critical").severity is Severity.CRITICAL


@pytest.mark.parametrize("given", [{}, {"category": None}, {"category": ""}])
def test_a_finding_without_a_category_takes_its_id_prefix_from_json_too(given: dict[str, object]) -> None:
    finding = Finding.model_validate_json(orjson.dumps({"id": "qa-7", "title": "t", **given}))
    assert finding.category == "QA"
    assert "category" in finding.model_fields_set  # written out like a given one
    assert Finding.model_validate_json(b'{"title": "t", "category": "PERF"}').category == "PERF"


def test_an_extra_number_json_cannot_carry_is_kept_as_text() -> None:
    # JSON has no NaN or infinity: written as null, the field would be gone when read back
    payload = Progress(agent_id="a", percent=5, ratio=float("nan"), limit=float("-inf"), share=0.5)
    envelope = decode(encode(new_envelope(payload, agent_id="a", group_id="g")))
    assert envelope.payload.model_extra == {"ratio": "nan", "limit": "-inf", "share": 0.5}


def test_envelope_model_is_closed() -> None:
    raw = orjson.loads(encode(new_envelope(STOP, agent_id="a1", group_id="g1")))
    raw["extra"] = 1
    with pytest.raises(DecodeError, match="extra"):
        decode(orjson.dumps(raw))
    assert Envelope.model_config["extra"] == "forbid"
