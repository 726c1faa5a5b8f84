"""``subagent-bus tail`` on a cluster when one node is killed and restarted: a follower retries and
resumes from where it was, printing every entry exactly once, the entries of the other nodes' shards too.

The cluster client closes the lost node's connections while other readers use them, and redis-py 8.1 then
raises ``AttributeError`` instead of ``ConnectionError`` (issue 4287): :func:`bus.connection.translated`
takes that one for a lost connection, and nothing else."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import redis.asyncio as redis
from adapter_kit import wait_until
from redis.exceptions import ResponseError
from workers.kit import connected, progress

from bus.connection import translated
from bus.embedded import RedisCluster, RedisProcess
from bus.envelope import Envelope, encode
from bus.errors import ConnectionFailed
from bus.keys import open_namespace
from bus.publisher import Publisher
from coordinator.policy import Policy
from coordinator.service import Coordinator, CoordinatorOptions

CLI = str(Path(sys.executable).parent / "subagent-bus")
GROUPS = ["alpha", "beta", "gamma", "epsilon"]  # shards 2, 3, 1 and 0 of 4


def _spread(count: int, start: int = 0) -> list[Envelope]:
    return [progress(i, group_id=GROUPS[i % len(GROUPS)]) for i in range(start, start + count)]


async def _publish(url: str, envelopes: Sequence[Envelope]) -> None:
    client = redis.RedisCluster.from_url(url)
    try:
        await Publisher(client, await open_namespace(client, "tl", 4)).publish_many(envelopes)
    finally:
        await client.aclose()


async def _blocked(nodes: Sequence[RedisProcess]) -> int:
    total = 0
    for node in nodes:
        client = redis.Redis.from_url(node.url)
        try:
            total += int((await client.info("clients"))["blocked_clients"])
        finally:
            await client.aclose()
    return total


async def _owner_of_a_shard(nodes: Sequence[RedisProcess]) -> RedisProcess:
    for node in nodes:
        client = redis.Redis.from_url(node.url)
        try:
            for shard in range(4):
                with contextlib.suppress(ResponseError):  # MOVED: another node's
                    await client.xlen(f"{{tl:{shard}}}:signals")
                    return node
        finally:
            await client.aclose()
    raise AssertionError("the shards are all on the first node")


async def _pending(url: str) -> int:
    client = redis.RedisCluster.from_url(url)
    try:
        return sum([(await client.xpending(f"{{tl:{s}}}:signals", "viewers"))["pending"] for s in range(4)])
    finally:
        await client.aclose()


async def _line(process: asyncio.subprocess.Process) -> bytes:
    assert process.stdout is not None and process.stderr is not None
    line = await asyncio.wait_for(process.stdout.readline(), 60)
    if not line.endswith(b"\n"):  # the end of the output
        pytest.fail(f"tail ended: {(await process.stderr.read()).decode()}")
    return line.rstrip(b"\n")


@pytest.mark.cluster
@pytest.mark.parametrize("mode", [[], ["--group", "viewers"]], ids=["cursor", "group"])
async def test_a_follower_rides_out_a_node_restart(tmp_path: Path, mode: list[str]) -> None:
    cluster = RedisCluster(tmp_path / "cluster")
    for node in cluster.nodes:
        node.appendfsync = "always"  # the restarted node keeps its entries and its slots
    await asyncio.to_thread(cluster.start)
    process = None
    try:
        await _publish(cluster.url, _spread(4))
        process = await asyncio.create_subprocess_exec(
            CLI, "tail", "--redis-url", cluster.url, "--cluster", "--namespace", "tl", "--socket-timeout", "2",
            "--json", "--from", "0", "--count", "8", *mode,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        before = [await _line(process) for _ in range(4)]

        async def following() -> bool:
            return await _blocked(cluster.nodes) >= 4

        await wait_until(following, 30, "tail to block on the 4 shards")
        victim = await _owner_of_a_shard(cluster.nodes[1:])  # the follower must find it again by itself
        victim.kill()
        await asyncio.to_thread(victim.start)
        await _publish(cluster.url, _spread(4, start=4))
        after = [await _line(process) for _ in range(4)]
        assert await asyncio.wait_for(process.wait(), 60) == 0
        assert sorted(before + after) == sorted(encode(e) for e in _spread(8))
        if mode:
            assert await _pending(cluster.url) == 0
    finally:
        if process is not None and process.returncode is None:
            process.kill()
            await process.wait()
        cluster.stop()


async def test_a_write_on_a_connection_closed_under_it_is_a_lost_connection(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    connection = await client.connection_pool.get_connection()  # type: ignore[no-untyped-call]
    try:
        connection._writer = None  # what another task's disconnect leaves to a task that is writing
        with pytest.raises(ConnectionFailed, match=r"closed while writing\)$"), translated():
            await connection._send_packed_command([b"*1\r\n$4\r\nPING\r\n"])
    finally:
        await connection.disconnect()
        await client.aclose()


def test_any_other_attribute_error_stays_one() -> None:
    with pytest.raises(AttributeError), translated():
        _ = None.writelines  # type: ignore[attr-defined]


async def test_a_coordinator_says_once_per_shard_that_the_server_is_away(fresh_redis: RedisProcess) -> None:
    log = fresh_redis.directory / "coordinator.log"
    with log.open("wb") as sink:
        process = await asyncio.create_subprocess_exec(
            CLI, "coordinator", "--redis-url", fresh_redis.url, "--namespace", "away", "--shards", "2",
            "--socket-timeout", "2", stderr=sink,
        )  # fmt: skip
    try:

        async def said(text: str, times: int) -> bool:
            return log.read_text().count(text) >= times

        await wait_until(lambda: said("acquired", 2), 30, "the coordinator to own both shards")
        fresh_redis.kill()
        await wait_until(
            lambda: said("; retrying every second", 2), 30, "both shards to say the server is away"
        )
        await asyncio.sleep(3)  # the outage: three retries of each shard
        await asyncio.to_thread(fresh_redis.start)
        await wait_until(lambda: said("working again after", 2), 30, "both shards to say they work again")
        text = log.read_text()
        assert text.count("; retrying every second") == 2, text
        assert process.returncode is None
    finally:
        process.terminate()
        await process.wait()


async def test_a_coordinator_keeps_no_connection_of_before_an_outage(fresh_redis: RedisProcess) -> None:
    """None of the connections its pool held when the server went away fails after the server is back,
    whichever task takes it: the pool reconnects one the server closed (with redis-py 8's maintenance
    notifications on, it handed it out as it was). Each failed once, seconds after the restart, and the
    loop whose command took it said a second time that the server was away (what the test above saw now
    and then)."""
    async with connected(fresh_redis.url) as client:
        assert isinstance(client, redis.Redis)
        keys = await open_namespace(client, "idle", 1)
        pool = client.connection_pool
        taken = [await pool.get_connection() for _ in range(4)]  # type: ignore[no-untyped-call]
        for connection in taken:  # idle in the pool, as after ticks and heartbeats side by side
            await pool.release(connection)
        options = CoordinatorOptions(name="c", tick_interval_s=3600, block_ms=50)
        coordinator = Coordinator(client, keys, Policy(), options)
        stop = asyncio.Event()
        running = asyncio.create_task(coordinator.run(stop=stop))
        try:

            async def owned() -> bool:
                return coordinator.owned == [0]

            async def away() -> bool:
                return not coordinator.owned

            await wait_until(owned, 30, "the coordinator to own the shard")
            fresh_redis.kill()
            await wait_until(away, 30, "the shard loop to find the server gone")
            await asyncio.to_thread(fresh_redis.start)
            assert all(await asyncio.gather(*(client.ping() for _ in range(2 * len(taken)))))
        finally:
            stop.set()
            await asyncio.wait_for(running, 30)
