"""A coordinator cut off from Redis by a network partition, for 10 s and for 45 s.

The test makes a network namespace joined to the host by a veth pair (:mod:`faults.netns`); the server
listens on 127.0.0.1 and on the host end of the pair. Coordinator A runs inside the namespace and reaches
the server only across that link; coordinator B runs on the host. A is stopped while it holds a batch,
the link is cut, and A is resumed: it finishes the batch and sends its commit into the cut link. While
the partition lasts, A's lease and membership expire and B takes A's shards, claims the batch A held and
applies it and everything published meanwhile. When the link comes back, A's commit reaches the server
late, with a lease token that is no longer the shard's: the commit script refuses it and A logs that
nothing was committed. A partition longer than the socket timeout (30 s) ends A's connection first
(TCP gives up on the unacknowledged commit then, ``TCP_USER_TIMEOUT``): A logs the timeout and gives the
shard up, and the commit, should it still reach the server, is refused all the same. A then rejoins; the checker must be clean.

Skipped, with the reason, where network namespaces cannot be made (not root, no iproute2).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from checker import applied_titles, numbered_findings, state_mismatches

from bus.embedded import RedisProcess
from faults.harness import Fleet, Recorder, freeze_holding, open_bus, wait_until
from faults.netns import NetNamespace

LEASE_MS = 1000

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.mark.parametrize(
    ("seconds", "logged"),
    [
        (10, "lease lost; nothing from the last batch was committed"),
        (45, "Redis unavailable (TimeoutError)"),
    ],
)
async def test_a_partitioned_coordinator_commits_nothing_stale(
    netns: NetNamespace, tmp_path: Path, fleet: Fleet, fault_report: Recorder, seconds: int, logged: str
) -> None:
    server = RedisProcess(tmp_path / "redis", config={"bind": f"127.0.0.1 {netns.host_ip}"})
    server.start()
    published = numbered_findings(agents=20, per_agent=150, groups=20)
    half = len(published) // 2
    try:
        async with open_bus(server.url) as bus:
            a = fleet.start(
                f"redis://{netns.host_ip}:{server.port}/0",
                name="coord-a",
                lease_ms=LEASE_MS,
                batch=10,
                prefix=netns.prefix,
                tick_s=1,
            )
            # Ticks on: A rejoins at the end, see test_consumer_churn for why that needs them.
            b = fleet.start(server.url, name="coord-b", lease_ms=LEASE_MS, tick_s=1)
            await a.started()
            await b.started()
            await a.wait_for_log(" acquired by coord-a", 30)  # A holds shards: it gets its share of the data
            await bus.publish(published[:half])
            _, held = await freeze_holding(bus, [a])
            held_titles = [t for stream, ids in held.items() for t in await bus.titles_of(stream, ids)]
            loop = asyncio.get_running_loop()
            netns.cut()
            cut_at = loop.time()
            a.thaw()  # it finishes its batch; the commit goes into the cut link

            async def taken_over() -> bool:
                return not await bus.held("coord-a")

            await wait_until(taken_over, seconds, "coordinator B to claim what A held")
            await bus.publish(published[half:])
            applied_during = await bus.applied()
            await asyncio.sleep(max(0.0, seconds - (loop.time() - cut_at)))  # the partition's duration
            netns.heal()
            await a.wait_for_log(logged, 120)

            async def done() -> bool:
                return await bus.applied() >= len(published) and await bus.quiet()

            await wait_until(done, 120, "everything applied")
            report = await bus.check(published)
            titles = await applied_titles(bus.client, bus.keys)
            fault_report(
                report,
                partition_s=seconds,
                held_by_partitioned=len(held_titles),
                applied_during_partition=applied_during,
                partitioned_alive=a.alive,
            )
            assert report.clean, report
            assert all(titles.count(title) == 1 for title in held_titles)
            assert await state_mismatches(bus.client, bus.keys) == {}
            assert a.alive, a.log_tail()
    finally:
        server.stop()
