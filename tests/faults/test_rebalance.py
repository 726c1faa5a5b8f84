"""A coordinator that gives shards to a newcomer says so once, and warns of no lost lease.

Its shard loops may be reading (blocked) when the membership loop gives their shard back; the lease
renewal that follows fails, which for a shard taken away means a lost batch, but for one given back is
expected. A SIGTERM makes every loop finish its step: by the exit, each released shard has been through it.
"""

from __future__ import annotations

import signal

from faults.harness import Fleet, open_bus, wait_until


async def test_shards_given_to_a_newcomer_are_not_reported_lost(redis_url: str, fleet: Fleet) -> None:
    async with open_bus(redis_url) as bus:
        first = fleet.start(redis_url, name="coord-first", lease_ms=2000)
        await first.started()
        second = fleet.start(redis_url, name="coord-second", lease_ms=2000)
        await second.started()
        half = bus.keys.shards // 2

        async def split() -> bool:
            released = first.log_text().count("released to balance the load")
            return released == half and (await bus.lease_holders()).count(second.name) == half

        await wait_until(split, 30, "the shards to be split between the two")
        first.send(signal.SIGTERM)
        assert await first.exited(30) == 0, first.log_tail()
        assert "lease lost" not in first.log_text(), first.log_tail()
