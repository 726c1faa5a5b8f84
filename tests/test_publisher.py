"""Publishing to real servers (standalone and cluster)."""

from __future__ import annotations

import pytest
import redis.asyncio
from workers.kit import connected, entries, progress, progresses

from bus.envelope import MAX_ENVELOPE_BYTES, Envelope, decode, encode
from bus.errors import EncodeError, EnvelopeTooLarge
from bus.keys import Keys, StreamKind, open_namespace
from bus.publisher import Publisher


async def test_publish_writes_one_data_field_in_the_group_shard(bus_url: str) -> None:
    async with connected(bus_url) as client:
        keys = await open_namespace(client, "pub", 8)
        publisher = Publisher(client, keys)
        envelope = progress(1, group_id="alpha")
        entry_id = await publisher.publish(envelope)
        stream = keys.stream(keys.shard_of("alpha"), StreamKind.SIGNALS)
        stored = await entries(client, stream)
        assert stored == [(entry_id, {b"data": encode(envelope)})]
        assert decode(stored[0][1][b"data"]) == envelope
        await publisher.publish(envelope, StreamKind.FINDINGS)
        assert await client.xlen(keys.stream(keys.shard_of("alpha"), StreamKind.FINDINGS)) == 1


async def test_publish_many_keeps_input_order_across_shards(bus_url: str) -> None:
    async with connected(bus_url) as client:
        keys = Keys("pub", 8)
        publisher = Publisher(client, keys)
        groups = ["alpha", "beta", "gamma", "x", "y"]
        envelopes = [progress(i, group_id=groups[i % len(groups)]) for i in range(250)]
        ids = await publisher.publish_many(envelopes, StreamKind.EVENTS)
        assert len(ids) == 250
        for envelope, entry_id in zip(envelopes, ids, strict=True):
            stream = keys.stream(keys.shard_of(envelope.group_id), StreamKind.EVENTS)
            (only,) = await entries(client, stream, entry_id, entry_id)
            assert decode(only[1][b"data"]) == envelope
        per_group = [ids[i] for i in range(0, 250, len(groups))]  # one group's ids grow
        assert per_group == sorted(per_group, key=lambda e: tuple(int(p) for p in e.split("-")))
        assert await publisher.publish_many([]) == []


async def test_directives_go_to_the_agent_inbox(bus_url: str) -> None:
    async with connected(bus_url) as client:
        keys = Keys("pub", 4)
        envelope = progress(3, group_id="beta")
        await Publisher(client, keys).send_directive(envelope)
        inbox = keys.inbox(keys.shard_of("beta"), envelope.agent_id)
        assert [decode(fields[b"data"]) for _, fields in await entries(client, inbox)] == [envelope]


@pytest.mark.parametrize(
    ("refused", "error", "message"),
    [
        (progress(0, message="x" * MAX_ENVELOPE_BYTES), EnvelopeTooLarge, r"is \d+ bytes encoded, over the"),
        (progress(0, message="half a pair: \ud800"), EncodeError, "cannot be encoded"),
    ],
)
async def test_an_envelope_that_cannot_be_sent_is_refused_and_nothing_is_written(
    redis_url: str, refused: Envelope, error: type[Exception], message: str
) -> None:
    async with connected(redis_url) as client:
        keys = Keys("pub", 1)
        publisher = Publisher(client, keys)
        with pytest.raises(error, match=r"e0 \(PROGRESS\) " + message):
            await publisher.publish(refused)
        with pytest.raises(error):
            await publisher.publish_many([progress(1), refused])
        assert await client.exists(keys.stream(0, StreamKind.SIGNALS)) == 0


async def test_a_client_that_decodes_replies_gets_its_entry_ids(redis_url: str) -> None:
    client = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
    try:
        keys = Keys("pub", 1)
        publisher = Publisher(client, keys)
        first = await publisher.publish(progress(0))
        rest = await publisher.publish_many([progress(1), progress(2)])
        stored = await client.xrange(keys.stream(0, StreamKind.SIGNALS)) or []
        assert [entry_id for entry_id, _ in stored] == [first, *rest]  # each written once
    finally:
        await client.aclose()


async def test_maxlen_caps_the_stream_approximately(redis_url: str) -> None:
    async with connected(redis_url) as client:
        keys = Keys("pub", 1)
        publisher = Publisher(client, keys, maxlen=10)
        for chunk in range(10):
            await publisher.publish_many(progresses(100, start=chunk * 100))
        length = await client.xlen(keys.stream(0, StreamKind.SIGNALS))
        assert 10 <= length < 1000
    with pytest.raises(ValueError, match="maxlen"):
        Publisher(client, keys, maxlen=0)
