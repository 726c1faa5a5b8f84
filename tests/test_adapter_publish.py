"""An adapter's publishing when the server's reply to a batch in flight is lost (real server, a proxy)."""

from __future__ import annotations

from typing import Any

from faults.proxy import ReplyDroppingProxy
from workers.kit import connected

from agents.adapter import AgentBus
from bus.embedded import RedisProcess
from bus.envelope import Envelope, decode, deterministic_id
from bus.keys import Keys
from bus.signals import Progress

KEYS = Keys("pubtest", 8)


def _progress(bus: AgentBus, offset: int, message: str) -> Envelope:
    payload = Progress(agent_id=bus.agent_id, percent=offset % 100, message=message)
    return bus.envelope(payload, source="out", id=deterministic_id(bus.agent_id, "out", offset))


async def test_a_batch_whose_reply_is_lost_is_sent_again_before_the_next(
    redis_server: RedisProcess, redis_url: str
) -> None:
    proxy = ReplyDroppingProxy("127.0.0.1", redis_server.port, b"the marked one")
    await proxy.start()
    logged: list[str] = []
    try:
        async with connected(proxy.url) as client, connected(redis_url) as direct:
            bus = AgentBus(client, KEYS, "agent-1", "group-1", log=logged.append)
            await direct.delete(bus.signals)
            first = [_progress(bus, 0, "first"), _progress(bus, 1, "the marked one")]
            second = [_progress(bus, 2, "second")]
            await bus.publish(first, wait=False)  # written; its reply is what the proxy keeps
            await bus.publish(second, wait=False)  # finds the first batch's outcome unknown: sends it again
            await bus.flush()
            rows: Any = await direct.xrange(bus.signals)
            published = [decode(fields[b"data"]).id for _, fields in rows]
    finally:
        await proxy.close()
    assert proxy.dropped_reply is not None
    once = [envelope.id for envelope in first]
    assert published == [*once, *once, second[0].id]  # nothing lost; the copies carry the same ids
    assert any("retrying" in line for line in logged)
