"""Consumer groups against real servers: delivery, retries, poison entries, dead letters, shutdown."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio
from adapter_kit import wait_until
from workers.kit import connected, entries, progress, progresses

from bus.connection import Client
from bus.consumer import (
    DELETED_REASON,
    Ack,
    Consumer,
    Delivery,
    dead_letter_fields,
)
from bus.envelope import encode
from bus.errors import CommandFailed, ConfigError
from bus.keys import Keys, StreamKind
from bus.publisher import Publisher
from bus.stream_replies import parse_autoclaim, stream_entries

KEYS = Keys("cons", 4)
STREAM = KEYS.stream(KEYS.shard_of("group-1"), StreamKind.SIGNALS)
DEAD = KEYS.stream(KEYS.shard_of("group-1"), StreamKind.DEAD)


def _consumer(client: Client, name: str = "c1", **options: int) -> Consumer:
    return Consumer(client, STREAM, "workers", name, **options)  # type: ignore[arg-type]


async def _dead_letters(client: Client) -> list[dict[str, bytes]]:
    return [{k.decode(): v for k, v in fields.items()} for _, fields in await entries(client, DEAD)]


class Recorder:
    """A handler that records envelope ids; ``fail`` names ids it raises on."""

    def __init__(self, fail: frozenset[str] = frozenset()) -> None:
        self.seen: list[str] = []
        self.fail = fail

    async def __call__(self, delivery: Delivery) -> Ack:
        assert delivery.envelope is not None
        if delivery.envelope.id in self.fail:
            raise RuntimeError(f"cannot handle {delivery.envelope.id}")
        self.seen.append(delivery.envelope.id)
        return Ack.ACK


async def test_burst_delivers_everything_in_order_and_acks(bus_url: str) -> None:
    async with connected(bus_url) as client:
        envelopes = progresses(230)
        await Publisher(client, KEYS).publish_many(envelopes)
        consumer = _consumer(client, batch=50)
        await consumer.ensure_group()
        await consumer.ensure_group()  # BUSYGROUP is fine
        recorder = Recorder()
        assert await consumer.run(recorder, burst=True) == 230
        assert recorder.seen == [e.id for e in envelopes]
        assert await consumer.pending_count() == 0
        assert await consumer.run(recorder, burst=True) == 0


async def test_poison_entries_are_dead_lettered_and_the_rest_is_processed(bus_url: str) -> None:
    async with connected(bus_url) as client:
        publisher = Publisher(client, KEYS)
        await publisher.publish_many(progresses(2))
        await client.xadd(STREAM, {"data": b"not json {"})  # a foreign client's garbage
        await client.xadd(STREAM, {"payload": b"x", b"\xffother\x1b": b"y"})  # a name no UTF-8
        await publisher.publish_many(progresses(3, start=2))
        consumer = _consumer(client, reclaim_idle_ms=20, max_deliveries=3)
        await consumer.ensure_group()
        recorder = Recorder(fail=frozenset({"e2"}))
        assert await consumer.run(recorder, burst=True) == 7
        assert recorder.seen == ["e0", "e1", "e3", "e4"]
        dead = await _dead_letters(client)
        assert [d.get("data") for d in dead] == [b"not json {", None, encode(progress(2))]
        assert dead[0]["reason"].startswith(b"not JSON")
        assert dead[1]["reason"] == b"entry has no 'data' field (fields: \\xffother\\x1b, payload)"
        assert (
            dead[2]["reason"] == b"handler failed: RuntimeError: cannot handle e2 (delivery 3 of at most 3)"
        )
        assert [d["deliveries"] for d in dead] == [b"1", b"1", b"3"]
        assert all(d["stream"] == STREAM.encode() for d in dead)
        assert await consumer.pending_count() == 0


async def test_entries_over_the_delivery_limit_are_flagged_without_calling_the_handler(bus_url: str) -> None:
    async with connected(bus_url) as client:
        await Publisher(client, KEYS).publish(progress(0))
        first = _consumer(client, "dies-1", reclaim_idle_ms=0, max_deliveries=2)
        await first.ensure_group()
        assert [d.deliveries for d in await first.read()] == [1]  # and then it crashes
        second = _consumer(client, "dies-2", reclaim_idle_ms=0, max_deliveries=2)
        (again,) = await second.read()
        assert (again.deliveries, again.error) == (2, None)
        third = _consumer(client, "survivor", reclaim_idle_ms=0, max_deliveries=2)
        recorder = Recorder()
        assert await third.run(recorder, burst=True) == 1
        assert recorder.seen == []
        (dead,) = await _dead_letters(client)
        assert dead["reason"] == b"delivered 3 times, over the limit of 2"
        assert dead["data"] == encode(progress(0))


async def test_an_entry_deleted_while_pending_is_dead_lettered(bus_url: str) -> None:
    async with connected(bus_url) as client:
        ids = await Publisher(client, KEYS).publish_many(progresses(2))
        crashed = _consumer(client, "crashed", reclaim_idle_ms=0)
        await crashed.ensure_group()
        assert len(await crashed.read()) == 2
        await client.xdel(STREAM, ids[0])
        survivor = _consumer(client, "survivor", reclaim_idle_ms=0)
        recorder = Recorder()
        assert await survivor.run(recorder, burst=True) == 2
        assert recorder.seen == ["e1"]
        (dead,) = await _dead_letters(client)
        assert dead == {"reason": DELETED_REASON.encode(), "stream": STREAM.encode(), "entry_id": ids[0].encode(),
                        "deliveries": b"0"}  # fmt: skip


async def test_a_restarted_consumer_first_rereads_its_own_pending_entries(bus_url: str) -> None:
    async with connected(bus_url) as client:
        await Publisher(client, KEYS).publish_many(progresses(5))
        before = _consumer(client, "same-name", batch=3)
        await before.ensure_group()
        assert [d.envelope.id for d in await before.read() if d.envelope] == ["e0", "e1", "e2"]
        restarted = _consumer(client, "same-name", batch=3)  # default reclaim idle: 30 s
        replay = await restarted.read()
        assert [(d.envelope.id if d.envelope else None, d.deliveries) for d in replay] == [
            ("e0", 2),
            ("e1", 2),
            ("e2", 2),
        ]
        await restarted.settle([(d, Ack.ACK, None) for d in replay])
        assert [d.envelope.id for d in await restarted.read() if d.envelope] == ["e3", "e4"]


async def test_holding_a_delivery_keeps_other_readers_from_taking_it_for_abandoned(bus_url: str) -> None:
    async with connected(bus_url) as client:
        await Publisher(client, KEYS).publish_many(progresses(1))
        worker = _consumer(client, "worker")
        await worker.ensure_group()
        (delivery,) = await worker.read()

        async def idle_ms() -> int:
            (record,) = await client.xpending_range(STREAM, "workers", "-", "+", 1, consumername="worker")
            return int(record["time_since_delivered"])

        async def aged() -> bool:
            return await idle_ms() >= 300

        await wait_until(aged, 10, "the delivery to age")
        await worker.hold(delivery)
        assert await idle_ms() < 300
        assert await client.xclaim(STREAM, "workers", "thief", 300, [delivery.entry_id]) == []


async def test_an_own_pending_entry_deleted_before_a_restart_is_flagged(bus_url: str) -> None:
    async with connected(bus_url) as client:
        ids = await Publisher(client, KEYS).publish_many(progresses(2))
        before = _consumer(client, "same-name")
        await before.ensure_group()
        assert len(await before.read()) == 2
        await client.xdel(STREAM, ids[1])
        restarted = _consumer(client, "same-name")
        first, gone = await restarted.read()
        assert (first.entry_id, first.ok, gone.entry_id, gone.raw) == (ids[0], True, ids[1], None)
        assert gone.error == DELETED_REASON
        assert gone.deliveries >= 1  # servers differ on counting the re-delivery of a deleted entry
        await restarted.settle([(first, Ack.ACK, None), (gone, Ack.DEAD, None)])
        assert await restarted.pending_count() == 0
        assert [d["reason"] for d in await _dead_letters(client)] == [DELETED_REASON.encode()]


async def test_retry_redelivers_after_the_idle_time_and_dead_letters_on_request(bus_url: str) -> None:
    async with connected(bus_url) as client:
        await Publisher(client, KEYS).publish_many(progresses(3))
        attempts: list[tuple[str, int]] = []

        async def handler(delivery: Delivery) -> Ack:
            assert delivery.envelope is not None
            attempts.append((delivery.envelope.id, delivery.deliveries))
            if delivery.envelope.id == "e0" and delivery.deliveries == 1:
                return Ack.RETRY
            return Ack.DEAD if delivery.envelope.id == "e2" else Ack.ACK

        consumer = _consumer(client, reclaim_idle_ms=30)
        await consumer.ensure_group()
        assert await consumer.run(handler, burst=True) == 3
        assert attempts == [("e0", 1), ("e1", 1), ("e2", 1), ("e0", 2)]
        (dead,) = await _dead_letters(client)
        assert dead["reason"] == b"rejected by the handler"


async def test_settle_maps_each_decision(redis_url: str) -> None:
    async with connected(redis_url) as client:
        await Publisher(client, KEYS).publish_many(progresses(3))
        consumer = _consumer(client)
        await consumer.ensure_group()
        a, b, c = await consumer.read()
        await consumer.settle([(a, Ack.ACK, None), (b, Ack.RETRY, None), (c, Ack.DEAD, "not for us")])
        pending: Any = await client.xpending_range(STREAM, "workers", "-", "+", 10)
        assert [p["message_id"].decode() for p in pending] == [b.entry_id]
        (dead,) = await _dead_letters(client)
        assert (dead["reason"], dead["entry_id"]) == (b"not for us", c.entry_id.encode())
        await consumer.settle([])


@pytest.mark.parametrize("decision", [None, False, "retyr"])
async def test_settle_refuses_what_is_no_decision_and_settles_nothing(
    redis_url: str, decision: object
) -> None:
    async with connected(redis_url) as client:
        await Publisher(client, KEYS).publish_many(progresses(2))
        consumer = _consumer(client)
        await consumer.ensure_group()
        a, b = await consumer.read()
        with pytest.raises(ConfigError, match="is no decision for entry"):
            await consumer.settle([(a, Ack.ACK, None), (b, decision, None)])  # type: ignore[list-item]
        assert (await client.xpending(STREAM, "workers"))["pending"] == 2
        assert await _dead_letters(client) == []


async def test_a_handler_returning_garbage_is_retried_then_dead_lettered(redis_url: str) -> None:
    async with connected(redis_url) as client:
        await Publisher(client, KEYS).publish(progress(0))

        async def handler(delivery: Delivery) -> Ack:
            return None  # type: ignore[return-value]

        consumer = _consumer(client, reclaim_idle_ms=10, max_deliveries=2)
        await consumer.ensure_group()
        assert await consumer.run(handler, burst=True) == 1
        (dead,) = await _dead_letters(client)
        assert dead["reason"] == b"handler returned None, not an Ack (delivery 2 of at most 2)"


async def test_stop_finishes_the_batch_in_hand(bus_url: str) -> None:
    async with connected(bus_url) as client:
        await Publisher(client, KEYS).publish_many(progresses(250))
        stop = asyncio.Event()
        seen: list[str] = []

        async def handler(delivery: Delivery) -> Ack:
            assert delivery.envelope is not None
            seen.append(delivery.envelope.id)
            stop.set()
            return Ack.ACK

        consumer = _consumer(client, batch=100)
        await consumer.ensure_group()
        assert await consumer.run(handler, stop=stop) == 100
        assert len(seen) == 100
        assert await consumer.pending_count() == 0
        assert await consumer.run(handler, burst=True) == 150


async def test_a_following_consumer_wakes_up_for_new_entries(bus_url: str) -> None:
    async with connected(bus_url) as client:
        consumer = _consumer(client, block_ms=200)
        await consumer.ensure_group("$")
        stop = asyncio.Event()
        got = asyncio.Event()

        async def handler(delivery: Delivery) -> Ack:
            got.set()
            return Ack.ACK

        task = asyncio.create_task(consumer.run(handler, stop=stop))
        await Publisher(client, KEYS).publish(progress(9))
        await asyncio.wait_for(got.wait(), 10)
        stop.set()
        assert await asyncio.wait_for(task, 10) == 1


async def test_a_missing_group_is_a_command_error(redis_url: str) -> None:
    async with connected(redis_url) as client:
        await Publisher(client, KEYS).publish(progress(0))
        with pytest.raises(CommandFailed, match="NOGROUP"):
            await _consumer(client).read()


async def test_bad_options_are_config_errors(bus_url: str) -> None:
    async with connected(bus_url) as client:
        with pytest.raises(ConfigError):
            _consumer(client, batch=0)
        with pytest.raises(ConfigError):
            Consumer(client, STREAM, "", "c")
        if isinstance(client, redis.asyncio.RedisCluster):
            with pytest.raises(ConfigError, match="hash slot"):
                Consumer(client, STREAM, "g", "c", dead_stream="elsewhere:dead")


def test_autoclaim_replies_of_both_server_generations() -> None:
    entries = [(b"1-0", {b"data": b"x"}), (b"2-0", {b"data": b"y"})]
    assert parse_autoclaim([b"0-0", entries, [b"3-0"]]) == (
        "0-0",
        [("1-0", {b"data": b"x"}), ("2-0", {b"data": b"y"})],
        ["3-0"],
        0,
    )
    # Redis 6.2: no third element, a nil (parsed as (None, None)) in place of each deleted entry
    assert parse_autoclaim([b"5-0", [entries[0], (None, None), None]]) == (
        "5-0",
        [("1-0", {b"data": b"x"})],
        [],
        2,
    )
    assert parse_autoclaim([b"0-0", [], []]) == ("0-0", [], [], 0)


def test_stream_entries_of_every_reply_shape() -> None:
    entries = [(b"1-0", {b"data": b"x"})]
    assert stream_entries([[b"s", entries]]) == entries  # RESP2
    assert stream_entries({b"s": entries}) == entries  # RESP3, unified shapes
    assert stream_entries({b"s": [entries]}) == entries  # RESP3, legacy shapes
    assert stream_entries([]) == stream_entries({}) == stream_entries(None) == []


def test_dead_letter_fields_keep_the_original_bytes() -> None:
    fields = dead_letter_fields(
        stream="s", entry_id="1-0", raw=b"\xff\x00raw", reason="r" * 5000, deliveries=4
    )
    assert fields["data"] == b"\xff\x00raw"
    assert (fields["stream"], fields["entry_id"], fields["deliveries"]) == ("s", "1-0", "4")
    assert len(fields["reason"]) == 2000
    assert "data" not in dead_letter_fields(stream="s", entry_id="1-0", raw=None, reason="gone", deliveries=0)
