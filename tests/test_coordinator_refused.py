"""A commit its checks refuse is retried without its entries counting as poison, and applies once fixed.

A key of another type in the namespace (or a coordinator user lacking a permission) makes every commit of
the shard refuse, whatever its entries: dead-lettering them once delivered ``max_deliveries`` times
would throw away a shard's whole traffic for a configuration mistake.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
import redis
import redis.exceptions
from adapter_kit import wait_until
from click.testing import CliRunner, Result
from workers.kit import connected, entries

from bus.cli import main
from bus.envelope import decode, new_envelope
from bus.events import AgentStarted, Decision
from bus.findings import Finding
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


# a counter INCR does not write: "07" never equals the "7" the commit script compares it with (every
# commit stale, reloaded at once, for ever), and INCR fails past 2^63 - 1, after the batch's writes
@pytest.mark.parametrize("counter", ["garbage", "07", "9223372036854775807"])
def test_a_damaged_commit_counter_is_a_one_line_error_not_a_traceback(redis_url: str, counter: str) -> None:
    client = redis.Redis.from_url(redis_url)
    client.set("{damaged}:meta", "1")
    client.set("{damaged:0}:version", counter)
    client.close()
    result = _coordinate(redis_url)
    assert f"Error: {{damaged:0}}:version holds {counter!r}, not a commit counter" in result.output


# names of stored keys that are not UTF-8 (written by hand, or damaged)
@pytest.mark.parametrize(
    ("key", "field"),
    [("{damaged:0}:groups", None), ("{damaged:0}:retired", b"\xff"), ("{damaged:0}:merged:g", b"\xffkey")],
)
def test_a_stored_name_that_is_not_utf8_is_a_one_line_error_not_a_traceback(
    redis_url: str, key: str, field: bytes | None
) -> None:
    asyncio.run(_a_group_with_a_finding(redis_url))
    client = redis.Redis.from_url(redis_url)
    if field is None:
        client.sadd(key, b"\xff")
    else:
        client.hset(key, field, b"{}")
    client.close()
    result = _coordinate(redis_url)
    assert f"Error: {key} holds b'\\xff" in result.output and "not UTF-8 text" in result.output


async def _a_group_with_a_finding(url: str) -> None:
    async with connected(url) as client:
        keys = await open_namespace(client, "damaged", 1)
        finding = Finding(title="t", file="a.py", line=1)
        await Publisher(client, keys).publish(
            new_envelope(finding, agent_id="a", group_id="g", source="test")
        )
        assert await Coordinator(client, keys, Policy(), CoordinatorOptions(name="c")).run(burst=True) == 1


def _coordinate(url: str) -> Result:
    """``coordinator --burst`` on the namespace ``damaged``: refused, with one line and exit status 1."""
    result = CliRunner().invoke(
        main, ["coordinator", "--burst", "--redis-url", url, "--namespace", "damaged"]
    )
    assert result.exit_code == 1, result.output
    assert isinstance(result.exception, SystemExit)
    return result


async def test_an_entry_of_the_last_possible_id_is_said_once_and_the_shard_goes_on(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Any adapter may add it: no tick could be added after it, and the shard was given up and taken
    again at every tick, a warning each time, for good."""
    async with connected(redis_url) as client:
        keys = await open_namespace(client, "last", 1)
        signals = keys.stream(0, StreamKind.SIGNALS)
        finding = Finding(title="t", file="a.py", line=1, agent="scanner")
        await Publisher(client, keys).publish(new_envelope(finding, agent_id="scanner", group_id="g"))
        await client.xadd(signals, {"data": b"x"}, id="18446744073709551615-18446744073709551615")
        stop = asyncio.Event()
        options = CoordinatorOptions(name="last", tick_interval_s=0.05, lease_ttl_ms=1000)
        with caplog.at_level(logging.WARNING, logger="subagent_bus.coordinator"):
            running = asyncio.create_task(Coordinator(client, keys, Policy(), options).run(stop=stop))
            try:

                async def said() -> bool:
                    return "holds the last possible entry id" in caplog.text

                await wait_until(said, 20, "the coordinator to say the stream is full")

                async def applied() -> bool:
                    return bool(await client.xlen(keys.stream(0, StreamKind.FINDINGS)))

                await wait_until(applied, 20, "the finding to be applied")
            finally:
                stop.set()
                await running
        assert caplog.text.count("holds the last possible entry id") == 1
        assert "retrying every second" not in caplog.text and "lease lost" not in caplog.text
