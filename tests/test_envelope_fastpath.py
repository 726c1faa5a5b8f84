"""The adapter's hot path builds its items and envelopes without validating again values already valid.

``new_envelope`` skips the validators when its arguments are plain valid values, the parser builds a
``SignalItem`` around a payload its model just validated, and ``encode`` dumps the payload through its
serializer: each must give exactly what the validating, pydantic-dumping way gives, and anything
unusual must still be validated (and refused) as before.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone, tzinfo
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from agents.parser import ResultItem, SignalItem, parse_text
from bus.envelope import PAYLOADS, Envelope, Payload, decode, encode, encode_new, new_envelope
from bus.fields import Timestamp
from bus.signals import Progress

DATA = Path(__file__).parent / "data"
STAMPS = [
    datetime(2026, 1, 11, 8, 45, tzinfo=UTC),
    datetime(2026, 1, 11, 8, 45, 0, 120000, tzinfo=timezone(timedelta(hours=-5))),
    datetime(2026, 1, 11, 8, 45, 0, 5, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    datetime(2026, 1, 11, 8, 45, tzinfo=timezone(timedelta(seconds=30))),  # pydantic's form, not orjson's
]


def _payloads() -> list[Payload]:
    """Every signal and report of the specification's examples, as the parser yields them."""
    items = parse_text((DATA / "seed_000_signals.md").read_bytes())
    items += parse_text((DATA / "seed_002_results.md").read_bytes())
    found: list[Payload] = []
    for item in items:
        if isinstance(item, SignalItem):
            found.append(item.payload)
        elif isinstance(item, ResultItem):
            found.append(item.report)
    return found


PAYLOAD_LIST = _payloads()


def _validated(payload: Payload, **fields: object) -> Envelope:
    """What ``new_envelope`` would build by validating."""
    type_ = next(t for t, (_, model) in PAYLOADS.items() if model is type(payload))
    return Envelope(kind=PAYLOADS[type_][0], type=type_, payload=payload, **fields)


def _pydantic_encoded(envelope: Envelope) -> bytes:
    return orjson.dumps(envelope.model_dump(mode="json", exclude_none=True))


def test_the_examples_cover_signals_with_lists_extras_and_reports() -> None:
    kinds = {type(p).__name__ for p in PAYLOAD_LIST}
    assert {"ClarificationNeeded", "StopWork", "DelegateWork", "CompletionReport", "ResultReport"} <= kinds


@pytest.mark.parametrize("ts", STAMPS)
def test_an_envelope_built_without_validation_is_the_validated_one(ts: datetime) -> None:
    for payload in PAYLOAD_LIST:
        fields = {"id": "e" * 32, "agent_id": "bg-1", "group_id": "g-1", "ts": ts, "source": "out.txt"}
        fast = new_envelope(payload, **fields)  # type: ignore[arg-type]
        slow = _validated(payload, **fields)
        assert fast == slow
        assert fast.model_fields_set == slow.model_fields_set
        assert list(fast.__dict__) == list(slow.__dict__)
        assert encode(fast) == encode(slow) == _pydantic_encoded(slow)
        if ts != STAMPS[-1]:  # JSON keeps no offset of seconds: that one comes back truncated
            assert decode(encode(fast)) == slow


@pytest.mark.parametrize("ts", STAMPS)
def test_encoding_from_the_parts_is_encoding_the_envelope(ts: datetime) -> None:
    """The coordinator publishes what it emits through ``encode_new``, without building the envelope."""
    items = parse_text(b"[PROGRESS]\nagent_id: a\npercent: 5\nfiles: 99999999999999999999999\n[/PROGRESS]\n")
    assert isinstance(items[0], SignalItem)
    for payload in [*PAYLOAD_LIST, items[0].payload]:
        fields = {"id": "e.0", "agent_id": "bg-1", "group_id": "g-1", "source": "coordinator", "ts": ts}
        assert encode_new(payload, **fields) == encode(new_envelope(payload, **fields))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "text", ["2026-01-11T08:45:00.000001Z", "2026-01-11T08:45:00+00:00", "2026-01-11T08:45-05:30"]
)
def test_encoding_from_the_parts_with_a_timestamp_pydantic_read(text: str) -> None:
    """What the coordinator emits has the timestamp of an entry it decoded, with pydantic's time zone
    objects (``encode_new`` does not ask the one of UTC for its offset)."""
    ts = TypeAdapter(Timestamp).validate_python(text)
    for payload in PAYLOAD_LIST:
        fields = {"id": "e.0", "agent_id": "bg-1", "group_id": "g-1", "source": "coordinator", "ts": ts}
        assert encode_new(payload, **fields) == encode(new_envelope(payload, **fields))  # type: ignore[arg-type]


