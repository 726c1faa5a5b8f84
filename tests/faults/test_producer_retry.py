"""A producer's connection dropped after its XADD ran and before the reply came back, then a retry.

The producer publishes through :class:`faults.proxy.ReplyDroppingProxy`, which forwards one chosen
XADD, lets it run, and closes the producer's connection instead of relaying the entry id. The producer
sees a :class:`~bus.errors.ConnectionFailed` with the outcome unknown and does what any at-least-once
producer does: it publishes the same envelope (same id) again. The stream then holds the envelope
twice, under two entry ids. The coordinator must apply it once: its window of applied envelope ids
(kept in Redis with the group state) drops the second copy, whether the copy lands in the same batch
or after the first was committed by another coordinator process. The checker must report 0 duplicated
at the effect level (the findings stream), and the agent's applied count must be the number of distinct
envelopes.
"""

from __future__ import annotations

from typing import Any

import pytest
from checker import numbered_findings, state_mismatches

from bus.embedded import RedisProcess
from bus.envelope import decode
from bus.errors import ConnectionFailed
from bus.keys import StreamKind
from bus.publisher import Publisher
from coordinator.view import load_groups
from faults.harness import Fleet, Recorder, open_bus
from faults.proxy import ReplyDroppingProxy

LOST_REPLY_AT = 5


def _bulk_string(reply: bytes) -> str:
    """The value of a RESP bulk string reply (``$<n>\\r\\n<value>\\r\\n``)."""
    header, _, rest = reply.partition(b"\r\n")
    assert header.startswith(b"$"), reply
    return rest[: int(header[1:])].decode()


async def _burst(fleet: Fleet, url: str) -> None:
    coordinator = fleet.start(url, burst=True)
    assert await coordinator.exited(60) == 0, coordinator.log_tail()


@pytest.mark.parametrize("retry", ["at-once", "after-apply"])
async def test_a_retried_publish_is_applied_once(
    redis_server: RedisProcess, redis_url: str, fleet: Fleet, fault_report: Recorder, retry: str
) -> None:
    published = numbered_findings(agents=1, per_agent=10, groups=1)
    target = published[LOST_REPLY_AT]
    proxy = ReplyDroppingProxy("127.0.0.1", redis_server.port, target.id.encode())
    await proxy.start()
    try:
        async with open_bus(proxy.url) as producer, open_bus(redis_url) as bus:
            publisher = Publisher(producer.client, producer.keys)
            for envelope in published[:LOST_REPLY_AT]:
                await publisher.publish(envelope)
            with pytest.raises(ConnectionFailed):
                await publisher.publish(target)
            assert proxy.dropped_reply is not None
            first = _bulk_string(proxy.dropped_reply)
            if retry == "after-apply":
                await _burst(fleet, redis_url)  # the first copy is applied and committed
            second = await publisher.publish(target)  # the producer's retry: the same envelope
            for envelope in published[LOST_REPLY_AT + 1 :]:
                await publisher.publish(envelope)

            stream = bus.stream(bus.keys.shard_of(target.group_id), StreamKind.SIGNALS)
            rows: Any = await bus.client.xrange(stream)
            copies = [
                entry_id.decode() for entry_id, fields in rows if decode(fields[b"data"]).id == target.id
            ]
            assert copies == [first, second]

            await _burst(fleet, redis_url)
            report = await bus.check(published)
            (state,) = await load_groups(bus.client, bus.keys)
            fault_report(report, copies_in_stream=len(copies), retry=retry)
            assert report.clean, report
            assert report.duplicated == 0
            assert state.agents["agent-0"].applied == len(published)
            assert await state_mismatches(bus.client, bus.keys) == {}
            assert await bus.group_pending() == 0 and await bus.quiet()
    finally:
        await proxy.close()
