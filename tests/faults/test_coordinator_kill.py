"""A coordinator process killed with SIGKILL on either side of its commit.

Before the commit: the process is stopped at the instant it holds a batch it read and has not
committed (:func:`faults.harness.freeze_holding`), then killed. The batch stays in its pending list; the
other coordinator takes the shard once the lease expires, claims the batch and applies it first. Run on
a standalone server and on the 3-master cluster.

After the commit: the process is stopped when the findings stream has just grown while the backlog is
not finished, and killed: its commit went through, and it holds the next batch, which it reads in the
same write as the commit (so no instant lies between the two). A successor must start exactly after
that commit: nothing that was committed may be applied again, nothing after it skipped.

The slow variant repeats the first fault on a larger backlog: five times over, whichever coordinator holds
a batch is killed and replaced by a new process.

Either way the checker must report 0 lost, 0 duplicated, 0 out of order, 0 unexpected, and the group
states must agree with the findings stream.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest
from checker import applied_titles, numbered_findings, state_mismatches

from bus.keys import StreamKind
from faults.harness import Bus, CoordinatorProcess, Fleet, Recorder, freeze_holding, open_bus, wait_until


async def _finished(bus: Bus, published: int, seconds: float) -> None:
    async def done() -> bool:
        return await bus.applied() >= published and await bus.quiet()

    await wait_until(done, seconds, f"all {published} findings applied")


async def test_killed_between_read_and_commit(bus_url: str, fleet: Fleet, fault_report: Recorder) -> None:
    published = numbered_findings(agents=20, per_agent=100)
    async with open_bus(bus_url) as bus:
        a = fleet.start(bus_url, name="coord-a")
        b = fleet.start(bus_url, name="coord-b")
        await a.started()
        await b.started()
        await bus.publish(published)
        victim, held = await freeze_holding(bus, [a, b])
        held_titles = [t for stream, ids in held.items() for t in await bus.titles_of(stream, ids)]
        victim.kill()
        await _finished(bus, len(published), 90)
        report = await bus.check(published)
        titles = Counter(await applied_titles(bus.client, bus.keys))
        mismatches = await state_mismatches(bus.client, bus.keys)
        fault_report(report, victim=victim.name, held=sum(len(ids) for ids in held.values()))
        assert report.clean, report
        assert held_titles and all(titles[title] == 1 for title in held_titles)
        assert await bus.held(victim.name) == {}
        assert mismatches == {}


@pytest.mark.slow
async def test_killed_between_read_and_commit_again_and_again(
    bus_url: str, fleet: Fleet, fault_report: Recorder
) -> None:
    published = numbered_findings(agents=20, per_agent=500)
    async with open_bus(bus_url) as bus:
        # Ticks on: new processes join while the backlog is applied, see test_consumer_churn for why.
        # A new process claims the batch its killed predecessor held, and may be the next one frozen
        # holding it: one batch can be read by all five victims and then once more, one read more than
        # the default limit allows before an entry counts as poison and is dead-lettered.
        def start(name: str) -> CoordinatorProcess:
            return fleet.start(bus_url, name=name, tick_s=1, max_deliveries=10)

        running = [start("coord-0"), start("coord-1")]
        for process in running:
            await process.started()
        held_titles: list[str] = []
        chunk = len(published) // 5
        for n in range(2, 7):
            await bus.publish(published[(n - 2) * chunk : (n - 1) * chunk])
            victim, held = await freeze_holding(bus, running)
            held_titles += [t for stream, ids in held.items() for t in await bus.titles_of(stream, ids)]
            victim.kill()
            running.remove(victim)
            running.append(start(f"coord-{n}"))
            await running[-1].started()
        await _finished(bus, len(published), 180)
        report = await bus.check(published)
        titles = Counter(await applied_titles(bus.client, bus.keys))
        fault_report(report, kills=5, held=len(held_titles))
        assert report.clean, report
        assert all(titles[title] == 1 for title in held_titles)
        assert await state_mismatches(bus.client, bus.keys) == {}


async def _kill_after_commit(bus: Bus, victim: CoordinatorProcess, total: int) -> tuple[int, int, int]:
    """Kill ``victim`` right after a commit; returns (findings committed by then, entries it held, tries)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 60
    last = await bus.applied()
    tries = 0
    while loop.time() < deadline:
        now = await bus.applied()
        if now == last:
            await asyncio.sleep(0.0005)
            continue
        tries += 1
        await victim.freeze()
        await bus.held(victim.name)  # a round trip: whatever the process had sent has now run
        held = await bus.held(victim.name)
        applied = await bus.applied()
        if 0 < applied < total:
            victim.kill()
            return applied, sum(len(ids) for ids in held.values()), tries
        last = applied
        victim.thaw()
    raise AssertionError("the coordinator was never caught right after a commit")


async def test_killed_right_after_a_commit(redis_url: str, fleet: Fleet, fault_report: Recorder) -> None:
    published = numbered_findings(agents=20, per_agent=100, groups=1)
    async with open_bus(redis_url) as bus:
        victim = fleet.start(redis_url, name="coord-a", batch=5)
        await victim.started()
        await bus.publish(published)
        committed, held, tries = await _kill_after_commit(bus, victim, len(published))
        before = await applied_titles(bus.client, bus.keys)
        assert len(before) == committed
        successor = fleet.start(redis_url, name="coord-b")
        await successor.started()
        await _finished(bus, len(published), 90)
        report = await bus.check(published)
        after = await applied_titles(bus.client, bus.keys)
        mismatches = await state_mismatches(bus.client, bus.keys)
        fault_report(report, committed_at_kill=committed, held=held, tries=tries)
        assert report.clean, report
        assert after[: len(before)] == before  # the successor went on from there, repeating nothing
        assert mismatches == {}
        shard = bus.keys.shard_of("group-0")
        assert await bus.client.xlen(bus.stream(shard, StreamKind.DEAD)) == 0


pytestmark = pytest.mark.timeout(240)
