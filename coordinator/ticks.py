"""The shards' clock: a TICK entry on each shard's signals stream, every tick interval.

Timeouts are judged in the ticks' time, so that they are applied like any entry: in order, exactly once,
and the same when replayed (:mod:`coordinator.rules.timeouts`).
"""

from __future__ import annotations

import logging
from typing import Final

from bus import wire
from bus.connection import Client, translated
from bus.envelope import encode, new_envelope
from bus.errors import CommandFailed
from bus.events import Tick
from coordinator.shard import Shard

__all__ = ["TICK_GROUP", "add_tick"]

log = logging.getLogger("subagent_bus.coordinator")

TICK_GROUP: Final = "*"
"""The group id of a TICK envelope: it applies to every group of its shard."""


async def add_tick(client: Client, shard: Shard, name: str) -> None:
    """Add a tick from the coordinator ``name`` to the shard's signals stream.

    The server's clock, not this machine's: every coordinator that ticks the shard then keeps one time, and
    one whose clock is ahead does not time out every agent when it takes the shard over.
    """
    server = await wire.server_time(client, shard.signals)
    tick = new_envelope(Tick(now=server), agent_id=name, group_id=TICK_GROUP, source="tick", ts=server)
    try:
        with translated():
            await client.xadd(shard.signals, {"data": encode(tick)})
    except CommandFailed as exc:
        # An entry of the last possible id (only a writer other than the bus adds one): no entry can be
        # added after it, by anyone. The shard's loop goes on with what is there, and says so once.
        if "last possible ID" not in str(exc):
            raise
        if not shard.exhausted:
            log.error(
                "shard %d: %s holds the last possible entry id: nothing can be added to it any more "
                "(no signal, no tick); only deleting the stream (once what it holds is applied) opens it "
                "again",
                shard.index,
                shard.signals,
            )
        shard.exhausted = True
