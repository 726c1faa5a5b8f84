"""Poison entries: dead-lettered with the reason and the delivery count; the entries after them go on.

Coordinator (real processes):

- entries that are not envelopes (not JSON, JSON that is no envelope, an unknown type, more than the
  size limit, no ``data`` field at all) are written to the shard's dead-letter stream with the decoder's
  reason, their delivery count and their original bytes, and acknowledged in the same commit;
- an entry whose deliveries exceed the limit (five coordinators read it and died before committing: the
  history is written with ``XCLAIM``, which counts a delivery each time) is dead-lettered as such;
- an entry deleted (``XDEL``) while a coordinator that has since died held it: the successor must account
  for it in the dead-letter stream instead of dropping it silently.

No envelope that makes a rule raise could be built: every payload is validated before the rules see it,
and the rules' own failures are caught and dead-lettered by the service (``rule failed: ...``); the
bus consumer covers a handler that fails every time.

Bus consumer: a handler that raises on one envelope every time; after ``max_deliveries`` the entry is
dead-lettered with the handler's error and the delivery count, and every other entry is acknowledged.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from checker import numbered_findings, state_mismatches
from workers.kit import connected, progresses

from bus.consumer import Ack, Consumer, Delivery
from bus.envelope import MAX_ENVELOPE_BYTES, encode
from bus.keys import Keys, StreamKind
from bus.publisher import Publisher
from coordinator.service import GROUP
from faults.harness import Bus, Fleet, Recorder, freeze_holding, open_bus, wait_until


def _poison() -> list[tuple[dict[str, bytes], str]]:
    """(fields, a fragment of the reason the coordinator must give) for each undecodable entry."""
    unknown_type = orjson.loads(encode(numbered_findings(1, 1, groups=1)[0]))
    unknown_type["type"] = "NOT_A_TYPE"
    return [
        ({"data": b"\xff{not json"}, "not JSON"),
        ({"data": b'{"id": "x"}'}, "invalid envelope"),
        ({"data": orjson.dumps(unknown_type)}, "invalid envelope"),
        ({"data": b" " * (MAX_ENVELOPE_BYTES + 1)}, "byte limit"),
    ]


async def _dead(bus: Bus, shard: int) -> list[tuple[str, dict[bytes, bytes]]]:
    rows: Any = await bus.client.xrange(bus.stream(shard, StreamKind.DEAD))
    return [(entry_id.decode(), fields) for entry_id, fields in rows]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _applied_all(bus: Bus, count: int) -> None:
    async def done() -> bool:
        return await bus.applied() >= count and await bus.quiet()

    await wait_until(done, 90, f"{count} findings applied")


async def test_undecodable_entries_are_dead_lettered_and_the_rest_applied(
    redis_url: str, fleet: Fleet, fault_report: Recorder
) -> None:
    published = numbered_findings(agents=4, per_agent=50, groups=1)
    poison = _poison()
    async with open_bus(redis_url) as bus:
        shard = bus.keys.shard_of("group-0")
        stream = bus.stream(shard, StreamKind.SIGNALS)
        poison_ids: list[str] = []
        step = len(published) // len(poison)
        for i, (raw, _) in enumerate(poison):
            await bus.publish(published[i * step : (i + 1) * step])
            poison_ids.append(_text(await bus.client.xadd(stream, raw)))  # type: ignore[arg-type]
        await bus.publish(published[len(poison) * step :])
        fleet.start(redis_url, name="coord-a")
        await _applied_all(bus, len(published))
        report = await bus.check(published)
        dead = await _dead(bus, shard)
        fault_report(report, poison=len(poison), dead_lettered=len(dead))
        assert report.clean, report
        assert [fields[b"entry_id"].decode() for _, fields in dead] == poison_ids
        for (_, fields), (original, reason) in zip(dead, poison, strict=True):
            assert reason in fields[b"reason"].decode()
            assert fields[b"deliveries"] == b"1"
            assert fields[b"stream"].decode() == stream
            data = original["data"]  # the first bytes of one over an envelope's limit, and its length
            assert fields[b"data"] == data[:MAX_ENVELOPE_BYTES]
            assert fields.get(b"data_bytes") == (
                b"%d" % len(data) if len(data) > MAX_ENVELOPE_BYTES else None
            )
        assert await state_mismatches(bus.client, bus.keys) == {}


@pytest.mark.parametrize(
    ("limit", "earlier"),
    [
        pytest.param(None, 5, id="default-limit"),
        pytest.param(2, 2, id="limit-2"),
        pytest.param(10, 5, id="limit-10"),
    ],
)
async def test_an_entry_over_the_delivery_limit_is_dead_lettered(
    redis_url: str, fleet: Fleet, fault_report: Recorder, limit: int | None, earlier: int
) -> None:
    """``earlier`` coordinators read the entry and died before committing; the next one reads it once
    more and dead-letters it when that is over its ``--max-deliveries`` (5 by default)."""
    published = numbered_findings(agents=4, per_agent=25, groups=1)
    async with open_bus(redis_url) as bus:
        shard = bus.keys.shard_of("group-0")
        stream = bus.stream(shard, StreamKind.SIGNALS)
        await bus.client.xgroup_create(stream, GROUP, id="0", mkstream=True)
        await bus.publish(published)
        first: Any = await bus.client.xreadgroup(GROUP, "crashed-0", {stream: ">"}, count=1)
        poison_id = first[0][1][0][0].decode()
        for n in range(1, earlier):  # more coordinators took it over and died before committing
            await bus.client.xclaim(stream, GROUP, f"crashed-{n}", 0, [poison_id])
        fleet.start(redis_url, name="coord-a", max_deliveries=limit)
        over = earlier + 1 > (limit or 5)
        await _applied_all(bus, len(published) - over)
        report = await bus.check(published[over:])
        dead = await _dead(bus, shard)
        fault_report(report, dead_lettered=len(dead))
        assert report.clean, report
        if not over:
            assert dead == []
            return
        assert len(dead) == 1
        fields = dead[0][1]
        assert fields[b"entry_id"].decode() == poison_id
        assert fields[b"deliveries"] == str(earlier + 1).encode()
        assert fields[b"reason"] == f"delivered {earlier + 1} times without being committed".encode()
        assert fields[b"data"] == encode(published[0])


async def test_an_entry_without_a_data_field_is_dead_lettered_as_such(
    redis_url: str, fleet: Fleet, fault_report: Recorder
) -> None:
    published = numbered_findings(agents=2, per_agent=10, groups=1)
    async with open_bus(redis_url) as bus:
        shard = bus.keys.shard_of("group-0")
        stream = bus.stream(shard, StreamKind.SIGNALS)
        await bus.publish(published[:10])
        odd = _text(await bus.client.xadd(stream, {"payload": b"x"}))
        await bus.publish(published[10:])
        fleet.start(redis_url, name="coord-a")
        await _applied_all(bus, len(published))
        report = await bus.check(published)
        dead = await _dead(bus, shard)
        fault_report(report, dead_lettered=len(dead))
        assert report.clean, report
        assert [fields[b"entry_id"].decode() for _, fields in dead] == [odd]
        assert b"no 'data' field" in dead[0][1][b"reason"]


async def test_an_entry_deleted_while_held_is_dead_lettered(
    redis_url: str, fleet: Fleet, fault_report: Recorder
) -> None:
    published = numbered_findings(agents=4, per_agent=100, groups=1)
    async with open_bus(redis_url) as bus:
        shard = bus.keys.shard_of("group-0")
        stream = bus.stream(shard, StreamKind.SIGNALS)
        victim = fleet.start(redis_url, name="coord-a", batch=20)
        await victim.started()
        await bus.publish(published)
        victim, held = await freeze_holding(bus, [victim], streams=[stream])
        deleted = held[stream][-1]
        (title,) = await bus.titles_of(stream, [deleted])
        await bus.client.xdel(stream, deleted)
        victim.kill()
        fleet.start(redis_url, name="coord-b")
        expected = [e for e in published if e.payload.title != title]  # type: ignore[union-attr]
        await _applied_all(bus, len(expected))
        report = await bus.check(expected)
        dead = await _dead(bus, shard)
        fault_report(report, deleted=deleted, dead_lettered=len(dead))
        assert report.clean, report
        assert [fields[b"entry_id"].decode() for _, fields in dead] == [deleted]
        assert b"deleted" in dead[0][1][b"reason"]


KEYS = Keys("poison", 8)
STREAM = KEYS.stream(KEYS.shard_of("group-1"), StreamKind.SIGNALS)


async def test_a_consumer_dead_letters_an_entry_its_handler_always_fails_on(
    bus_url: str, fault_report: Recorder
) -> None:
    published = progresses(40)
    poison = published[7]
    async with connected(bus_url) as client:
        await Publisher(client, KEYS).publish_many(published)
        garbage = _text(await client.xadd(STREAM, {"data": b"\x00garbage"}))
        after = progresses(10, start=40)
        await Publisher(client, KEYS).publish_many(after)
        consumer = Consumer(client, STREAM, "workers", "w", batch=8, reclaim_idle_ms=20, max_deliveries=3)
        await consumer.ensure_group()
        handled: list[str] = []
        attempts: list[int] = []

        async def handler(delivery: Delivery) -> Ack:
            assert delivery.envelope is not None
            if delivery.envelope.id == poison.id:
                attempts.append(delivery.deliveries)
                raise ValueError("cannot handle this one")
            handled.append(delivery.envelope.id)
            return Ack.ACK

        await consumer.run(handler, burst=True)
        rows: Any = await client.xrange(consumer.dead_stream)
        dead = {fields[b"entry_id"].decode(): fields for _, fields in rows}
        fault_report(handled=len(handled), dead_lettered=len(dead), poison_attempts=attempts)
        assert attempts == [1, 2, 3]
        assert sorted(handled) == sorted(e.id for e in [*published, *after] if e.id != poison.id)
        assert len(handled) == len(set(handled))
        poison_fields = next(f for f in dead.values() if f.get(b"data") == encode(poison))
        assert poison_fields[b"deliveries"] == b"3"
        assert b"ValueError: cannot handle this one" in poison_fields[b"reason"]
        assert b"(delivery 3 of at most 3)" in poison_fields[b"reason"]
        assert dead[garbage][b"deliveries"] == b"1"
        assert b"not JSON" in dead[garbage][b"reason"]
        assert await consumer.pending_count() == 0
