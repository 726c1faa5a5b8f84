"""``subagent-bus tail`` when the server goes away: a follower retries and resumes from where it was,
printing every entry exactly once; a tail with ``--timeout`` fails fast with the error."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from adapter_kit import wait_until
from faults.proxy import ReplyDroppingProxy
from workers.kit import connected, progress

from bus.embedded import RedisProcess
from bus.envelope import Envelope, encode
from bus.keys import open_namespace
from bus.local_server import ensure_local_server, stop_local_server
from bus.publisher import Publisher

CLI = str(Path(sys.executable).parent / "subagent-bus")
GROUPS = ["alpha", "beta", "gamma", "epsilon"]  # shards 2, 3, 1 and 0 of 4
MODES = [pytest.param([], id="cursor"), pytest.param(["--group", "viewers"], id="group")]


def _spread(count: int, start: int = 0) -> list[Envelope]:
    return [progress(i, group_id=GROUPS[i % len(GROUPS)]) for i in range(start, start + count)]


async def _publish(url: str, envelopes: Sequence[Envelope]) -> None:
    async with connected(url) as client:
        await Publisher(client, await open_namespace(client, "tl", 4)).publish_many(envelopes)


@asynccontextmanager
async def _tail(url: str, *args: str) -> AsyncIterator[asyncio.subprocess.Process]:
    process = await asyncio.create_subprocess_exec(
        CLI, "tail", "--redis-url", url, "--namespace", "tl", "--socket-timeout", "2", "--json", *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def _lines(process: asyncio.subprocess.Process, count: int) -> list[bytes]:
    assert process.stdout is not None
    lines = [await asyncio.wait_for(process.stdout.readline(), 60) for _ in range(count)]
    assert all(line.endswith(b"\n") for line in lines), lines  # not the end of the output
    return [line.rstrip(b"\n") for line in lines]


async def _stderr_until(process: asyncio.subprocess.Process, text: str) -> str:
    assert process.stderr is not None
    seen = ""
    while text not in seen:
        line = await asyncio.wait_for(process.stderr.readline(), 60)
        assert line, f"stderr ended without {text!r}: {seen}"
        seen += line.decode()
    return seen


async def _following(url: str) -> None:
    async with connected(url) as client:

        async def blocked() -> bool:
            return int((await client.info("clients"))["blocked_clients"]) >= 4

        await wait_until(blocked, 30, "tail to block on the 4 shards")


async def _pending(url: str, group: str) -> int:
    async with connected(url) as client:
        return sum([(await client.xpending(f"{{tl:{s}}}:signals", group))["pending"] for s in range(4)])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("persistent", [True, False], ids=["aof", "no-data-kept"])
async def test_a_follower_rides_out_a_server_restart(
    tmp_path: Path, mode: list[str], persistent: bool
) -> None:
    server = RedisProcess(tmp_path / "redis", appendfsync="always" if persistent else None)
    server.start()
    try:
        await _publish(server.url, _spread(3))
        async with _tail(server.url, "--from", "0", "--count", "6", *mode) as process:
            before = await _lines(process, 3)
            await _following(server.url)
            server.kill()
            lost = await _stderr_until(process, "lost the server")
            await asyncio.to_thread(server.start)
            await _publish(server.url, _spread(3, start=3))
            after = await _lines(process, 3)
            assert await asyncio.wait_for(process.wait(), 60) == 0
            assert process.stderr is not None
            lost += (await process.stderr.read()).decode()
        assert sorted(before + after) == sorted(encode(e) for e in _spread(6))
        assert "retrying" in lost
        assert "reconnected" in lost
        if mode:
            assert await _pending(server.url, "viewers") == 0
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("mode", "marker"),
    [([], b"$5\r\nXREAD\r\n"), (["--group", "viewers"], b"$1\r\n>\r\n")],
    ids=["cursor", "group"],
)
async def test_a_lost_reply_neither_skips_nor_repeats_an_entry(
    redis_url: str, mode: list[str], marker: bytes
) -> None:
    envelopes = _spread(12)
    await _publish(redis_url, envelopes)
    port = urlsplit(redis_url).port
    assert port is not None
    proxy = ReplyDroppingProxy("127.0.0.1", port, marker)
    await proxy.start()
    try:
        async with _tail(proxy.url, "--from", "0", "--count", "12", *mode) as process:
            lines = await _lines(process, 12)
            assert await asyncio.wait_for(process.wait(), 60) == 0
    finally:
        await proxy.close()
    assert proxy.dropped_reply is not None and b"PROGRESS" in proxy.dropped_reply  # entries were lost
    assert sorted(lines) == sorted(encode(e) for e in envelopes)
    if mode:
        assert await _pending(redis_url, "viewers") == 0


async def test_a_tail_with_a_timeout_fails_fast(fresh_redis: RedisProcess) -> None:
    await _publish(fresh_redis.url, _spread(1))
    async with _tail(fresh_redis.url, "--timeout", "600") as process:
        await _following(fresh_redis.url)
        fresh_redis.kill()
        assert await asyncio.wait_for(process.wait(), 60) == 1
        assert process.stderr is not None
        assert "Redis unavailable" in (await process.stderr.read()).decode()


async def test_a_follower_of_the_local_server_rides_out_down_and_the_next_start(tmp_path: Path) -> None:
    # without --redis-url: the server of ./.subagent-bus, stopped by `down` and started again by the next
    # command, on its port of before
    env = {k: v for k, v in os.environ.items() if not k.startswith("SUBAGENT_BUS_")}
    url = ensure_local_server(tmp_path / ".subagent-bus")
    try:
        await _publish(url, _spread(1))
        process = await asyncio.create_subprocess_exec(
            CLI, "tail", "--namespace", "tl", "--from", "0", "--count", "2", "--json",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=tmp_path, env=env,
        )  # fmt: skip
        try:
            assert await _lines(process, 1) == [encode(_spread(1)[0])]
            await _following(url)
            down = await asyncio.create_subprocess_exec(CLI, "down", cwd=tmp_path, env=env)
            assert await asyncio.wait_for(down.wait(), 60) == 0
            await _stderr_until(process, "lost the server")
            assert ensure_local_server(tmp_path / ".subagent-bus") == url  # as the next command would
            await _publish(url, _spread(1, start=1))
            assert await _lines(process, 1) == [encode(_spread(1, start=1)[0])]
            assert await asyncio.wait_for(process.wait(), 60) == 0
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    finally:
        stop_local_server(tmp_path / ".subagent-bus")


async def test_status_watch_rides_out_a_server_restart(fresh_redis: RedisProcess, tmp_path: Path) -> None:
    out = tmp_path / "status.out"
    with out.open("wb") as stdout:
        process = await asyncio.create_subprocess_exec(
            CLI, "status", "--watch", "0.2", "--redis-url", fresh_redis.url, "--socket-timeout", "2",
            stdout=stdout, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
    try:

        async def says(text: str, times: int = 1) -> bool:
            return out.read_text().count(text) >= times

        await wait_until(lambda: says("no groups yet"), 30, "the first view")
        fresh_redis.stop()
        await wait_until(lambda: says("Redis unavailable"), 30, "the view to say the server is away")
        assert process.returncode is None and "trying again every 0.2s" in out.read_text()
        views = out.read_text().count("no groups yet")
        fresh_redis.start()
        await wait_until(lambda: says("no groups yet", views + 1), 30, "a view after the restart")
        assert process.returncode is None
    finally:
        process.kill()
        await process.wait()


def test_status_watch_exits_when_its_first_view_fails() -> None:
    done = subprocess.run([CLI, "status", "--watch", "0.2", "--redis-url", "redis://127.0.0.1:1"],
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 1, done.stdout[-500:]  # a wrong URL would never mend: no retries
    assert "Redis unavailable" in done.stderr and "trying again" not in done.stdout + done.stderr


@pytest.mark.parametrize("mode", MODES)
async def test_a_follower_rides_out_a_read_the_server_unblocks_with_an_error(
    fresh_redis: RedisProcess, mode: list[str]
) -> None:
    """``UNBLOCKED``: what a cluster failover answers the blocked reads of a master that became a replica
    (here ``CLIENT UNBLOCK ... ERROR``, which answers the same): read again, not the end of the tail."""
    url = fresh_redis.url
    await _publish(url, _spread(1))
    async with _tail(url, "--from", "0", "--count", "2", *mode) as process:
        assert len(await _lines(process, 1)) == 1
        await _following(url)
        async with connected(url) as client:
            clients = (await client.execute_command("CLIENT", "LIST")).decode().splitlines()
            blocked = [line.split()[0].removeprefix("id=") for line in clients if "cmd=xread" in line]
            assert blocked, clients
            for client_id in blocked:
                await client.execute_command("CLIENT", "UNBLOCK", client_id, "ERROR")
        await _publish(url, _spread(1, start=1))
        assert len(await _lines(process, 1)) == 1
        assert await asyncio.wait_for(process.wait(), 60) == 0
