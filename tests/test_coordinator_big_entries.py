"""Entries of megabytes neither block a shard nor get good entries dead-lettered.

A batch is read a hundred entries at a time, and what it writes is one argument of the commit script,
which the server refuses over its ``proto-max-bulk-len`` (512 MiB by default; 32 MiB here, so that a few
entries of a few MiB show it). A batch is cut at :data:`~coordinator.service.BATCH_BYTES`, and a dead
letter keeps at most the first :data:`~bus.envelope.MAX_ENVELOPE_BYTES` of what it copies.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from workers.kit import connected, entries

from bus.embedded import RedisProcess
from bus.envelope import MAX_ENVELOPE_BYTES, new_envelope
from bus.findings import Finding
from bus.keys import StreamKind, open_namespace
from bus.publisher import Publisher
from coordinator.batch import Batch
from coordinator.policy import Policy
from coordinator.service import Coordinator, CoordinatorOptions

GROUP = "big"
MIB = 1024 * 1024


@pytest.fixture
def small_args(tmp_path: Path) -> Iterator[str]:
    """A server that takes no argument over 32 MiB."""
    server = RedisProcess(tmp_path / "redis", config={"proto-max-bulk-len": "32mb"})
    server.start()
    yield server.url
    server.stop()


def _finding(n: int) -> Finding:
    evidence = f"{n}:" + "x" * (3 * MIB)
    return Finding(title=f"finding {n}", file=f"src/m{n}.py", line=1, agent="scanner", evidence=evidence)


async def test_a_backlog_of_large_entries_is_applied_in_batches_the_server_takes(small_args: str) -> None:
    async with connected(small_args) as client:
        keys = await open_namespace(client, "big", 1)
        publisher = Publisher(client, keys)
        for n in range(12):  # 36 MiB in all: one batch of them would write three times that
            await publisher.publish(new_envelope(_finding(n), agent_id="scanner", group_id=GROUP))
        # a foreign entry over what a dead letter keeps, in two fields the server takes one by one
        raw = redis.Redis.from_url(small_args)
        raw.xadd(keys.stream(0, StreamKind.SIGNALS), {"data": b"y" * (20 * MIB), "note": b"z" * (20 * MIB)})
        raw.xadd(keys.stream(0, StreamKind.SIGNALS), {b"n" * (20 * MIB): b"1", b"m" * (20 * MIB): b"2"})
        raw.close()
        coordinator = Coordinator(client, keys, Policy(), CoordinatorOptions(name="big", lease_ttl_ms=60_000))
        assert await asyncio.wait_for(coordinator.run(burst=True), 120) == 14
        assert await client.xlen(keys.stream(0, StreamKind.FINDINGS)) == 12
        [(_, letter), (_, names)] = await entries(client, keys.stream(0, StreamKind.DEAD))
        assert (letter[b"data_bytes"], letter[b"fields_cut"]) == (b"%d" % (20 * MIB), b"1")
        assert len(letter[b"data"]) + len(letter[b"field:note"]) == MAX_ENVELOPE_BYTES
        assert letter[b"data"] == b"y" * MAX_ENVELOPE_BYTES
        long_names = [name for name in names if name.startswith(b"field:")]
        assert len(long_names) == 2 and all(len(name) == len("field:") + 256 for name in long_names)
        assert names[b"fields_cut"] == b"2"


async def test_a_pending_backlog_of_large_entries_is_taken_over_without_counting_deliveries(
    small_args: str,
) -> None:
    # a coordinator that read the backlog died: its successor reads the pending list, applies it a few
    # entries at a time, and keeps the rest rather than reading the list again (a delivery more each time)
    async with connected(small_args) as client:
        keys = await open_namespace(client, "big", 1)
        publisher = Publisher(client, keys)
        for n in range(12):
            await publisher.publish(new_envelope(_finding(n), agent_id="scanner", group_id=GROUP))
        signals = keys.stream(0, StreamKind.SIGNALS)
        await client.xgroup_create(signals, "coordinator", id="0")
        await client.xreadgroup("coordinator", "dead", {signals: ">"}, count=100)
        coordinator = Coordinator(
            client, keys, Policy(), CoordinatorOptions(name="next", lease_ttl_ms=60_000)
        )
        assert await asyncio.wait_for(coordinator.run(burst=True), 120) == 12
        assert await client.xlen(keys.stream(0, StreamKind.FINDINGS)) == 12
        assert await client.xlen(keys.stream(0, StreamKind.DEAD)) == 0


async def test_a_batch_slower_to_apply_than_the_lease_lasts_is_committed(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each entry applied in 60 ms (large results on a slow machine): the batch outlasted its 1 s lease,
    was read again each time, and after as many deliveries dead-lettered whole, none of it at fault."""
    add = Batch.add

    def slow(self: Batch, *args: Any, **kwargs: Any) -> None:
        time.sleep(0.06)  # holds the event loop, as applying a large entry does
        add(self, *args, **kwargs)

    monkeypatch.setattr(Batch, "add", slow)
    async with connected(redis_url) as client:
        keys = await open_namespace(client, "slow", 1)
        publisher = Publisher(client, keys)
        for n in range(40):  # one batch of 2.4 s
            finding = Finding(title=f"finding {n}", file=f"src/m{n}.py", line=1, agent="scanner")
            await publisher.publish(new_envelope(finding, agent_id="scanner", group_id=GROUP))
        options = CoordinatorOptions(name="slow", lease_ttl_ms=1000)
        assert await asyncio.wait_for(Coordinator(client, keys, Policy(), options).run(burst=True), 120) == 40
        assert await client.xlen(keys.stream(0, StreamKind.FINDINGS)) == 40
        assert await client.xlen(keys.stream(0, StreamKind.DEAD)) == 0
