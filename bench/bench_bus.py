"""Throughput of the transport layer against raw redis-py, on a real server started for the run.

    python -m bench.bench_bus [--quick] [--messages N] [--repeat R]

1. publish: ``Publisher.publish_many`` in batches of 100 vs a raw loop of ``XADD`` pipelined by 100;
2. consume: ``Consumer.run`` (burst, a handler that acknowledges) vs a raw loop of ``XREADGROUP COUNT 100``
   + ``orjson.loads`` + ``Envelope.model_validate`` + one ``XACK`` per batch.

Both sides use the same asyncio client and encode envelopes the same way (``bus.envelope.encode``), so
the ratio is the layer's own cost. Each of ``--repeat`` rounds runs both sides back to back (alternating
which goes first); the table shows the best round's throughput, the median of the per-round ratios, and
the CPU time this process spent per message (the layer's overhead, least disturbed by other load).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.arguments import at_least_one, sizes
from bus.connection import Client, connect
from bus.consumer import Ack, Consumer, Delivery
from bus.embedded import RedisProcess
from bus.envelope import Envelope, encode, new_envelope
from bus.keys import Keys, StreamKind
from bus.publisher import Publisher
from bus.settings import Settings
from bus.signals import Progress

BATCH = 100
KEYS = Keys("bench", 8)
GROUP_ID = "bench-group"
STREAM = KEYS.stream(KEYS.shard_of(GROUP_ID), StreamKind.SIGNALS)


def _envelopes(count: int) -> list[Envelope]:
    text = "compiling module {} of the build; 3 warnings so far, nothing blocking"
    return [
        new_envelope(
            Progress(agent_id="agent-1", percent=i % 101, message=text.format(i)),
            agent_id="agent-1",
            group_id=GROUP_ID,
        )
        for i in range(count)
    ]


async def _publish_layer(client: Client, envelopes: list[Envelope]) -> None:
    publisher = Publisher(client, KEYS)
    for start in range(0, len(envelopes), BATCH):
        await publisher.publish_many(envelopes[start : start + BATCH])


async def _publish_raw(client: Client, envelopes: list[Envelope]) -> None:
    for start in range(0, len(envelopes), BATCH):
        pipe = client.pipeline(transaction=False)
        for envelope in envelopes[start : start + BATCH]:
            pipe.xadd(STREAM, {"data": encode(envelope)})
        await pipe.execute()


async def _consume_layer(client: Client, expected: int) -> None:
    async def handler(delivery: Delivery) -> Ack:
        return Ack.ACK

    consumer = Consumer(client, STREAM, "bench", "layer", batch=BATCH)
    await consumer.ensure_group()
    done = await consumer.run(handler, burst=True)
    assert done == expected, (done, expected)


async def _consume_raw(client: Client, expected: int) -> None:
    await client.xgroup_create(STREAM, "bench", id="0", mkstream=True)
    done = 0
    while True:
        reply: Any = await client.xreadgroup("bench", "raw", {STREAM: ">"}, count=BATCH)
        if not reply:
            break
        entries = reply[0][1]
        for _, fields in entries:
            Envelope.model_validate(orjson.loads(fields[b"data"]))
        await client.xack(STREAM, "bench", *(entry_id for entry_id, _ in entries))
        done += len(entries)
    assert done == expected, (done, expected)


@dataclass
class Sample:
    """Seconds taken by one side of one round: wall clock, and CPU time of this (client) process."""

    wall: float
    cpu: float


@dataclass
class Result:
    layer: list[Sample] = field(default_factory=list)
    raw: list[Sample] = field(default_factory=list)

    def samples(self, side: str) -> list[Sample]:
        return self.layer if side == "layer" else self.raw

    def rate(self, side: str, count: int) -> float:
        return count / min(s.wall for s in self.samples(side))

    def ratio(self) -> float:
        """Median over rounds of layer throughput / raw throughput (each round runs both, back to back)."""
        return statistics.median(
            raw.wall / layer.wall for layer, raw in zip(self.layer, self.raw, strict=True)
        )

    def cpu_us(self, side: str, count: int) -> float:
        return min(s.cpu for s in self.samples(side)) / count * 1e6


async def _timed(step: Callable[[], Awaitable[None]]) -> Sample:
    wall, cpu = time.perf_counter(), time.process_time()
    await step()
    return Sample(time.perf_counter() - wall, time.process_time() - cpu)


async def _measure(client: Client, envelopes: list[Envelope], repeat: int) -> dict[str, Result]:
    count = len(envelopes)
    results = {"publish": Result(), "consume": Result()}
    publishers = {"layer": _publish_layer, "raw": _publish_raw}
    consumers = {"layer": _consume_layer, "raw": _consume_raw}
    for round_ in range(repeat):
        sides = ("layer", "raw") if round_ % 2 == 0 else ("raw", "layer")  # alternate who goes first
        for side in sides:
            await client.delete(STREAM)
            sample = await _timed(functools.partial(publishers[side], client, envelopes))
            results["publish"].samples(side).append(sample)
        for side in sides:
            await client.delete(STREAM)
            await _publish_raw(client, envelopes)
            sample = await _timed(functools.partial(consumers[side], client, count))
            results["consume"].samples(side).append(sample)
    await client.delete(STREAM)
    return results


def _table(results: dict[str, Result], count: int, repeat: int) -> str:
    size = len(encode(_envelopes(1)[0]))
    rows = [
        f"{count} envelopes of {size} bytes, batches of {BATCH}, {repeat} rounds "
        "(msg/s: best round; ratio: median of per-round layer/raw; CPU: this process, best round)",
        f"{'operation':<10} {'layer msg/s':>12} {'raw msg/s':>12} {'ratio':>7} "
        f"{'layer CPU':>12} {'raw CPU':>12}",
    ]
    for name, result in results.items():
        rows.append(
            f"{name:<10} {result.rate('layer', count):>12,.0f} {result.rate('raw', count):>12,.0f} "
            f"{result.ratio():>6.2f}x {result.cpu_us('layer', count):>9.1f} us "
            f"{result.cpu_us('raw', count):>9.1f} us"
        )
    return "\n".join(rows)


async def _run(url: str, count: int, repeat: int) -> str:
    client = await connect(Settings.from_url(url))
    try:
        envelopes = _envelopes(count)
        # The benchmark's own envelopes are neither side's data; left in the collector's sight, a full
        # collection walking them fell into one side's rounds or the other's at random (160 or 220 ms
        # for the same consume loop). Both sides run with the collector on, as any consumer does.
        gc.collect()
        gc.freeze()
        await _measure(client, envelopes[: min(count, 1000)], 1)  # warm up connections and code paths
        return _table(await _measure(client, envelopes, repeat), count, repeat)
    finally:
        await client.aclose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    parser.add_argument(
        "--messages", type=at_least_one, help="envelopes per run (default 20000; --quick 3000)"
    )
    parser.add_argument("--repeat", type=at_least_one, help="rounds per measurement (default 5; --quick 3)")
    args = parser.parse_args(argv)
    sizes(args, {"messages": 20_000, "repeat": 5}, {"messages": 3000, "repeat": 3})
    count, repeat = args.messages, args.repeat
    with tempfile.TemporaryDirectory(prefix="bench-bus-") as directory:
        server = RedisProcess(Path(directory))
        server.start()
        try:
            print(f"server: {server.binary.name} at {server.url}")
            print(asyncio.run(_run(server.url, count, repeat)))
        finally:
            server.stop()


if __name__ == "__main__":
    main()
