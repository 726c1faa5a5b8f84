"""Hostile entries written straight onto a shard's signals stream by a foreign client.

The real coordinator (a `subagent-bus coordinator --burst` process, and in-process under hypothesis)
must dead-letter every one of them with a clear reason and the original bytes, keep running, apply every
valid signal around them, and lose nothing. Envelope decoding is fuzzed on its own too: it only ever
raises ``DecodeError``.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import itertools
import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import orjson
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rules_kit import answers, clarification, completion, delegate, finding, result, stop_dependency

from bus.connection import connect
from bus.directives import LaunchReason, LaunchRequest
from bus.envelope import MAX_ENVELOPE_BYTES, Envelope, EnvelopeType, Payload, decode, encode, new_envelope
from bus.errors import DecodeError
from bus.events import AgentStarted, Heartbeat
from bus.keys import Keys, StreamKind, open_namespace
from bus.settings import Settings
from bus.signals import Progress
from coordinator.policy import Policy
from coordinator.rules import summarize
from coordinator.service import Coordinator, CoordinatorOptions
from coordinator.view import load_groups

CLI = str(Path(sys.executable).parent / "subagent-bus")
NS = "hostile"
MIB = 1 << 20
Entries = list[tuple[bytes, dict[bytes, bytes]]]


def envelope_of(payload: Payload, agent: str = "a1", group: str = "g") -> Envelope:
    return new_envelope(payload, agent_id=agent, group_id=group, source="hostile-test")


def progress(agent: str, percent: float) -> bytes:
    return encode(envelope_of(Progress(agent_id=agent, percent=percent), agent))


def doc(**changes: Any) -> bytes:
    """A valid PROGRESS envelope's JSON with some top-level fields replaced."""
    valid = envelope_of(Progress(agent_id="a1", percent=3))
    return orjson.dumps({**orjson.loads(encode(valid)), **changes})


def deep_extra(depth: int) -> bytes:
    """A valid PROGRESS envelope whose payload has an extra field of arrays nested ``depth`` deep."""
    return progress("a1", 3)[:-2] + b',"deep":' + b"[" * depth + b"]" * depth + b"}}"


_OTHER_SHARD = next(
    g for g in (f"g{i}" for i in range(100)) if Keys(NS, 2).shard_of(g) != Keys(NS, 2).shard_of("g")
)
"""A group of the other shard: a raw publisher that got the shard wrong would split it in two."""

# Each hostile entry (its fields) and a fragment of the reason it must be dead-lettered with.
HOSTILE: list[tuple[str, dict[str | bytes, bytes], str]] = [
    ("no data field", {"junk": b"x", "payload": progress("a1", 1)}, "entry has no 'data' field (fields: junk, payload)"),
    ("no data field, a name no UTF-8", {b"\xff\x1b": b"x"}, "entry has no 'data' field (fields: \\xff\\x1b)"),
    ("bad data and another field", {"data": b"{", "trace": b"\xff\x00t"}, "not JSON"),
    ("invalid JSON", {"data": b'{"id": "x", '}, "not JSON"),
    ("empty data", {"data": b""}, "not JSON: Input is a zero-length"),
    ("binary garbage", {"data": bytes(range(256))}, "not JSON"),
    ("invalid UTF-8", {"data": progress("a1", 2).replace(b'"a1"', b'"\xff\xfe"', 1)}, "not valid UTF-8"),
    ("deep nesting", {"data": b"[" * 200_000}, "not JSON: depth limit exceeded"),
    # JSON that orjson reads but pydantic's parser does not: it could not be written back
    ("a signal's extra field 300 deep", {"data": deep_extra(300)}, "arrays and objects nested more than 200 deep"),
    ("a signal's extra field 900 deep", {"data": deep_extra(900)}, "arrays and objects nested more than 200 deep"),
    ("JSON, not an object", {"data": b"[1, 2, 3]"}, "invalid envelope: envelope: Input should be a valid dictionary"),
    ("JSON, not an envelope", {"data": b'{"hello": "world"}'}, "invalid envelope: id: Field required"),
    ("unknown type", {"data": doc(type="SELF_DESTRUCT")}, "invalid envelope: type:"),
    ("payload fails validation", {"data": doc(payload={"agent_id": "a1", "percent": 500})},
     "invalid envelope: payload.percent: Input should be less than or equal to 100"),
    ("kind does not match type", {"data": doc(kind="human")}, "does not match type PROGRESS"),
    ("future schema version", {"data": doc(v=2)}, "unsupported schema version 2"),
    ("unknown envelope field", {"data": doc(sneaky=True)}, "sneaky: Extra inputs are not permitted"),
    ("just over the size limit", {"data": b'{"x": "' + b"a" * MAX_ENVELOPE_BYTES + b'"}'}, f"over the {MAX_ENVELOPE_BYTES}-byte limit"),
    ("a 10 MB data value", {"data": b"A" * (10 * MIB)}, f"entry is {10 * MIB} bytes, over the"),
    # more fields than a script can write in one command: its dead letter keeps the first 100
    ("5 000 fields", {"data": b"{", **{f"f{i}": b"v" for i in range(5000)}}, "not JSON"),
    ("another shard's group", {"data": encode(envelope_of(Progress(agent_id="a1", percent=4), group=_OTHER_SHARD))},
     f"group '{_OTHER_SHARD}' belongs to shard {Keys(NS, 2).shard_of(_OTHER_SHARD)}, not {Keys(NS, 2).shard_of('g')}"),
]  # fmt: skip


