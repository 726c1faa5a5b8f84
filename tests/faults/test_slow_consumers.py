"""Consumers slower than the time after which their entries are taken from them.

The coordinator: a process stopped while it holds a batch, until its leases have expired and the other
coordinator has claimed that batch, then resumed. It finishes the batch and tries to commit; the commit
script refuses it (the lease holds another token), the process logs that nothing was committed, and the
checker is clean: the lease plus the commit check prevent double processing outright.

The bus-level :class:`~bus.consumer.Consumer` (adapters, launchers) is at least once, not exactly once.
With two consumers of one group, a handler that runs longer than ``reclaim_idle_ms`` loses its entries to
the other consumer, which claims them (``XAUTOCLAIM``) and runs its handler on them too: **the handler
may run twice, even at the same time, so its effects must be idempotent** (keyed by the envelope id, as
the coordinator's window is). What the group guarantees is that nothing is lost and that each entry
leaves the pending list exactly once: the first acknowledgement removes it, the late one finds it gone
(``XACK`` returns 0 for it).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from checker import applied_titles, numbered_findings, state_mismatches
from workers.kit import connected, progresses

from bus.connection import Client
from bus.consumer import Ack, Consumer, Delivery
from bus.keys import Keys, StreamKind
from bus.publisher import Publisher
from faults.harness import Fleet, Recorder, freeze_holding, open_bus, wait_until

LEASE_MS = 1000
RECLAIM_MS = 200
KEYS = Keys("slow", 8)
STREAM = KEYS.stream(KEYS.shard_of("group-1"), StreamKind.SIGNALS)


@pytest.mark.timeout(180)
async def test_a_coordinator_stalled_past_its_lease_commits_nothing(
    redis_url: str, fleet: Fleet, fault_report: Recorder
) -> None:
    # A backlog that takes two coordinators a moment to apply: the harness, polling for one that holds a
    # batch, must see one before it drains, also on a machine busy with other work (2 000 were once too few).
    published = numbered_findings(agents=20, per_agent=500)
    async with open_bus(redis_url) as bus:
        # Ticks on: the stalled process rejoins at the end, see test_consumer_churn for why that needs them.
        a = fleet.start(redis_url, name="coord-a", lease_ms=LEASE_MS, tick_s=1)
        b = fleet.start(redis_url, name="coord-b", lease_ms=LEASE_MS, tick_s=1)
        await a.started()
        await b.started()
        await bus.publish(published)
        victim, held = await freeze_holding(bus, [a, b])
        held_titles = [t for stream, ids in held.items() for t in await bus.titles_of(stream, ids)]

        async def taken_over() -> bool:
            return victim.name not in await bus.lease_holders() and not await bus.held(victim.name)

        await wait_until(taken_over, 60, "the other coordinator to claim the stalled batch")
        victim.thaw()
        await victim.wait_for_log("lease lost; nothing from the last batch was committed", 30)

        async def done() -> bool:
            return await bus.applied() >= len(published) and await bus.quiet()

        await wait_until(done, 90, "everything applied")
        report = await bus.check(published)
        titles = Counter(await applied_titles(bus.client, bus.keys))
        fault_report(report, stalled=victim.name, held=sum(len(ids) for ids in held.values()))
        assert report.clean, report
        assert held_titles and all(titles[title] == 1 for title in held_titles)
        assert await state_mismatches(bus.client, bus.keys) == {}


def _count_acks(client: Client, acked: list[int]) -> None:
    """Record how many entries each XACK of ``client`` really removed from the pending list."""
    xack = client.xack

    async def recording(*args: Any) -> Any:
        removed = await xack(*args)
        acked.append(int(removed))
        return removed

    client.xack = recording  # type: ignore[method-assign,assignment]


async def test_a_handler_slower_than_the_reclaim_time_runs_twice_and_the_entry_is_settled_once(
    bus_url: str, fault_report: Recorder
) -> None:
    published = progresses(60)
    async with connected(bus_url) as client_a, connected(bus_url) as client_b:
        await Publisher(client_a, KEYS).publish_many(published)
        acked: list[int] = []
        _count_acks(client_a, acked)
        _count_acks(client_b, acked)
        slow = Consumer(
            client_a, STREAM, "workers", "slow", batch=10, reclaim_idle_ms=RECLAIM_MS, block_ms=50
        )
        fast = Consumer(
            client_b, STREAM, "workers", "fast", batch=10, reclaim_idle_ms=RECLAIM_MS, block_ms=50
        )
        await slow.ensure_group()
        runs: list[tuple[str, str, int]] = []
        slow_first: list[str] = []
        reclaimed = asyncio.Event()
        started = asyncio.Event()

        async def slow_handler(delivery: Delivery) -> Ack:
            runs.append(("slow", delivery.entry_id, delivery.deliveries))
            if not slow_first:
                slow_first.append(delivery.entry_id)
                started.set()
                await asyncio.wait_for(reclaimed.wait(), 30)  # slower than the reclaim time, on purpose
            return Ack.ACK

        async def fast_handler(delivery: Delivery) -> Ack:
            runs.append(("fast", delivery.entry_id, delivery.deliveries))
            if slow_first and delivery.entry_id == slow_first[0]:
                reclaimed.set()
            return Ack.ACK

        slow_run = asyncio.create_task(slow.run(slow_handler, burst=True))
        await asyncio.wait_for(started.wait(), 30)
        await asyncio.wait_for(asyncio.gather(slow_run, fast.run(fast_handler, burst=True)), 60)

        per_entry = Counter(entry_id for _, entry_id, _ in runs)
        twice = sorted(entry_id for entry_id, n in per_entry.items() if n == 2)
        ids = await _entry_ids(client_a)
        fault_report(handled=len(per_entry), ran_twice=len(twice), removed_by_xack=sum(acked))
        assert set(per_entry) == set(ids)  # nothing lost
        assert max(per_entry.values()) <= 2
        assert slow_first[0] in twice
        assert {(who, deliveries) for who, entry_id, deliveries in runs if entry_id == slow_first[0]} == {
            ("slow", 1),
            ("fast", 2),
        }
        assert sum(acked) == len(ids)  # each entry left the pending list exactly once
        assert await slow.pending_count() == 0
        assert await client_a.xlen(slow.dead_stream) == 0


async def _entry_ids(client: Client) -> list[str]:
    rows: Any = await client.xrange(STREAM)
    return [entry_id.decode() for entry_id, _ in rows]
