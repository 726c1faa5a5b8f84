"""What a committed batch tells the operator: a log line per decision, and the metrics it counts.

Called only once a batch is durably committed, so neither the log nor a counter shows a decision that
a lost lease or a crash took back.
"""

from __future__ import annotations

import logging

from bus.connection import Client, translated
from bus.envelope import EnvelopeType
from bus.events import Decision
from bus.metrics import Metrics
from coordinator.batch import Batch
from coordinator.shard import GROUP, Shard

__all__ = ["committed", "gauge_pending"]

log = logging.getLogger("subagent_bus.coordinator")


def committed(batch: Batch, seconds: float, metrics: Metrics | None) -> None:
    """Log the decisions and dead letters of ``batch`` (committed in ``seconds``) and count what it read
    and wrote."""
    for entry_id, reason in batch.dead:
        log.warning("dead-lettered %s: %s", entry_id, reason, extra={"shard": batch.shard})
    for emit in batch.emitted:
        # the type first: only a decision's envelope is built (see Emit)
        envelope = emit.envelope if emit.type is EnvelopeType.DECISION else None
        if envelope is not None and isinstance(envelope.payload, Decision):
            log.info(
                envelope.payload.detail.split("\n", 1)[0],
                extra={
                    "decision": envelope.payload.decision.value,
                    "agent_id": envelope.agent_id,
                    "group_id": envelope.group_id,
                    "shard": batch.shard,
                },
            )
    if metrics:
        metrics.commit_seconds.observe(seconds)
        for type_, count in batch.types_in.items():
            metrics.read(type_.value, count)
        for emit in batch.emitted:
            metrics.wrote(emit.type.value)
        if batch.dead:
            metrics.dead_letters.labels(metrics.role, str(batch.shard)).inc(len(batch.dead))


async def gauge_pending(client: Client, shards: list[Shard], metrics: Metrics | None) -> None:
    """Set the pending-entries gauge of each of ``shards`` (the ones this process owns)."""
    if not metrics:
        return
    for shard in shards:
        with translated():
            summary = await client.xpending(shard.signals, GROUP)
        metrics.pending.labels(str(shard.index)).set(int(summary["pending"]))