_INTS = st.integers(-(2**63), 2**64 - 1)  # what orjson writes (beyond: see the next test)


@settings(max_examples=300, deadline=None)
@given(
    percent=st.floats(0, 100),
    message=st.one_of(st.none(), st.text(max_size=40)),
    extra=st.dictionaries(
        st.sampled_from(["files", "step", "note", "ratio"]),
        st.one_of(
            _INTS,
            st.floats(),
            st.text(max_size=10),
            st.none(),
            st.lists(st.one_of(_INTS, st.floats(), st.text(max_size=5), st.none()), max_size=3),
            st.dictionaries(st.one_of(st.text(max_size=3), _INTS), st.one_of(_INTS, st.none()), max_size=2),
        ),
    ),
    ts=st.sampled_from(STAMPS),
    stamp=st.sampled_from([None, "2026-01-11T09:00:00+00:00", "2026-01-11T09:00:00.5-05:00"]),
)
def test_encoding_a_progress_is_byte_for_byte_pydantic_json(
    percent: float, message: str | None, extra: dict[str, object], ts: datetime, stamp: str | None
) -> None:
    payload = Progress.model_validate(
        {"agent_id": "a", "timestamp": stamp, "percent": percent, "message": message, **extra}
    )
    envelope = new_envelope(payload, agent_id="a", group_id="g", id="x", ts=ts)
    assert encode(envelope) == _pydantic_encoded(envelope)


@pytest.mark.parametrize("ts", [STAMPS[0], STAMPS[-1]])
def test_an_integer_beyond_64_bits_in_an_extra_field_is_still_encoded(ts: datetime) -> None:
    """orjson writes no such integer; the envelope is then pydantic's JSON, which JSON readers decode."""
    items = parse_text(b"[PROGRESS]\nagent_id: a\npercent: 5\nfiles: 99999999999999999999999\n[/PROGRESS]\n")
    assert isinstance(items[0], SignalItem)
    envelope = new_envelope(items[0].payload, agent_id="a", group_id="g", id="x", ts=ts)
    data = encode(envelope)
    assert data == envelope.model_dump_json(exclude_none=True).encode()
    assert orjson.loads(data)["payload"]["files"] == 1e23
    again = decode(data).payload
    assert isinstance(again, Progress)
    assert again.percent == 5


class _NoOffset(tzinfo):
    """A time zone that does not know its offset: the datetime is naive for all purposes."""

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None

    def tzname(self, dt: datetime | None) -> str | None:
        return None


@pytest.mark.parametrize(
    ("fields", "error"),
    [
        ({"group_id": ""}, "group_id"),
        ({"agent_id": "a" * 257}, "agent_id"),
        ({"id": "i" * 129}, "id"),
        ({"ts": datetime(2026, 1, 11, 8, 45)}, "ts"),
        ({"ts": datetime(2026, 1, 11, 8, 45, tzinfo=_NoOffset())}, "ts"),
    ],
)
def test_values_out_of_bounds_are_still_validated_and_refused(fields: dict[str, object], error: str) -> None:
    arguments: dict[str, object] = {"agent_id": "a", "group_id": "g", **fields}
    with pytest.raises(ValidationError, match=error):
        new_envelope(PAYLOAD_LIST[0], **arguments)  # type: ignore[arg-type]


def test_other_value_types_take_the_validating_way() -> None:
    class Name(str):
        pass

    envelope = new_envelope(PAYLOAD_LIST[0], agent_id=Name("a"), group_id="g", id="x", ts=STAMPS[0])
    assert envelope == _validated(PAYLOAD_LIST[0], id="x", agent_id="a", group_id="g", ts=STAMPS[0])
    assert encode(envelope) == _pydantic_encoded(envelope)


def test_signal_items_are_the_validated_ones() -> None:
    items = [i for i in parse_text((DATA / "seed_000_signals.md").read_bytes()) if isinstance(i, SignalItem)]
    assert len(items) == 8  # the four templates with <placeholders> are errors
    for item in items:
        again = SignalItem(type=item.type, payload=item.payload, line=item.line, offset=item.offset)
        assert item == again
        assert item.model_fields_set == again.model_fields_set
        assert list(item.__dict__) == list(again.__dict__)
        assert SignalItem.model_validate_json(item.model_dump_json()) == item
