"""The key layout (pure) and the namespace's stored shard count (against real servers)."""

from __future__ import annotations

import zlib

import pytest
import redis
from redis.crc import key_slot
from workers.kit import connected

from bus.errors import ConfigError
from bus.keys import Keys, StreamKind, dead_stream_for, meta_key, open_namespace


def test_shard_is_crc32_of_the_group_id_modulo_the_shard_count() -> None:
    keys = Keys("sbus", 8)
    for group in ("group-1", "alpha", "ünïcode", "x" * 256):
        assert keys.shard_of(group) == zlib.crc32(group.encode("utf-8")) % 8
    assert {keys.shard_of(f"g{i}") for i in range(200)} == set(range(8))


def test_key_names_share_the_shard_hash_tag() -> None:
    keys = Keys("ns.1", 4)
    assert keys.stream(3, StreamKind.SIGNALS) == "{ns.1:3}:signals"
    assert keys.stream(0, StreamKind.DEAD) == "{ns.1:0}:dead"
    assert keys.inbox(2, "agent-7") == "{ns.1:2}:inbox:agent-7"
    assert keys.state(1, "lease") == "{ns.1:1}:lease"
    assert keys.meta == meta_key("ns.1") == "{ns.1}:meta"
    assert list(keys.all_shards()) == [0, 1, 2, 3]
    for shard in keys.all_shards():
        names = [keys.stream(shard, kind) for kind in StreamKind]
        names += [keys.inbox(shard, "a{b}c"), keys.state(shard, "groups")]
        assert len({key_slot(name.encode()) for name in names}) == 1


@pytest.mark.parametrize("namespace", ["", "has space", "a{b}", "a:b", "é"])
def test_invalid_namespace_is_a_config_error(namespace: str) -> None:
    with pytest.raises(ConfigError, match="namespace"):
        Keys(namespace, 8)


@pytest.mark.parametrize("shards", [0, -1, 16385])
def test_invalid_shard_count_is_a_config_error(shards: int) -> None:
    with pytest.raises(ConfigError, match="shard count"):
        Keys("sbus", shards)


def test_out_of_range_shard_or_empty_names_are_refused() -> None:
    keys = Keys("sbus", 2)
    with pytest.raises(ValueError, match="outside"):
        keys.stream(2, StreamKind.SIGNALS)
    with pytest.raises(ValueError, match="agent id"):
        keys.inbox(0, "")
    with pytest.raises(ValueError, match="name"):
        keys.state(0, "")


def test_dead_stream_shares_the_hash_tag() -> None:
    assert dead_stream_for("{sbus:3}:signals") == "{sbus:3}:dead"
    assert dead_stream_for("{sbus:3}:inbox:agent") == "{sbus:3}:dead"
    assert dead_stream_for("plain") == "plain:dead"
    assert dead_stream_for("{}odd") == "{}odd:dead"


async def test_namespace_is_created_once_and_keeps_its_count(bus_url: str) -> None:
    async with connected(bus_url) as client:
        created = await open_namespace(client, "ns", 4)
        assert created == Keys("ns", 4)
        assert await client.get("{ns}:meta") == b"4"
        assert await open_namespace(client, "ns") == Keys("ns", 4)
        assert await open_namespace(client, "ns", 4) == Keys("ns", 4)
        with pytest.raises(ConfigError, match="'ns' has 4 shards, not 16"):
            await open_namespace(client, "ns", 16)
        assert await client.get("{ns}:meta") == b"4"
        assert await open_namespace(client, "other") == Keys("other", 8)
        assert await open_namespace(client, "third", 2) == Keys("third", 2)


@pytest.mark.parametrize("stored", ["lots", "\u00b2"])
async def test_a_damaged_meta_key_is_a_config_error(redis_url: str, stored: str) -> None:
    raw = redis.Redis.from_url(redis_url)
    raw.set("{ns}:meta", stored)
    raw.close()
    async with connected(redis_url) as client:
        with pytest.raises(ConfigError, match="not a shard count"):
            await open_namespace(client, "ns", 8)
