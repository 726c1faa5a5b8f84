"""A shard whose state takes longer to load than a lease lasts is still taken over and applied.

A group with tens of thousands of merged findings takes seconds to load on a take-over. Without renewing
the lease meanwhile, the first commit after the load is refused (the lease ran out), the shard is taken
over again, loads again, and nothing is ever applied. The lease TTL here is a third of the load time
measured on this machine, so the load outlasts it whatever the machine's speed.
"""

from __future__ import annotations

import asyncio
import time

from workers.kit import connected

from bus.envelope import Envelope, new_envelope
from bus.findings import Finding
from bus.keys import open_namespace
from bus.publisher import Publisher
from coordinator.policy import Policy
from coordinator.service import Coordinator, CoordinatorOptions
from coordinator.view import load_shard

GROUP = "big"


def _finding(n: int) -> Envelope:
    finding = Finding(title=f"finding {n}", file=f"src/m{n // 1000}.py", line=n % 1000 + 1, agent="scanner")
    return new_envelope(finding, agent_id="scanner", group_id=GROUP, source="test")


async def test_a_state_that_outlasts_the_lease_to_load_is_taken_over(redis_url: str) -> None:
    async with connected(redis_url) as client:
        keys = await open_namespace(client, "bigstate", 2)
        publisher = Publisher(client, keys)
        findings = [_finding(n) for n in range(20_000)]
        for i in range(0, len(findings), 500):
            await publisher.publish_many(findings[i : i + 500])
        first = Coordinator(client, keys, Policy(), CoordinatorOptions(name="first"))
        assert await first.run(burst=True) == len(findings)

        shard = keys.shard_of(GROUP)
        started = time.perf_counter()
        assert len((await load_shard(client, keys, shard))[GROUP].findings) == len(findings)
        ttl_ms = max(50, int((time.perf_counter() - started) * 1000 / 3))

        await publisher.publish_many([_finding(len(findings))])
        second = Coordinator(client, keys, Policy(), CoordinatorOptions(name="second", lease_ttl_ms=ttl_ms))
        applied = await asyncio.wait_for(second.run(burst=True), 120)
        assert applied == 1, f"lease of {ttl_ms} ms"
        state = (await load_shard(client, keys, shard))[GROUP]
        assert len(state.findings) == len(findings) + 1
