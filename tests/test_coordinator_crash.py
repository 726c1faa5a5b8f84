"""Two real coordinator processes; one is killed (SIGKILL) or frozen (SIGSTOP) mid-run.

A checker compares the 10 000 published signals with what was applied: nothing lost, nothing applied
twice, every agent's signals applied in the order it emitted them.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from checker import applied_titles, check, numbered_findings

from bus.connection import Client, as_text, connect
from bus.keys import Keys, open_namespace
from bus.publisher import Publisher
from bus.settings import Settings

CLI = str(Path(sys.executable).parent / "subagent-bus")
LEASE_MS = 1000


def start_coordinator(url: str, name: str, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            CLI,
            "coordinator",
            "--redis-url",
            url,
            "--name",
            name,
            "--lease-ttl",
            str(LEASE_MS),
            "--tick",
            "3600",
        ],
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )


async def wait_until(condition: Callable[[], Awaitable[bool]], seconds: float, what: str) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not await condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {seconds}s waiting for {what}")
        await asyncio.sleep(0.05)


@asynccontextmanager
async def bus(url: str) -> AsyncIterator[tuple[Client, Keys]]:
    client = await connect(Settings.from_url(url))
    try:
        yield client, await open_namespace(client, "sbus", 8)
    finally:
        await client.aclose()


Fault = Callable[[subprocess.Popen[bytes], Client, Keys], Awaitable[None]]


async def run_with_fault(url: str, tmp_path: Path, fault: Fault) -> None:
    published = numbered_findings(agents=20, per_agent=500)
    a = start_coordinator(url, "coord-a", tmp_path / "a.log")
    b = start_coordinator(url, "coord-b", tmp_path / "b.log")
    try:
        async with bus(url) as (client, keys):
            publisher = Publisher(client, keys)

            async def applied() -> int:
                return len(await applied_titles(client, keys))

            half = len(published) // 2
            for i in range(0, half, 100):
                await publisher.publish_many(published[i : i + 100])
            await wait_until(lambda: _at_least(applied, half // 2), 60, "a quarter applied")
            await fault(a, client, keys)
            for i in range(half, len(published), 100):
                await publisher.publish_many(published[i : i + 100])
            await wait_until(lambda: _at_least(applied, len(published)), 120, "everything applied")
            report = await check(client, keys, published)
        assert report.clean, report
    finally:
        for process in (a, b):
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)
                process.terminate()
                process.wait(timeout=30)


async def _at_least(count: Callable[[], Awaitable[int]], n: int) -> bool:
    return await count() >= n


@pytest.mark.timeout(300)
async def test_coordinator_killed_mid_run_loses_and_repeats_nothing(redis_url: str, tmp_path: Path) -> None:
    async def kill(process: subprocess.Popen[bytes], client: Client, keys: Keys) -> None:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    await run_with_fault(redis_url, tmp_path, kill)


@pytest.mark.timeout(300)
async def test_coordinator_paused_past_its_lease_commits_nothing_stale(
    redis_url: str, tmp_path: Path
) -> None:
    async def pause(process: subprocess.Popen[bytes], client: Client, keys: Keys) -> None:
        process.send_signal(signal.SIGSTOP)

        async def taken_over() -> bool:
            # every lease of the frozen process has expired and the other holds every shard (a lease
            # token is its holder's name, ":", a random part)
            leases = [await client.get(keys.state(shard, "lease")) for shard in keys.all_shards()]
            return all(lease is not None and as_text(lease).startswith("coord-b:") for lease in leases)

        await wait_until(taken_over, 60, "the other coordinator to take every shard over")
        process.send_signal(signal.SIGCONT)

    await run_with_fault(redis_url, tmp_path, pause)
