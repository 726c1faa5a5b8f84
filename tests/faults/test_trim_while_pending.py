"""Trimming the streams over and over while coordinators work through a backlog.

:func:`bus.retention.trim_namespace` runs in a loop, as aggressively as it can (everything every group has
acknowledged goes), while two coordinators apply a backlog; one of them is killed holding a batch, so for
a lease period its entries sit in a dead consumer's pending list while the trims go on. A trimmed pending
entry would come back to its next reader as deleted, and a trimmed undelivered one would simply be gone:
either way the checker would report it lost. It must report nothing lost, duplicated or out of order, no
dead letters, and at the end the signals streams must be empty (everything was acknowledged, so
everything could go). Run on a standalone server and on the 3-master cluster.
"""

from __future__ import annotations

import asyncio

import pytest
from checker import numbered_findings, state_mismatches

from bus.keys import StreamKind
from bus.retention import trim_namespace
from faults.harness import Bus, Fleet, Recorder, freeze_holding, open_bus, wait_until


class Trimmer:
    """Trims every shard's streams in a loop; counts the rounds that ran while entries were pending."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.removed = 0
        self.rounds = 0
        self.rounds_while_pending = 0

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            pending = await self.bus.group_pending()
            self.removed += await trim_namespace(
                self.bus.client, self.bus.keys, maxlen_signals=None, maxlen_events=None
            )
            self.rounds += 1
            self.rounds_while_pending += pending > 0
            await asyncio.sleep(0.005)  # pacing: leave the CPU to the coordinators between rounds


@pytest.mark.timeout(240)
async def test_trimming_while_a_backlog_is_applied_loses_nothing(
    bus_url: str, fleet: Fleet, fault_report: Recorder
) -> None:
    # the first half is the backlog a coordinator must be caught holding: big enough that two
    # coordinators do not drain it before the harness looks (they apply 20 000 to 30 000 entries a
    # second; 4 000 were drained unseen once)
    published = numbered_findings(agents=20, per_agent=1_000)
    half = len(published) // 2
    async with open_bus(bus_url) as bus:
        a = fleet.start(bus_url, name="coord-a", batch=50)
        b = fleet.start(bus_url, name="coord-b", batch=50)
        await a.started()
        await b.started()
        trimmer = Trimmer(bus)
        stop = asyncio.Event()
        trimming = asyncio.create_task(trimmer.run(stop))
        try:
            await bus.publish(published[:half])
            victim, held = await freeze_holding(bus, [a, b])
            victim.kill()
            await bus.publish(published[half:])

            async def done() -> bool:
                return await bus.applied() >= len(published) and await bus.quiet()

            await wait_until(done, 120, "everything applied")
        finally:
            stop.set()
            await trimming
        final = await trim_namespace(bus.client, bus.keys, maxlen_signals=None, maxlen_events=None)
        report = await bus.check(published)
        dead = await bus.stream_lengths(StreamKind.DEAD)
        left = await bus.stream_lengths(StreamKind.SIGNALS)
        fault_report(
            report,
            trim_rounds=trimmer.rounds,
            rounds_while_pending=trimmer.rounds_while_pending,
            removed=trimmer.removed + final,
            held_by_killed=sum(len(ids) for ids in held.values()),
            dead_letters=dead,
        )
        assert report.clean, report
        assert dead == 0
        assert trimmer.removed > 0 and trimmer.rounds_while_pending > 0
        assert left == 0
        assert await state_mismatches(bus.client, bus.keys) == {}
