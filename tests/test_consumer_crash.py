"""A consumer process killed with SIGKILL loses nothing: the group's other consumers reclaim its entries."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import orjson
from workers.kit import connected, progresses

from bus.consumer import Ack, Consumer, Delivery
from bus.keys import Keys, StreamKind
from bus.publisher import Publisher

KEYS = Keys("crash", 8)
STREAM = KEYS.stream(KEYS.shard_of("group-1"), StreamKind.SIGNALS)
WORKER = Path(__file__).parent / "workers" / "crash_consumer.py"


async def _start_worker(url: str, name: str, mode: str, batch: int) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, str(WORKER), url, STREAM, "workers", name, mode, str(batch),
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip


async def _kill(process: asyncio.subprocess.Process) -> None:
    process.send_signal(signal.SIGKILL)
    assert await asyncio.wait_for(process.wait(), 30) == -signal.SIGKILL


class Recorder:
    def __init__(self) -> None:
        self.seen: list[str] = []

    async def __call__(self, delivery: Delivery) -> Ack:
        assert delivery.envelope is not None
        self.seen.append(delivery.envelope.id)
        return Ack.ACK


async def test_entries_held_by_a_killed_consumer_are_reclaimed(bus_url: str) -> None:
    async with connected(bus_url) as client:
        published = progresses(250)
        await Publisher(client, KEYS).publish_many(published)
        survivor = Consumer(client, STREAM, "workers", "survivor", reclaim_idle_ms=100)
        await survivor.ensure_group()
        worker = await _start_worker(bus_url, "doomed", "hold", 100)
        try:
            assert worker.stdout is not None
            held = orjson.loads(await asyncio.wait_for(worker.stdout.readline(), 60))
        finally:
            await _kill(worker)
        assert held == [e.id for e in published[:100]]
        summary = await client.xpending(STREAM, "workers")
        assert summary["consumers"] == [{"name": b"doomed", "pending": 100}]

        recorder = Recorder()
        await survivor.run(recorder, burst=True)
        lost = {e.id for e in published} - set(recorder.seen)
        assert lost == set()
        assert sorted(recorder.seen) == sorted(e.id for e in published)  # each exactly once here
        assert await survivor.pending_count() == 0


async def test_killing_a_running_consumer_at_any_point_loses_nothing(bus_url: str) -> None:
    async with connected(bus_url) as client:
        published = progresses(3000)
        await Publisher(client, KEYS).publish_many(published)
        survivor = Consumer(client, STREAM, "workers", "survivor", reclaim_idle_ms=100, batch=64)
        await survivor.ensure_group()
        worker = await _start_worker(bus_url, "busy", "run", 64)
        handled_by_worker: set[str] = set()
        try:
            assert worker.stdout is not None
            while len(handled_by_worker) < 700:  # kill it in the middle of its work
                line = await asyncio.wait_for(worker.stdout.readline(), 60)
                assert line, "the worker exited early"
                handled_by_worker.add(line.strip().decode())
        finally:
            await _kill(worker)
        handled_by_worker.update(
            line.decode() for line in (await worker.stdout.read()).split()
        )  # still in the pipe
        recorder = Recorder()
        await survivor.run(recorder, burst=True)
        lost = {e.id for e in published} - handled_by_worker - set(recorder.seen)
        assert lost == set()
        assert len(recorder.seen) == len(set(recorder.seen))
        assert await survivor.pending_count() == 0
