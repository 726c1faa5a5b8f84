"""A shard given back to balance the load is given back by its own loop, between two steps.

Given back from the membership task while its loop was taking it over, the take-over's lease renewal took
the lease again, and the loop went on to commit a batch against the emptied states: every group looked
new, and its stored state was overwritten (an agent's name and counts gone).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from workers.kit import connected, progresses

from bus.envelope import new_envelope
from bus.events import AgentStarted
from bus.keys import open_namespace
from bus.publisher import Publisher
from coordinator import service
from coordinator.lease import lease_key
from coordinator.policy import Policy
from coordinator.service import Coordinator, CoordinatorOptions
from coordinator.view import load_groups

GROUP = "group-1"


async def test_a_shard_shed_during_its_take_over_keeps_its_state(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with connected(redis_url) as client:
        keys = await open_namespace(client, "shed", 1)
        publisher = Publisher(client, keys)
        started = new_envelope(
            AgentStarted(name="auditor", task="audit it"), agent_id="agent-1", group_id=GROUP
        )
        await publisher.publish_many([started, *progresses(5)])
        first = Coordinator(client, keys, Policy(), CoordinatorOptions(name="first", lease_ttl_ms=1000))
        assert await first.run(burst=True) == 6
        [before] = await load_groups(client, keys)
        await publisher.publish_many(progresses(3, start=5))

        loading, go_on = asyncio.Event(), asyncio.Event()
        real_load = service.load_shard  # type: ignore[attr-defined]

        async def held_load(*args: Any, **kwargs: Any) -> Any:  # the take-over's load, until the shed
            loading.set()
            await go_on.wait()
            return await real_load(*args, **kwargs)

        monkeypatch.setattr(service, "load_shard", held_load)
        coordinator = Coordinator(client, keys, Policy(), CoordinatorOptions(name="c1", lease_ttl_ms=1000))
        shard, stop = coordinator._shards[0], asyncio.Event()
        following = asyncio.create_task(coordinator._follow(shard, stop))
        try:
            await asyncio.wait_for(loading.wait(), 30)
            coordinator._share = 0  # another process joined: this one's fair share went down
            coordinator._shed()
            assert (
                shard.shed and shard.owned
            )  # asked of its loop; not given back in the middle of its take-over
            go_on.set()
            deadline = asyncio.get_running_loop().time() + 30
            while shard.owned:  # given back by its loop, once the step after the take-over is done
                assert asyncio.get_running_loop().time() < deadline, "the shard was not given back"
                await asyncio.sleep(0.01)
            assert await client.get(lease_key(keys, 0)) is None
        finally:
            stop.set()
            await asyncio.wait_for(following, 30)
            await shard.pipe.close()
        second = Coordinator(client, keys, Policy(), CoordinatorOptions(name="second", lease_ttl_ms=1000))
        await second.run(burst=True)
        [group] = await load_groups(client, keys)
        agent, earlier = group.agents["agent-1"], before.agents["agent-1"]
        assert (agent.applied, agent.name, agent.task) == (9, "auditor", "audit it")
        assert agent.registered_at == earlier.registered_at
        assert group.applied >= 9  # and the ticks the coordinators applied
