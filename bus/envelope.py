"""The envelope: one stream entry, one field ``data`` holding orjson-encoded JSON.

``{id, v, kind, type, agent_id, group_id, ts, source, payload}``. ``type`` names the payload model and
fixes ``kind``; the mapping is :data:`bus.payloads.PAYLOADS` (re-exported here with the types it maps).
Any language can read an entry with a JSON parser and validate it with the schemas shipped in
``bus/schemas``.
"""

from __future__ import annotations

import functools
import hashlib
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any, Final, Literal, Union, cast

import orjson
from pydantic import (
    BaseModel,
    Field,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticSerializationError, SchemaValidator, core_schema

from bus.errors import DecodeError, EncodeError
from bus.fields import Model, Timestamp, trusted_instance
from bus.payloads import PAYLOADS, EnvelopeType, Kind, Payload

__all__ = [
    "MAX_DEPTH",
    "MAX_ENVELOPE_BYTES",
    "MAX_ID_CHARS",
    "MAX_NAME_CHARS",
    "PAYLOADS",
    "SCHEMA_VERSION",
    "WIRE_UTC",
    "Envelope",
    "EnvelopeType",
    "Kind",
    "Payload",
    "content_id",
    "decode",
    "deterministic_id",
    "encode",
    "encode_new",
    "first_errors",
    "new_envelope",
    "type_of",
]

SCHEMA_VERSION: Final = 1
MAX_ENVELOPE_BYTES: Final = 4 * 1024 * 1024
"""Entries larger than this are refused on publish and dead-lettered on read."""
MAX_ID_CHARS: Final = 128
"""The longest envelope id."""
MAX_NAME_CHARS: Final = 256
"""The longest agent or group id."""
MAX_DEPTH: Final = 200
"""The deepest an entry may nest arrays and objects, its own object counted: what pydantic's JSON parser
takes (a signal's extra fields may nest), well within what the models can write back."""


_TYPE_OF: Final[dict[type[Any], EnvelopeType]] = {model: t for t, (_, model) in PAYLOADS.items()}


class Envelope(Model):
    """One message on the bus."""

    id: str = Field(min_length=1, max_length=MAX_ID_CHARS)
    v: int = SCHEMA_VERSION
    kind: Kind
    type: EnvelopeType
    agent_id: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    group_id: str = Field(min_length=1, max_length=MAX_NAME_CHARS)
    ts: Timestamp
    source: str = ""
    payload: Payload

    @field_validator("payload", mode="before")
    @classmethod
    def _payload_of_type(cls, value: Any, info: ValidationInfo) -> Any:
        entry = PAYLOADS.get(info.data.get("type"))  # type: ignore[arg-type]
        if entry is None:
            return value  # ``type`` itself failed; its own error is reported
        model = entry[1]
        return value if type(value) is model else model.model_validate(value)

    @model_validator(mode="after")
    def _kind_matches_type(self) -> Envelope:
        expected = PAYLOADS[self.type][0]
        if self.kind is not expected:
            raise ValueError(
                f"kind {self.kind.value!r} does not match type {self.type.value} ({expected.value})"
            )
        if self.v != SCHEMA_VERSION:
            raise ValueError(f"unsupported schema version {self.v} (this build reads {SCHEMA_VERSION})")
        return self


_GIVEN: Final = frozenset(Envelope.model_fields) - {"v"}  # the fields new_envelope() passes


def type_of(payload: Payload) -> EnvelopeType:
    """The envelope type that carries a payload of this class."""
    return _TYPE_OF[type(payload)]


def deterministic_id(agent_id: str, source: str, offset: int) -> str:
    """The id of an envelope taken from a deterministic source (a byte offset in an agent's output).

    Re-reading the same output yields the same id, so a re-published entry is recognised downstream.
    """
    digest = hashlib.sha256(f"{agent_id}\x1f{source}\x1f{offset}".encode()).hexdigest()
    return digest[:32]


def content_id(agent_id: str, kind: str, payload: BaseModel) -> str:
    """The id of an envelope named by what it says: the same ``kind`` of payload with the same content
    from the same agent is the same envelope (a script, or a tool call, run again)."""
    content = payload.model_dump(mode="json")
    try:
        canonical = orjson.dumps(content, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:  # an integer beyond 64 bits, which a signal's extra field can hold
        canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return deterministic_id(agent_id, f"{kind}:{hashlib.sha256(canonical).hexdigest()}", 0)


def new_envelope(
    payload: Payload,
    *,
    agent_id: str,
    group_id: str,
    source: str = "",
    id: str | None = None,
    ts: datetime | None = None,
) -> Envelope:
    """Wrap a payload; ``type`` and ``kind`` follow from the payload's class.

    The payload is a model instance, which validation takes as it is; when the other values are plain
    strings within their limits and an aware datetime, they are valid as they are too, and the envelope
    is built without running the validators (the same model, at a fraction of the cost: agent output
    goes through here once per signal). Anything else is validated, and refused, as usual.
    """
    type_ = _TYPE_OF[type(payload)]
    id = id or uuid.uuid4().hex
    if ts is None:
        ts, aware = datetime.now(UTC), True
    else:
        aware = type(ts) is datetime and ts.utcoffset() is not None
    if not (
        aware
        and type(id) is str
        and len(id) <= MAX_ID_CHARS
        and type(agent_id) is str
        and 0 < len(agent_id) <= 256
        and type(group_id) is str
        and 0 < len(group_id) <= 256
        and type(source) is str
    ):
        return Envelope(
            id=id,
            kind=PAYLOADS[type_][0],
            type=type_,
            agent_id=agent_id,
            group_id=group_id,
            ts=ts,
            source=source,
            payload=payload,
        )
    data = _head(type_, id, agent_id, group_id, ts, source)
    data["payload"] = payload
    return trusted_instance(Envelope, data, set(_GIVEN))


def _head(
    type_: EnvelopeType, id: str, agent_id: str, group_id: str, ts: datetime, source: str
) -> dict[str, Any]:
    """An envelope's fields but ``payload``, in declaration order."""
    return {
        "id": id,
        "v": SCHEMA_VERSION,
        "kind": PAYLOADS[type_][0],
        "type": type_,
        "agent_id": agent_id,
        "group_id": group_id,
        "ts": ts,
        "source": source,
    }


def encode(envelope: Envelope) -> bytes:
    """The bytes stored in the ``data`` field of a stream entry.

    They are ``orjson.dumps(envelope.model_dump(mode="json", exclude_none=True))``, with the envelope's
    own fields handed to orjson as they are (its ``Z`` and ``±HH:MM`` offsets are pydantic's), which saves
    a third of the work on the coordinator's hot path, and the payload's JSON written by pydantic in one
    step. orjson writes no integer beyond 64 bits, which a hand-written extra field of a signal can hold:
    where it would have to, the envelope is pydantic's JSON instead.
    """
    try:
        try:
            return _encoded(envelope)
        except orjson.JSONEncodeError:
            return envelope.__pydantic_serializer__.to_json(envelope, exclude_none=True)
    except PydanticSerializationError as exc:
        raise EncodeError(
            f"envelope {envelope.id} ({envelope.type.value}) cannot be encoded: {exc}"
        ) from None


def _encoded(envelope: Envelope) -> bytes:
    data = envelope.__dict__.copy()  # the fields in declaration order, ``payload`` last
    payload = data.pop("payload")
    offset = envelope.ts.utcoffset()
    if (
        offset is None
        or offset.seconds % 60
        or offset.microseconds
        or None in data.values()
        or type(payload) not in _TYPE_OF
    ):
        return orjson.dumps(envelope.model_dump(mode="json", exclude_none=True))  # pydantic's own form
    return _spliced(data, payload)


def _spliced(head: dict[str, Any], payload: Payload) -> bytes:
    # The payload is pydantic's own JSON, the bytes orjson makes of its model_dump(mode="json") (both
    # write floats, escapes and offsets alike), spliced in last: no Python dict of it is built.
    data = orjson.dumps(head, option=orjson.OPT_UTC_Z)
    body = payload.__pydantic_serializer__.to_json(payload, exclude_none=True)
    return b"".join((data[:-1], b',"payload":', body, b"}"))


def encode_new(payload: Payload, agent_id: str, group_id: str, source: str, id: str, ts: datetime) -> bytes:
    """``encode(new_envelope(payload, ...))`` without building the envelope, for values that are valid
    as they are: the coordinator's, whose ids it derived and whose agent, group and timestamp come from
    a validated envelope. It publishes a copy of every finding, and builds the model only when asked.
    """
    type_ = _TYPE_OF.get(type(payload))
    zone = ts.tzinfo
    if type_ is not None and (zone is WIRE_UTC or zone is UTC or _whole_minutes(ts.utcoffset())):
        between, after = _fixed_parts(type_, agent_id, group_id, source)
        body = payload.__pydantic_serializer__.to_json(payload, exclude_none=True)
        parts = (
            b'{"id":',
            orjson.dumps(id),
            between,
            orjson.dumps(ts, option=orjson.OPT_UTC_Z),
            after,
            body,
            b"}",
        )
        return b"".join(parts)
    return encode(new_envelope(payload, agent_id=agent_id, group_id=group_id, source=source, id=id, ts=ts))


@functools.lru_cache(maxsize=4096)
def _fixed_parts(type_: EnvelopeType, agent_id: str, group_id: str, source: str) -> tuple[bytes, bytes]:
    """The JSON of an envelope's fields that a group's agent repeats on every envelope of a type it is
    sent, as :func:`_spliced` writes them: between the id and the timestamp, and from there to the
    payload. The coordinator sends one per finding, to few agents; the JSON of a whole head took
    half the time of encoding a finding's copy."""
    middle = orjson.dumps(
        {
            "v": SCHEMA_VERSION,
            "kind": PAYLOADS[type_][0],
            "type": type_,
            "agent_id": agent_id,
            "group_id": group_id,
        }
    )
    return b"," + middle[1:-1] + b',"ts":', b"," + orjson.dumps({"source": source})[1:-1] + b',"payload":'


WIRE_UTC: Final = SchemaValidator(core_schema.datetime_schema()).validate_python("2000-01-01T00:00Z").tzinfo
"""The time zone of every timestamp pydantic reads in UTC (one object): asking it for its offset, a call
into pydantic's core that builds a timedelta, was a tenth of the cost of encoding a finding's copy; and a
time in it compares with the envelopes' ten times faster than one in ``datetime.UTC``."""


def _whole_minutes(offset: timedelta | None) -> bool:
    """Whether an offset is one pydantic and orjson write alike (``±HH:MM``)."""
    return offset is not None and not (offset.seconds % 60 or offset.microseconds)


def decode(data: bytes | str | None) -> Envelope:
    """Parse the ``data`` field of a stream entry; every failure is a :class:`DecodeError`."""
    if data is None:
        raise DecodeError("entry has no 'data' field")
    size = len(data) if isinstance(data, bytes) else _utf8_size(data)
    if size > MAX_ENVELOPE_BYTES:
        raise DecodeError(f"entry is {size} bytes, over the {MAX_ENVELOPE_BYTES}-byte limit")
    envelope = _decoded_json(data)
    if envelope is not None:
        return envelope
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise DecodeError(f"not JSON: {exc}") from None
    if _nested_deeper(raw, MAX_DEPTH):
        # orjson reads deeper than pydantic's JSON parser: validated and written back, such an entry
        # fails (a RecursionError, which would end the coordinator) where no decode error is expected.
        raise DecodeError(f"arrays and objects nested more than {MAX_DEPTH} deep")
    envelope = _decoded(raw)
    if envelope is not None:
        return envelope
    try:  # the canonical validation, for its error (or, should the two ever differ, its verdict)
        return Envelope.model_validate(raw)
    except ValidationError as exc:
        raise DecodeError(f"invalid envelope: {first_errors(exc)}") from None


def _utf8_size(text: str) -> int:
    """The bytes ``text`` takes in UTF-8 (up to four a character: a short text is not encoded to count)."""
    if len(text) * 4 <= MAX_ENVELOPE_BYTES:
        return len(text)
    return len(text.encode(errors="surrogatepass"))


def _nested_deeper(value: Any, limit: int) -> bool:
    """Whether ``value`` nests arrays and objects (itself one) more than ``limit`` deep: whether one at
    that depth holds anything, as pydantic's parser counts."""
    level = [value] if isinstance(value, dict | list) else []
    for _ in range(limit):
        level = [
            item
            for node in level
            for item in (node.values() if isinstance(node, dict) else node)
            if isinstance(item, dict | list)
        ]
        if not level:
            return False
    return any(level)


def _variant(type_: EnvelopeType, model: type[Payload]) -> type[Model]:
    """The envelope's fields, its constraints included, with ``type`` fixed and ``payload`` one model."""
    fields: dict[str, Any] = {name: (info.annotation, info) for name, info in Envelope.model_fields.items()}
    fields["type"] = (Literal[type_], ...)
    fields["payload"] = (model, ...)
    return create_model(f"{model.__name__}Envelope", __base__=Model, **fields)


@functools.cache
def _by_type() -> SchemaValidator:
    """Validates an envelope in one pass of pydantic's core, choosing the payload model by ``type``.

    :class:`Envelope` picks its payload model in a Python validator and checks ``kind`` and ``v`` in
    another; on the path every consumer takes for every entry that costs about half of decoding. The
    variants carry no validators: :func:`_decoded` checks ``kind`` and ``v`` itself. Built on first use
    (it costs start-up time that commands which never decode should not pay).
    """
    variants = tuple(_variant(t, model) for t, (_, model) in PAYLOADS.items())
    adapter = TypeAdapter(cast("Any", Annotated[Union[variants], Field(discriminator="type")]))  # noqa: UP007
    # Its validator itself: the adapter's methods only wrap it in a call that checks options never given.
    return cast("SchemaValidator", adapter.validator)


def _decoded_json(data: bytes | str) -> Envelope | None:
    """:func:`_decoded` of the parsed JSON in one pass of pydantic's core, which parses the bytes straight
    into the models (no Python dict of them first); None for anything else, which the path through
    orjson then looks at (the same JSON is refused by both: NaN, lone surrogates, invalid UTF-8,
    trailing data), so its errors, and verdicts, stay the canonical ones."""
    try:
        return _trusted_variant(_by_type().validate_json(data))
    except ValidationError:
        return None


def _decoded(raw: Any) -> Envelope | None:
    """``Envelope.model_validate(raw)`` for a valid envelope (the same model, fields and field order);
    None for anything the canonical validation has to look at."""
    try:
        return _trusted_variant(_by_type().validate_python(raw))
    except ValidationError:
        return None


def _trusted_variant(variant: Any) -> Envelope | None:
    """The envelope a validated variant holds; None when its ``v`` or ``kind`` is not the one expected."""
    data = variant.__dict__
    if data["v"] != SCHEMA_VERSION or data["kind"] is not PAYLOADS[data["type"]][0]:
        return None
    return trusted_instance(Envelope, data, variant.__pydantic_fields_set__)


def first_errors(
    exc: ValidationError, whole: str = "envelope", *, named: bool = False, limit: int = 3
) -> str:
    """The first ``limit`` errors of ``exc`` on one line (pydantic's own text spans lines, with links):
    ``where: message; ...`` and how many more. ``where`` is the field's path, after ``whole`` (what was
    validated) when ``named``, or ``whole`` alone for an error of the whole value."""
    parts = []
    for err in exc.errors(include_url=False)[:limit]:
        path = ".".join(str(p) for p in err["loc"])
        where = f"{whole}.{path}" if named and path else path or whole
        parts.append(f"{where}: {err['msg']}")
    more = exc.error_count() - limit
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")
