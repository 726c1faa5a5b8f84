"""Coordinator churn: processes replaced over and over, each under a new random consumer name.

Two coordinators work through a backlog; again and again one of them is replaced by a fresh process
started without ``--name`` (so with a new random consumer name, as after a redeploy): every other time it
is killed with SIGKILL wherever it is, otherwise stopped with SIGTERM (exit status 0). Once the backlog is
applied and the last processes have stopped, nothing may be stranded: no entry pending in any consumer's
list on any shard, and the checker clean. The processes run with ticks on (every second), as deployed.

The names of the dead consumers stay in the group for the hour after which a take-over prunes them
(``XINFO CONSUMERS`` lists them, each with nothing pending): the scenario reports how many there are.

Ticks matter here because of a gap this scenario found. When a process joins, another one hands it shards
(``_shed``) while its own loop for such a shard may still be blocked in ``XREADGROUP``. The newcomer takes
the lease and claims what is pending, then publishes its TICK; the blocked read of the previous owner
receives it, and that owner's commit is refused (lease lost). The entry now sits in the previous owner's
pending list, and the new owner claims other consumers' entries only when it acquires a shard or when a
commit of its own is refused for order, that is when the next entry of that shard arrives. With ticks on,
that is the next tick; without traffic and without ticks it stays stranded. The last test pins this down
deterministically, with a consumer that reads the shard after the owner's claim, as a deposed owner's late
read does.
"""

from __future__ import annotations

import signal
from functools import partial
from typing import Any

import pytest
from checker import numbered_findings, state_mismatches

from bus.keys import StreamKind
from coordinator.service import GROUP
from faults.harness import CoordinatorProcess, Fleet, Recorder, open_bus, wait_until


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "replacements",
    [pytest.param(4, id="4-replacements"), pytest.param(16, id="16-replacements", marks=pytest.mark.slow)],
)
async def test_replaced_coordinators_strand_nothing(
    redis_url: str, fleet: Fleet, fault_report: Recorder, replacements: int
) -> None:
    published = numbered_findings(agents=20, per_agent=20 * (replacements + 2))
    step = len(published) // (replacements + 2)
    names: list[str] = []
    async with open_bus(redis_url) as bus:
        running: list[CoordinatorProcess] = []
        for _ in range(2):
            running.append(fleet.start(redis_url, tick_s=1))
            names.append(await running[-1].started())
        await bus.publish(published)
        killed = stopped = 0
        for n in range(replacements):
            target = (n + 1) * step
            await wait_until(partial(bus.applied_at_least, target), 60, f"{target} applied")
            old = running.pop(0)
            if n % 2 == 0:
                old.kill()
                killed += 1
            else:
                old.send(signal.SIGTERM)
                assert await old.exited(30) == 0, old.log_tail()
                stopped += 1
            running.append(fleet.start(redis_url, tick_s=1))
            names.append(await running[-1].started())

        async def done() -> bool:
            return await bus.applied() >= len(published) and await bus.quiet()

        await wait_until(done, 120, "everything applied")
        for process in running:
            process.send(signal.SIGTERM)
            assert await process.exited(30) == 0, process.log_tail()
        pending = await bus.group_pending()
        consumers = await bus.consumers()
        report = await bus.check(published)
        fault_report(
            report,
            processes=len(names),
            killed=killed,
            stopped=stopped,
            group_pending=pending,
            consumer_names_left=len(consumers),
        )
        assert report.clean, report
        assert pending == 0, consumers
        assert set(consumers) <= set(names) and all(count == 0 for count in consumers.values())
        assert len(set(names)) == len(names)
        assert await state_mismatches(bus.client, bus.keys) == {}


async def _blocked_clients(bus: Any) -> int:
    """Clients of the server blocked in a command (``b`` in their flags), e.g. XREADGROUP ... BLOCK."""
    clients: list[dict[str, Any]] = await bus.client.client_list()
    return sum("b" in str(client.get("flags", "")) for client in clients)


@pytest.mark.timeout(120)
async def test_an_entry_read_by_a_deposed_owner_after_the_claim_is_applied(
    redis_url: str, fleet: Fleet, fault_report: Recorder
) -> None:
    published = numbered_findings(agents=1, per_agent=1, groups=1)
    owner = fleet.start(redis_url, name="coord-owner", lease_ms=2000)
    await owner.started()

    async with open_bus(redis_url) as bus:

        async def leased_all() -> bool:
            # and applied its first TICK on each: a late read below must find the one entry published
            return owner.log_text().count(" acquired by ") >= 8 and await bus.quiet()

        await wait_until(leased_all, 30, "the owner to lease every shard and apply its first ticks")
        stream = bus.stream(bus.keys.shard_of("group-0"), StreamKind.SIGNALS)
        await owner.freeze()  # its blocked reads run out within a block period; it cannot issue new ones

        async def nobody_blocked() -> bool:
            return await _blocked_clients(bus) == 0

        await wait_until(nobody_blocked, 10, "the owner's blocked reads to time out")
        await bus.publish(published)
        late: Any = await bus.client.xreadgroup(GROUP, "coord-deposed", {stream: ">"}, count=10)
        owner.thaw()
        assert late and len(late[0][1]) == 1  # the deposed owner's late read got the entry

        async def applied() -> bool:
            return await bus.applied() >= 1

        await wait_until(applied, 6, "the owner to claim and apply the entry (three lease periods)")
        report = await bus.check(published)
        fault_report(report)
        assert report.clean, report