def entries(client: redis.Redis, key: str) -> Entries:
    return cast(Entries, client.xrange(key))


def test_hostile_entries_are_dead_lettered_and_valid_ones_applied(redis_url: str) -> None:
    admin = redis.Redis.from_url(redis_url)
    admin.set(Keys(NS, 2).meta, "2")
    keys = Keys(NS, 2)
    stream = keys.stream(keys.shard_of("g"), StreamKind.SIGNALS)
    dead_key = keys.stream(keys.shard_of("g"), StreamKind.DEAD)
    admin.xadd(stream, {"data": progress("a1", 10)})
    hostile_ids = [cast(bytes, admin.xadd(stream, fields)) for _, fields, _ in HOSTILE]  # type: ignore[arg-type]
    admin.xadd(stream, {"data": progress("a1", 50), "foreign_field": b"ignored"})
    admin.xadd(stream, {"data": progress("a2", 70)})
    total = admin.xlen(stream)

    done = subprocess.run([CLI, "coordinator", "--burst", "--redis-url", redis_url, "--namespace", NS],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert f"stopped after applying {total} entries" in done.stderr

    dead = entries(admin, dead_key)
    assert [fields[b"entry_id"] for _, fields in dead] == hostile_ids
    reasons = {
        name: fields[b"reason"].decode() for (name, _, _), (_, fields) in zip(HOSTILE, dead, strict=True)
    }
    for (name, original, reason), (_, fields) in zip(HOSTILE, dead, strict=True):
        assert reason in reasons[name], (name, reasons[name][:300])
        assert fields[b"stream"] == stream.encode() and fields[b"deliveries"] == b"1", name
        data = original.get("data")
        if data is not None and len(data) > MAX_ENVELOPE_BYTES:  # its first bytes, and its length
            assert (fields[b"data"], fields[b"data_bytes"]) == (data[:MAX_ENVELOPE_BYTES], b"%d" % len(data))
        else:
            assert (fields.get(b"data"), fields.get(b"data_bytes")) == (data, None), name
        kept = {k[len(b"field:") :]: v for k, v in fields.items() if k.startswith(b"field:")}
        others = [(k.encode() if isinstance(k, str) else k, v) for k, v in original.items() if k != "data"]
        assert kept == dict(others[:100]), f"{name}: its other fields too"
        assert fields.get(b"fields_dropped") == (b"%d" % (len(others) - 100) if len(others) > 100 else None)

    # Nothing lost: every entry is still in the stream, acknowledged, and the valid ones are applied.
    assert admin.xlen(stream) == total
    group = admin.xinfo_groups(stream)[0]
    assert group["pending"] == 0 and group["last-delivered-id"] == entries(admin, stream)[-1][0]
    summary = {a.agent_id: (a.percent, a.applied) for a in asyncio.run(_summaries(redis_url))}
    assert summary == {"a1": (50, 2), "a2": (70, 1)}

    # A second run finds nothing to do and writes nothing.
    again = subprocess.run([CLI, "coordinator", "--burst", "--redis-url", redis_url, "--namespace", NS],
                           capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert again.returncode == 0 and "stopped after applying 0 entries" in again.stderr
    assert len(entries(admin, dead_key)) == len(HOSTILE)

    # The dead letters are readable by an operator, hostile bytes and all.
    shown = subprocess.run([CLI, "tail", "--stream", "dead", "--from", "0", "--count", str(len(HOSTILE)), "--json",
                            "--redis-url", redis_url, "--namespace", NS],
                           capture_output=True, timeout=300, check=False)  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    lines = [orjson.loads(line) for line in shown.stdout.splitlines()]
    assert [line["entry_id"] for line in lines] == [i.decode() for i in hostile_ids]
    for (name, original, _), line in zip(HOSTILE, lines, strict=True):
        if "data_base64" in line:  # data that is neither JSON nor UTF-8: its bytes as they are
            assert base64.b64decode(line["data_base64"]) == original["data"][:MAX_ENVELOPE_BYTES], name
    assert sum("data_base64" in line for line in lines) == 2  # binary garbage, invalid UTF-8
    admin.close()

    assert HOSTILE[0][2] in reasons["no data field"]


def test_an_entry_with_two_data_fields_is_dead_lettered_with_both(redis_url: str) -> None:
    # which one it means is not known; the first applied, the second would be lost without a word
    admin = redis.Redis.from_url(redis_url)
    admin.set(Keys(NS, 2).meta, "2")
    keys = Keys(NS, 2)
    stream = keys.stream(keys.shard_of("g"), StreamKind.SIGNALS)
    first, second = progress("a1", 10), progress("a1", 20)
    two = ("data", first, "note", "n1", "data", second, "note", "n2")
    admin.execute_command("XADD", stream, "*", *two)  # type: ignore[no-untyped-call]
    done = subprocess.run([CLI, "coordinator", "--burst", "--redis-url", redis_url, "--namespace", NS],
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    [(_, letter)] = entries(admin, keys.stream(keys.shard_of("g"), StreamKind.DEAD))
    assert letter[b"reason"] == b"entry has more than one 'data' field: which one it means is not known"
    kept = (letter[b"data"], letter[b"field:note"], letter[b"field:data"], letter[b"field:note#2"])
    assert kept == (first, b"n1", second, b"n2")
    assert asyncio.run(_summaries(redis_url)) == []  # neither applied
    admin.close()


async def _summaries(url: str) -> list[Any]:
    client = await connect(Settings.from_url(url, namespace=NS))
    try:
        return [
            agent for state in await load_groups(client, Keys(NS, 2)) for agent in summarize(state).agents
        ]
    finally:
        await client.aclose()


# -- fuzzing -----------------------------------------------------------------------------------------------


def _templates() -> list[dict[str, Any]]:
    launch = LaunchRequest(request_id="r1", new_agent_id="a9", reason=LaunchReason.RETRY, task="again")
    payloads: list[Payload] = [
        clarification("a1"), stop_dependency("a1"), delegate("a1"), completion("a1"), finding("a1"),
        result("a1", findings=[finding("a1")]), answers(("Q1", "yes")), Progress(agent_id="a1", percent=5),
        launch, AgentStarted(pid=1, task="t"), Heartbeat(pid=1),
    ]  # fmt: skip
    return [cast(dict[str, Any], orjson.loads(encode(envelope_of(p)))) for p in payloads]


TEMPLATES = _templates()
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=30),
    st.sampled_from([t.value for t in EnvelopeType] + ["signal", "event", "human", "2026-01-11T08:45:00-05:00",
                     "", "a1", "g", "*", "Q1", "success", "critical", "P1", "x" * 5000]),
)  # fmt: skip
JSON = st.recursive(
    SCALARS,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids, max_size=4),
    max_leaves=6,
)


