"""The whole transport on a 3-master Redis Cluster: shards spread over nodes, one slot per shard."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import redis
import redis.asyncio
from adapter_kit import CLI
from redis.crc import key_slot
from workers.kit import connected, progress

from bus import wire
from bus.connection import translated
from bus.consumer import Ack, Consumer, Delivery
from bus.embedded import free_port
from bus.errors import CommandFailed, ConnectionFailed
from bus.keys import Keys, StreamKind, open_namespace
from bus.publisher import Publisher
from bus.retention import trim_namespace

pytestmark = pytest.mark.cluster

GROUPS = [f"group-{i}" for i in range(40)]


async def test_each_shard_is_one_slot_and_shards_spread_over_the_nodes(cluster_url: str) -> None:
    async with connected(cluster_url) as client:
        assert isinstance(client, redis.asyncio.RedisCluster)
        keys = await open_namespace(client, "cl", 8)
        nodes = set()
        for shard in keys.all_shards():
            names = [keys.stream(shard, kind) for kind in StreamKind]
            names += [keys.inbox(shard, "agent"), keys.state(shard, "lease")]
            slots = {await client.cluster_keyslot(name) for name in names}
            assert len(slots) == 1
            node = client.get_node_from_key(names[0])
            assert node is not None
            nodes.add(node.name)
        assert len(nodes) == 3


async def test_publish_consume_dead_letter_and_trim_across_nodes(cluster_url: str) -> None:
    async with connected(cluster_url) as client:
        keys = await open_namespace(client, "cl", 8)
        envelopes = [progress(i, group_id=GROUPS[i % len(GROUPS)]) for i in range(400)]
        await Publisher(client, keys).publish_many(envelopes)
        seen: list[str] = []

        async def handler(delivery: Delivery) -> Ack:
            assert delivery.envelope is not None
            seen.append(delivery.envelope.id)
            return Ack.DEAD if delivery.envelope.id.endswith("7") else Ack.ACK

        for shard in keys.all_shards():
            stream = keys.stream(shard, StreamKind.SIGNALS)
            consumer = Consumer(client, stream, "coordinator", "c", batch=32)  # the group trim waits for
            await consumer.ensure_group()
            await consumer.run(handler, burst=True)
        assert sorted(seen) == sorted(e.id for e in envelopes)
        dead = 0
        for shard in keys.all_shards():
            dead += await client.xlen(keys.stream(shard, StreamKind.DEAD))
        assert dead == 40
        removed = await trim_namespace(client, keys, maxlen_signals=None, maxlen_events=None)
        assert removed == 400


async def test_a_shard_transaction_spans_its_streams_and_state_but_not_two_shards(cluster_url: str) -> None:
    async with connected(cluster_url) as client:
        keys = await open_namespace(client, "cl", 8)
        shard = keys.shard_of("group-1")
        pipe = client.pipeline(transaction=True)
        pipe.set(keys.state(shard, "lease"), "token")
        pipe.xadd(keys.stream(shard, StreamKind.EVENTS), {"data": b"{}"})
        pipe.xadd(keys.stream(shard, StreamKind.DEAD), {"data": b"{}"})
        pipe.xadd(keys.inbox(shard, "agent"), {"data": b"{}"})
        with translated():
            assert len(await pipe.execute()) == 4
        other = (shard + 1) % keys.shards
        pipe = client.pipeline(transaction=True)
        pipe.set(keys.state(shard, "a"), "1")
        pipe.set(keys.state(other, "b"), "1")
        with pytest.raises(CommandFailed, match="slot"), translated():
            await pipe.execute()


def test_the_cli_without_the_cluster_client_names_a_cluster_node(cluster_url: str) -> None:
    """``--no-cluster`` against a cluster node: a key of another node's slot is the clue."""
    done = subprocess.run(
        [CLI, "status", "--no-cluster", "--redis-url", cluster_url, "--namespace", "elsewhere-xyz"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 1
    assert "the server is a Redis Cluster node: it sent a key to another node (MovedError)" in done.stderr


def test_a_coordinator_without_the_cluster_client_stops_with_the_reason(cluster_url: str) -> None:
    """Its namespace on the node of the URL, some shard on another: it stopped applying nothing there."""
    cluster = redis.RedisCluster.from_url(cluster_url)
    here = int(cluster_url.rsplit(":", 1)[1].split("/", maxsplit=1)[0])

    def port_of(key: str) -> int:
        return int(cluster.nodes_manager.get_node_from_slot(key_slot(key.encode())).port)

    namespace = next(f"nc{i}" for i in range(200) if port_of(Keys(f"nc{i}", 2).meta) == here)
    keys = Keys(namespace, 2)
    assert any(port_of(keys.stream(s, StreamKind.SIGNALS)) != here for s in keys.all_shards())
    cluster.set(keys.meta, "2")
    cluster.close()
    argv = [CLI, "coordinator", "--no-cluster", "--redis-url", cluster_url, "--namespace", namespace]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)  # not for ever
    assert done.returncode == 1
    assert "the server is a Redis Cluster node: it sent a key to another node" in done.stderr


async def test_a_batch_after_a_node_stopped_answering_asks_the_cluster_where_its_slot_is(
    cluster_url: str,
) -> None:
    """A master killed and its replica promoted: the client's map still names the dead node for the
    slot, and nothing but MOVED or ASK mended it, so an adapter published to the dead node for ever. Here
    the map is made to name a node that does not answer; the next batch after the failure finds the slot."""
    async with connected(cluster_url) as client:
        assert isinstance(client, redis.asyncio.RedisCluster)
        keys = await open_namespace(client, "cl", 8)
        stream = keys.stream(keys.shard_of(GROUPS[0]), StreamKind.SIGNALS)
        slot = key_slot(stream.encode())
        gone = redis.asyncio.cluster.ClusterNode("127.0.0.1", free_port(), server_type="primary")
        client.nodes_manager.slots_cache[slot] = [gone]
        with pytest.raises(ConnectionFailed):
            await wire.execute(client, stream, [(b"XADD", stream.encode(), b"*", b"data", b"x")])
        (entry_id,) = await wire.execute(client, stream, [(b"XADD", stream.encode(), b"*", b"data", b"y")])
        rows: Any = await client.xrange(stream)
        assert [(entry_id, {b"data": b"y"})] == rows
