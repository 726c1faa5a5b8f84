"""A server that loses committed writes (a restart with ``appendfsync everysec``) under a running coordinator.

The coordinator keeps its shards' states in memory and writes only what each batch changes. When the
server comes back without its last writes, changes computed against that memory would mix with the older
stored state; the shard's version counter makes the next commit fail instead, and the coordinator
reloads. The loss is simulated exactly, on a real server: the state keys of a shard are put back (DUMP /
RESTORE) to what they were one commit earlier.
"""

from __future__ import annotations

import asyncio
from typing import Any

from checker import numbered_findings
from workers.kit import connected

from bus.envelope import Envelope
from bus.keys import Keys, open_namespace
from bus.publisher import Publisher
from coordinator.policy import Policy
from coordinator.service import Coordinator, CoordinatorOptions
from coordinator.store import group_key, seen_key
from coordinator.view import load_shard

GROUP = "group-0"


async def _applied(coordinator: Coordinator, count: int) -> None:
    deadline = asyncio.get_running_loop().time() + 30
    while coordinator.applied < count:
        assert asyncio.get_running_loop().time() < deadline, f"{coordinator.applied} of {count} applied"
        await asyncio.sleep(0.02)


async def _dump(client: Any, names: list[str]) -> dict[str, bytes | None]:
    return {name: await client.dump(name) for name in names}


async def _restore(client: Any, saved: dict[str, bytes | None]) -> None:
    for name, value in saved.items():
        await client.delete(name)
        if value is not None:
            await client.restore(name, 0, value)


def _views(states: dict[str, Any]) -> dict[str, Any]:
    return {
        gid: (state.model_dump(mode="json", exclude={"window"}), list(state.window.chunks))
        for gid, state in states.items()
    }


async def test_a_coordinator_reloads_when_the_server_lost_its_last_commit(redis_url: str) -> None:
    envelopes = [e for e in numbered_findings(agents=3, per_agent=30, groups=1) if e.group_id == GROUP]
    first, lost, last = envelopes[:30], envelopes[30:60], envelopes[60:]
    async with connected(redis_url) as client:
        keys: Keys = await open_namespace(client, "stale", 4)
        shard = keys.shard_of(GROUP)
        state_keys = [
            group_key(keys, shard, GROUP),
            seen_key(keys, shard, GROUP),
            keys.state(shard, "version"),
        ]
        publisher = Publisher(client, keys)
        coordinator = Coordinator(
            client, keys, Policy(), CoordinatorOptions(name="c", batch=1000, block_ms=50)
        )
        stop = asyncio.Event()
        running = asyncio.create_task(coordinator.run(stop=stop))
        try:
            await _publish(publisher, first)
            await _applied(coordinator, len(first))
            before_loss = await _dump(client, state_keys)
            await _publish(publisher, lost)
            await _applied(coordinator, len(first) + len(lost))
            await _restore(client, before_loss)  # the server "restarted" without the last commit's state

            await _publish(publisher, last)
            await _applied(coordinator, len(envelopes))
            stored = await load_shard(client, keys, shard)
            in_memory = next(s for s in coordinator._shards if s.index == shard).groups
            assert _views(in_memory) == _views(stored)
            reports = [f for slot in stored[GROUP].findings.values() for f in slot.reports.values()]
            assert reports
            assert not {f.title for f in reports} & {e.payload.title for e in lost}  # type: ignore[union-attr]
        finally:
            stop.set()
            await running


async def _publish(publisher: Publisher, envelopes: list[Envelope]) -> None:
    await publisher.publish_many(envelopes)