def _dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value)
    except TypeError:  # integers beyond 64 bits: the standard library writes them
        return json.dumps(value).encode()


@st.composite
def mutated_envelopes(draw: st.DrawFn) -> bytes:
    """A valid envelope of some type with one to three fields (top level or payload) replaced, removed
    or added."""
    document = copy.deepcopy(draw(st.sampled_from(TEMPLATES)))
    for _ in range(draw(st.integers(1, 3))):
        target = document
        while isinstance(target, dict) and target and draw(st.booleans()):
            inner = target[draw(st.sampled_from(sorted(target)))]
            if not isinstance(inner, dict):
                break
            target = inner
        action = draw(st.sampled_from(["replace", "remove", "add"]))
        if action == "add" or not target:
            target[draw(st.text(max_size=12))] = draw(JSON)
        elif action == "remove":
            del target[draw(st.sampled_from(sorted(target)))]
        else:
            target[draw(st.sampled_from(sorted(target)))] = draw(JSON)
    return _dumps(document)


HOSTILE_DATA = st.one_of(
    st.binary(max_size=2048),
    st.text(max_size=512),
    JSON.map(_dumps),
    mutated_envelopes(),
    st.sampled_from(TEMPLATES).map(_dumps),
)


def check_decode(data: bytes | str) -> None:
    """``decode`` gives an envelope that survives a round trip, or a DecodeError; nothing else."""
    try:
        envelope = decode(data)
    except DecodeError as exc:
        assert str(exc)
        return
    assert decode(encode(envelope)) == envelope


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(HOSTILE_DATA)
def test_decode_only_ever_raises_decode_error(data: bytes | str) -> None:
    check_decode(data)


