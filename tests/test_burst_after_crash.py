"""`coordinator --burst` started right after a coordinator was killed applies everything pending.

The killed process's leases last until their TTL runs out; a burst run that gave up on a held lease at
once applied nothing and exited 0 with the backlog still there. It waits for a lease that is running out,
and leaves a shard to a live process that keeps renewing its lease.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import redis.exceptions
from checker import numbered_findings
from workers.kit import connected

from bus.keys import Keys, StreamKind, open_namespace
from bus.publisher import Publisher
from coordinator.service import GROUP

CLI = str(Path(sys.executable).parent / "subagent-bus")
NS = "burst"


def _coordinator(url: str, *args: str) -> list[str]:
    return [CLI, "coordinator", "--redis-url", url, "--namespace", NS, "--lease-ttl", "3000", *args]


def _start(command: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, stderr=subprocess.DEVNULL, start_new_session=True)


async def _behind(client: Any, keys: Keys) -> int:
    """Entries of the signals streams the coordinators' group has not acknowledged (pending or unread)."""
    left = 0
    for shard in keys.all_shards():
        stream = keys.stream(shard, StreamKind.SIGNALS)
        try:
            groups = await client.xinfo_groups(stream)
        except redis.exceptions.ResponseError:  # no such key: no entry and no group on this shard yet
            continue
        (group,) = [g for g in groups if g["name"] in (GROUP, GROUP.encode())]
        left += int(group["pending"]) + int(group["lag"] or 0)
    return left


async def test_a_burst_run_right_after_a_crash_applies_the_whole_backlog(redis_url: str) -> None:
    envelopes = numbered_findings(agents=4, per_agent=3000, groups=4)
    async with connected(redis_url) as client:
        keys = await open_namespace(client, NS, 2)
        for i in range(0, len(envelopes), 2000):
            await Publisher(client, keys).publish_many(envelopes[i : i + 2000])
        running = _start(_coordinator(redis_url))
        try:
            deadline = asyncio.get_running_loop().time() + 60
            while (await _behind_or_none(client, keys) or len(envelopes)) >= len(envelopes):  # ticks too
                assert asyncio.get_running_loop().time() < deadline, "the coordinator applied nothing"
                await asyncio.sleep(0.05)
        finally:
            os.killpg(running.pid, signal.SIGKILL)
            running.wait()
        assert await _behind(client, keys) > 0  # killed in the middle, its leases held

        burst = await asyncio.to_thread(
            subprocess.run, _coordinator(redis_url, "--burst"), capture_output=True, text=True, timeout=120
        )
        assert burst.returncode == 0, burst.stderr
        assert await _behind(client, keys) == 0, burst.stderr


async def _behind_or_none(client: Any, keys: Keys) -> int | None:
    try:
        return await _behind(client, keys)
    except ValueError:  # the coordinator has not made its group yet
        return None
