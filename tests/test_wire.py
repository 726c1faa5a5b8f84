"""Pipelines packed by bus.wire, on real servers (standalone and cluster)."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio
from faults.proxy import ReplyDroppingProxy
from hypothesis import given
from hypothesis import strategies as st
from redis.asyncio.connection import Connection
from workers.kit import connected

from bus import wire
from bus.connection import connect
from bus.embedded import RedisProcess
from bus.errors import CommandFailed, ConnectionFailed
from bus.settings import Settings
from coordinator.batch import Fields, entries_of

STREAM = b"{wire}:stream"


def xadd(data: bytes, stream: bytes = STREAM) -> wire.Command:
    return (b"XADD", stream, b"*", b"data", data)


NAMES = st.sampled_from([b"XADD", b"SET", b"MULTI", b"EXEC"])
COMMANDS = st.tuples(NAMES, st.lists(st.binary(max_size=40), max_size=5)).map(lambda c: (c[0], *c[1]))


@given(st.lists(COMMANDS, max_size=8))
def test_pack_is_what_redis_py_packs(commands: list[tuple[bytes, ...]]) -> None:
    packer = Connection()
    expected = b"".join(b"".join(packer.pack_command(*command)) for command in commands)
    assert wire.pack(commands) == expected


async def _data(client: Any, stream: bytes = STREAM) -> list[bytes]:
    rows: Any = await client.xrange(stream)
    return [fields[b"data"] for _, fields in rows]


async def test_replies_come_in_order_and_match_the_stream(bus_url: str) -> None:
    async with connected(bus_url) as client:
        payloads = [b"entry-%d" % i for i in range(250)]
        ids = await wire.execute(client, STREAM, [xadd(p) for p in payloads])
        rows: Any = await client.xrange(STREAM)
        assert ids == [entry_id for entry_id, _ in rows]
        assert await _data(client) == payloads
        assert await wire.execute(client, STREAM, []) == []


async def test_an_error_reply_raises_after_the_batch_and_the_connection_stays_usable(bus_url: str) -> None:
    async with connected(bus_url) as client:
        await client.set(b"{wire}:text", b"not a stream")
        batch = [xadd(b"a"), xadd(b"b", b"{wire}:text"), xadd(b"c")]
        with pytest.raises(CommandFailed, match="WRONGTYPE"):
            await wire.execute(client, STREAM, batch)
        assert await _data(client) == [b"a", b"c"]  # not a transaction: the others ran
        await wire.execute(client, STREAM, [xadd(b"d")])
        assert await _data(client) == [b"a", b"c", b"d"]


async def test_a_transaction_applies_all_or_nothing(bus_url: str) -> None:
    async with connected(bus_url) as client:
        replies = await wire.execute(
            client, STREAM, [xadd(b"a"), (b"SET", b"{wire}:checkpoint", b"1")], transaction=True
        )
        assert replies[1] == b"OK"
        refused_while_queueing = [xadd(b"b"), (b"SET", b"{wire}:checkpoint")]
        with pytest.raises(CommandFailed, match="wrong number of arguments"):
            await wire.execute(client, STREAM, refused_while_queueing, transaction=True)
        assert await _data(client) == [b"a"]
        assert await client.get(b"{wire}:checkpoint") == b"1"
        await client.set(b"{wire}:text", b"x")
        with pytest.raises(CommandFailed, match="WRONGTYPE"):  # a command that fails inside EXEC
            await wire.execute(client, STREAM, [xadd(b"c"), xadd(b"d", b"{wire}:text")], transaction=True)
        assert await wire.execute(client, STREAM, [xadd(b"e")], transaction=True)


async def test_a_pipe_keeps_one_batch_in_flight(bus_url: str) -> None:
    async with connected(bus_url) as client:
        pipe = wire.Pipe(client, STREAM)
        assert await pipe.settle() == []
        await pipe.send([xadd(b"a"), xadd(b"b")])
        assert pipe.in_flight
        with pytest.raises(RuntimeError, match="settled"):
            await pipe.send([xadd(b"c")])
        assert await client.xlen(STREAM) == 2  # another connection sees the batch before it is settled
        assert len(await pipe.settle()) == 2
        assert not pipe.in_flight
        await pipe.send([xadd(b"c")])
        await pipe.settle()
        assert await _data(client) == [b"a", b"b", b"c"]


async def test_a_batch_whose_reply_is_lost_is_written_again_by_the_next_settle(
    redis_server: RedisProcess, redis_url: str
) -> None:
    proxy = ReplyDroppingProxy("127.0.0.1", redis_server.port, b"marked")
    await proxy.start()
    try:
        async with connected(proxy.url) as client, connected(redis_url) as direct:
            await direct.delete(STREAM)
            pipe = wire.Pipe(client, STREAM)
            await pipe.send([xadd(b"first"), xadd(b"marked")], transaction=True)
            with pytest.raises(ConnectionFailed):
                await pipe.settle()
            assert pipe.in_flight  # the outcome is unknown: the batch is kept
            assert proxy.dropped_reply is not None
            await pipe.settle()
            assert await _data(direct) == [b"first", b"marked", b"first", b"marked"]
    finally:
        await proxy.close()


async def test_a_batch_a_server_cannot_take_for_now_stays_in_flight(fresh_redis: RedisProcess) -> None:
    # READONLY (a master demoted to a replica) stands for CLUSTERDOWN and TRYAGAIN too: the batch was
    # dropped as settled, and an adapter that retried thought it delivered
    async with connected(fresh_redis.url) as client, connected(fresh_redis.url) as admin:
        for transaction in (False, True):
            pipe = wire.Pipe(client, STREAM)
            await admin.execute_command("REPLICAOF", "127.0.0.1", "1")  # nothing there: it stays read-only
            try:
                await pipe.send([xadd(b"%d" % transaction), xadd(b"more")], transaction=transaction)
                with pytest.raises(ConnectionFailed, match="ReadOnlyError"):
                    await pipe.settle()
                assert pipe.in_flight
            finally:
                await admin.execute_command("REPLICAOF", "NO", "ONE")
            await pipe.settle()
            assert not pipe.in_flight
        assert await _data(client) == [b"0", b"more", b"1", b"more"]


@pytest.mark.cluster
async def test_a_moved_slot_falls_back_to_redis_py_which_follows_it(cluster_url: str) -> None:
    async with connected(cluster_url) as client:
        assert isinstance(client, redis.asyncio.RedisCluster)
        right = client.get_node_from_key(STREAM.decode())
        assert right is not None
        wrong = next(node for node in client.get_primaries() if node.name != right.name)
        stale: Any = lambda *_args, **_kwargs: wrong  # noqa: E731  # a slot map from before a resharding
        client.get_node_from_key = stale  # type: ignore[method-assign]
        try:
            ids = await wire.execute(client, STREAM, [xadd(b"a"), xadd(b"b")])
        finally:
            del client.get_node_from_key
        assert len(ids) == 2
        assert await _data(client) == [b"a", b"b"]  # each written once, on the node of the slot


async def test_a_reply_later_than_the_socket_timeout_fails_the_batch(redis_url: str) -> None:
    client = await connect(Settings.from_url(redis_url, socket_timeout=0.2))
    try:
        pipe = wire.Pipe(client, STREAM)
        await pipe.send([xadd(b"a"), (b"BLPOP", b"{wire}:nothing", b"2")])
        with pytest.raises(ConnectionFailed, match="Timeout"):
            await pipe.settle()
        assert pipe.in_flight
    finally:
        await client.aclose()


@pytest.mark.parametrize("hold", [False, True])
async def test_a_batch_that_could_not_be_written_is_not_left_in_flight(hold: bool) -> None:
    # the server down: each batch fails as the connection does, and the next is tried anew
    client = redis.asyncio.Redis.from_url("redis://127.0.0.1:1/0")  # nothing listens there
    try:
        pipe = wire.Pipe(client, STREAM, hold=hold)
        for _ in range(2):
            with pytest.raises(ConnectionFailed):
                await pipe.execute([(b"PING",)])
            assert not pipe.in_flight
    finally:
        await client.aclose()


async def test_a_script_is_loaded_where_the_server_does_not_know_it(bus_url: str) -> None:
    script = wire.Script("return {KEYS[1], ARGV[1]}")
    async with connected(bus_url) as client:
        await client.script_flush()
        pipe = wire.Pipe(client, STREAM)
        assert await script(pipe, [STREAM], [b"x"]) == [STREAM, b"x"]  # NOSCRIPT, loaded, run
        assert await script(pipe, [STREAM], [b"y"]) == [STREAM, b"y"]
        failing = wire.Script("return redis.error_reply('refused here')")
        with pytest.raises(CommandFailed, match="refused here"):
            await failing(pipe, [STREAM], [])


async def test_commands_sent_behind_a_script_run_after_it_and_are_reported_lost_on_noscript(
    bus_url: str,
) -> None:
    script = wire.Script("return redis.call('XLEN', KEYS[1])")
    async with connected(bus_url) as client:
        await client.script_flush()
        pipe = wire.Pipe(client, STREAM)
        await client.delete(STREAM)
        # NOSCRIPT: the XADD behind it ran (the script, loaded and run again, sees it); its reply is lost
        assert await script.run(pipe, [STREAM], [], [xadd(b"a")]) == (1, None)
        reply, after = await script.run(pipe, [STREAM], [], [xadd(b"b")])
        assert reply == 1 and after is not None and len(after) == 1  # the XADD ran after the script
        assert await client.xlen(STREAM) == 2
        assert await script.run(pipe, [STREAM], []) == (2, [])


async def test_a_held_connection_serves_batch_after_batch_until_closed(redis_url: str) -> None:
    async with connected(redis_url) as client:
        assert isinstance(client, redis.asyncio.Redis)
        pool = client.connection_pool
        pipe = wire.Pipe(client, STREAM, hold=True)
        await pipe.execute([xadd(b"a")])
        (connection,) = pool._in_use_connections
        await pipe.execute([xadd(b"b")])
        assert pool._in_use_connections == {connection}
        await client.client_kill_filter(_type="normal", skipme=True)
        with pytest.raises(ConnectionFailed):  # the held connection was closed by the server
            await pipe.execute([xadd(b"c")])
        assert not pool._in_use_connections  # a failed connection is not held on to
        assert not pipe.in_flight  # execute() leaves a failed batch to its caller
        await pipe.send([xadd(b"c")])
        await pipe.settle()
        await pipe.close()
        assert not pool._in_use_connections
        assert await _data(client) == [b"a", b"b", b"c"]


async def test_xreadgroup_replies_as_the_coordinator_reads_them(bus_url: str) -> None:
    async with connected(bus_url) as client:
        await client.xgroup_create(STREAM, "g", id="0", mkstream=True)
        first = await client.xadd(STREAM, {"data": b"one"})
        await client.xadd(STREAM, {"other": b"field"})
        await client.xadd(STREAM, {"data": b"three", "trace": b"t1"})
        read = (b"XREADGROUP", b"GROUP", b"g", b"c", b"COUNT", b"10", b"STREAMS", STREAM)
        (reply,) = await wire.execute(client, STREAM, [(*read, b">")])
        datas = [data for _, data in entries_of(reply)]
        assert datas == [b"one", (b"other", b"field"), (b"data", b"three", b"trace", b"t1")]
        no_data, more = datas[1], datas[2]
        assert isinstance(no_data, Fields) and isinstance(more, Fields)
        assert no_data.split() == (None, [(b"other", b"field")])
        assert more.split() == (b"three", [(b"trace", b"t1")])
        await client.xdel(STREAM, first)
        (pending,) = await wire.execute(client, STREAM, [(*read, b"0")])
        assert [data for _, data in entries_of(pending)] == [None, *datas[1:]]  # one deleted
        blocked = (b"XREADGROUP", b"GROUP", b"g", b"c", b"BLOCK", b"10", b"STREAMS", STREAM, b">")
        (nothing,) = await wire.execute(client, STREAM, [blocked])
        assert entries_of(nothing) == []


def test_entries_of_a_resp3_map() -> None:
    rows = [[b"1-0", [b"data", b"x"]], [b"2-0", None]]
    assert entries_of({STREAM: rows}) == entries_of([[STREAM, rows]]) == [(b"1-0", b"x"), (b"2-0", None)]


async def test_routed_commands_reply_in_input_order_from_every_server(bus_url: str) -> None:
    async with connected(bus_url) as client:
        keys = [b"{a}:s", b"{b}:s", b"{c}:s", b"{d}:s"]  # four slots: on a cluster, several nodes
        commands = [(key, xadd(b"%d" % i, key)) for i, key in enumerate(keys * 3)]
        ids = await wire.execute_routed(client, commands)
        for (key, command), entry_id in zip(commands, ids, strict=True):
            rows: Any = await client.xrange(key, entry_id, entry_id)
            assert rows == [(entry_id, {b"data": command[-1]})]
        await client.set(b"{c}:text", b"x")
        with pytest.raises(CommandFailed, match="WRONGTYPE"):
            await wire.execute_routed(
                client, [(b"{a}:s", xadd(b"ok", b"{a}:s")), (b"{c}:text", xadd(b"no", b"{c}:text"))]
            )
        assert await client.xlen(b"{a}:s") == 4  # the other server's batch ran
        assert await wire.execute_routed(client, []) == []