@pytest.mark.slow
@settings(max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(HOSTILE_DATA)
def test_decode_only_ever_raises_decode_error_at_length(data: bytes | str) -> None:
    check_decode(data)


_namespaces: Callable[[], int] = itertools.count().__next__


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(st.lists(st.one_of(mutated_envelopes(), st.sampled_from(TEMPLATES).map(_dumps), st.binary(max_size=64)),
                min_size=1, max_size=6))  # fmt: skip
def test_the_coordinator_survives_any_mix_of_entries(redis_url: str, batch: list[bytes]) -> None:
    namespace = f"fuzz{_namespaces()}"
    applied, dead, pending = asyncio.run(_coordinate(redis_url, namespace, batch))
    assert pending == 0 and applied == len(batch)
    undecodable = [data for data in batch if not _decodes(data)]
    assert len(dead) == len(undecodable)
    assert not [
        reason for reason in dead if not reason.startswith(("not JSON", "invalid envelope", "entry "))
    ], dead


def _decodes(data: bytes) -> bool:
    try:
        decode(data)
    except DecodeError:
        return False
    return True


async def _coordinate(url: str, namespace: str, batch: list[bytes]) -> tuple[int, list[str], int]:
    client = await connect(Settings.from_url(url))
    try:
        keys = await open_namespace(client, namespace, 1)
        stream = keys.stream(0, StreamKind.SIGNALS)
        for data in batch:
            await client.xadd(stream, {"data": data})
        applied = await Coordinator(client, keys, Policy(), CoordinatorOptions()).run(burst=True)
        rows = cast(Entries, await client.xrange(keys.stream(0, StreamKind.DEAD)))
        dead = [fields[b"reason"].decode() for _, fields in rows]
        pending = (await client.xpending(stream, "coordinator"))["pending"]
        return applied, dead, int(pending)
    finally:
        await client.aclose()
