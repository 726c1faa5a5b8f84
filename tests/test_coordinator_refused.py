"""A commit its checks refuse is retried without its entries counting as poison, and applies once fixed.

A key of another type in the namespace (or a coordinator user lacking a permission) makes every commit of
the shard refuse, whatever its entries: dead-lettering them once delivered ``max_deliveries`` times
would throw away a shard's whole traffic for a configuration mistake.
"""

from __future__ import annotations

import asyncio

import redis
import redis.exceptions
from adapter_kit import wait_until
from click.testing import CliRunner
from workers.kit import connected, entries

from bus.cli import main
from bus.envelope import decode, new_envelope
from bus.events import AgentStarted, Decision
from bus.keys import StreamKind, open_namespace
from bus.publisher import Publisher
from coordinator.policy import Policy
from coordinator.service import GROUP, Coordinator, CoordinatorOptions
from coordinator.store import group_key, load_state


async def test_a_refused_commit_dead_letters_nothing_and_commits_once_fixed(redis_url: str) -> None:
    async with connected(redis_url) as client:
        keys = await open_namespace(client, "refused", 1)
        signals, blocking = keys.stream(0, StreamKind.SIGNALS), group_key(keys, 0, "g")
        await client.set(blocking, "not a hash")
        started = new_envelope(AgentStarted(task="scan"), agent_id="a", group_id="g", source="test")
        await Publisher(client, keys).publish_many([started])
        options = CoordinatorOptions(name="c", max_deliveries=1, tick_interval_s=3600, block_ms=50)
        stop = asyncio.Event()
        running = asyncio.create_task(Coordinator(client, keys, Policy(), options).run(stop=stop))
        try:

            async def retried() -> bool:
                try:
                    rows = await client.xpending_range(signals, GROUP, "-", "+", 1)
                except redis.exceptions.ResponseError:  # NOGROUP: the coordinator has not started yet
                    return False
                return bool(rows) and int(rows[0]["times_delivered"]) > options.max_deliveries + 1

            await wait_until(retried, 30, "commits refused more often than max_deliveries")
            await client.delete(blocking)

            async def applied() -> bool:
                return await client.exists(blocking) == 1

            await wait_until(applied, 30, "the commit once the key is fixed")
        finally:
            stop.set()
            await asyncio.wait_for(running, 30)
        assert await client.xlen(keys.stream(0, StreamKind.DEAD)) == 0
        state = load_state("g", await client.hgetall(blocking), [], {})
        assert list(state.agents) == ["a"] and state.agents["a"].applied == 1
        events = [
            decode(f[b"data"]).payload for _, f in await entries(client, keys.stream(0, StreamKind.EVENTS))
        ]
        assert [e.detail for e in events if isinstance(e, Decision)] == ["registered on its first envelope"]


def test_a_damaged_commit_counter_is_a_one_line_error_not_a_traceback(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.set("{damaged}:meta", "1")
    client.set("{damaged:0}:version", "garbage")
    client.close()
    options = ["--redis-url", redis_url, "--namespace", "damaged"]
    result = CliRunner().invoke(main, ["coordinator", "--burst", *options])
    assert result.exit_code == 1, result.output
    assert "Error: {damaged:0}:version holds 'garbage', not a commit counter" in result.output
    assert isinstance(result.exception, SystemExit)
