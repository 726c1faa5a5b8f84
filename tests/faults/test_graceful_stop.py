"""SIGTERM in the middle of a batch: drain, commit, release, exit 0.

The coordinator that holds the batch is stopped between its read and its commit, sent SIGTERM and
resumed. It must finish the batch in hand and commit it (its log shows no lost lease, and it counts the
batch among the entries it applied), release its leases (the shard's lease no longer holds its token
when it has exited, long before the lease could have expired), leave nothing in its pending list, and
exit with status 0. The other coordinator then applies the rest; the checker must be clean.
"""

from __future__ import annotations

import re
import signal

import pytest
from checker import applied_titles, numbered_findings, state_mismatches

from bus.keys import StreamKind
from faults.harness import Fleet, Recorder, freeze_holding, open_bus, wait_until

LEASE_MS = 5000
"""Long enough that a lease that changed hands within a second of the exit was released, not expired."""


async def test_sigterm_mid_batch_drains_commits_and_releases(
    redis_url: str, fleet: Fleet, fault_report: Recorder
) -> None:
    published = numbered_findings(agents=20, per_agent=100, groups=1)
    async with open_bus(redis_url) as bus:
        shard = bus.keys.shard_of("group-0")
        stream = bus.stream(shard, StreamKind.SIGNALS)
        a = fleet.start(redis_url, name="coord-a", lease_ms=LEASE_MS)
        b = fleet.start(redis_url, name="coord-b", lease_ms=LEASE_MS)
        await a.started()
        await b.started()
        await bus.publish(published)
        victim, held = await freeze_holding(bus, [a, b], streams=[stream])
        survivor = b if victim is a else a
        assert list(held) == [stream]
        token = await bus.lease(shard)
        assert token is not None
        held_titles = await bus.titles_of(stream, held[stream])

        victim.send(signal.SIGTERM)
        victim.thaw()
        status = await victim.exited(20)
        lease_after = await bus.lease(shard)
        still_held = await bus.held(victim.name)
        titles_at_exit = set(await applied_titles(bus.client, bus.keys))

        log = victim.log_text()
        assert status == 0, victim.log_tail()
        assert still_held == {}
        assert lease_after != token
        assert "lease lost" not in log
        assert set(held_titles) <= titles_at_exit  # the batch in hand was committed before the exit
        stopped = re.search(r"stopped after applying (\d+) entr(?:y|ies)", log)
        assert stopped is not None and int(stopped.group(1)) >= len(held[stream])

        async def done() -> bool:
            return await bus.applied() >= len(published) and await bus.quiet()

        await wait_until(done, 90, "the survivor to apply the rest")
        report = await bus.check(published)
        consumers = await bus.consumers()
        fault_report(
            report, held=len(held[stream]), exit_status=status, consumer_names_left=sorted(consumers)
        )
        assert report.clean, report
        assert survivor.alive
        assert all(pending == 0 for pending in consumers.values())
        assert await state_mismatches(bus.client, bus.keys) == {}


pytestmark = pytest.mark.timeout(180)
