"""Throughput of the adapter's parse-and-publish path, on a real server started for the run.

    python -m bench.bench_adapter [--quick] [--megabytes N] [--repeat R]

1. parser: ``agents.parser.Parser`` fed 64 KiB chunks of agent-like prose, without signals and with one
   PROGRESS block per KiB, in MB/s of input (target: >= 50 MB/s);
2. publish: the same signal-per-KiB output taken onto the bus, against a raw loop that XADDs the same
   bytes (one entry per KiB, so as many entries as there are signals) pipelined by 100 with redis-py
   (``raw``, the baseline of the ratios):

   - ``adapter``: :class:`agents.output_stream.OutputStream` (parse, validate, envelope with deterministic
     ids) + :meth:`agents.adapter.AgentBus.publish` with ``wait=False`` (encode, pack the chunk's XADDs
     with :mod:`bus.wire`, write them, and read their replies while the next chunk is parsed), what the
     process adapter runs (the file watcher adds its checkpoint, in a MULTI/EXEC);
   - ``publish_many``: the same parsing and envelopes + :meth:`bus.publisher.Publisher.publish_many`
     (redis-py's pipeline);
   - ``parse+envelope, no Redis``: the same without publishing, to show where the time goes;
   - ``raw, bus.wire``: the raw loop with the adapter's packing instead of redis-py's, to show how
     much of the adapter's lead comes from the client's side of the transport.

Each number is the best of ``--repeat`` rounds; the ratio is the median of per-round layer/raw. One
untimed round of every side comes first, so that no side pays for warming up in a timed round.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agents.adapter import AgentBus, OutputStream
from agents.parser import Parser
from agents.transcript import Format
from bench.arguments import above_zero, at_least_one, sizes
from bus import wire
from bus.connection import Client, connect
from bus.embedded import RedisProcess
from bus.keys import Keys, StreamKind
from bus.publisher import Publisher
from bus.settings import Settings

CHUNK = 64 * 1024
KIB = 1024
BATCH = 100
KEYS = Keys("bench", 8)
GROUP_ID = "bench-group"
STREAM = KEYS.stream(KEYS.shard_of(GROUP_ID), StreamKind.SIGNALS)
PROSE = (
    "Reading src/services/payments/processor.py to follow the refund path; the handler validates the "
    "amount, looks the order up and calls the gateway client with a retry policy of three attempts.\n"
)


def prose(size: int) -> bytes:
    """About ``size`` bytes of agent narration without signals."""
    return (PROSE * (size // len(PROSE) + 1)).encode()[:size]


def with_signals(size: int) -> bytes:
    """``size`` bytes in KiB units, each a PROGRESS block padded with prose to exactly 1 KiB."""
    stamp = datetime(2026, 1, 11, 9, 0, tzinfo=UTC).isoformat()
    units = []
    for i in range(size // KIB):
        block = (
            f"[PROGRESS]\nagent_id: bench-agent\ntimestamp: {stamp}\npercent: {i % 100}\n"
            f"message: analysed file {i} of the payments module\n[/PROGRESS]\n"
        ).encode()
        filler = prose(KIB - len(block) - 1).replace(b"\n", b" ") + b"\n"
        units.append(filler + block)
    data = b"".join(units)
    assert all(len(u) == KIB for u in units)
    return data


def chunks(data: bytes) -> list[bytes]:
    return [data[i : i + CHUNK] for i in range(0, len(data), CHUNK)]


def parse_rate(data: bytes, repeat: int) -> tuple[float, int]:
    """Best MB/s of one Parser over the data, and the number of items it yields."""
    pieces = chunks(data)
    best, items = float("inf"), 0
    for _ in range(repeat):
        parser = Parser()
        started = time.perf_counter()
        found = sum(len(parser.feed(piece)) for piece in pieces) + len(parser.close())
        best = min(best, time.perf_counter() - started)
        items = found
    return len(data) / best / 1e6, items


async def adapter_publish(bus: AgentBus, data: bytes) -> int:
    stream = OutputStream(bus, f"bench:{time.perf_counter_ns()}", Format.TEXT)
    sent = 0
    for piece in chunks(data):
        envelopes = stream.feed(piece)
        await bus.publish(envelopes, wait=False)
        sent += len(envelopes)
    tail = stream.close()
    await bus.publish(tail)
    return sent + len(tail)


async def publish_many(bus: AgentBus, data: bytes) -> int:
    stream = OutputStream(bus, f"bench:{time.perf_counter_ns()}", Format.TEXT)
    publisher = Publisher(bus.client, bus.keys)
    envelopes = [e for piece in chunks(data) for e in stream.feed(piece)] + stream.close()
    for start in range(0, len(envelopes), BATCH):
        await publisher.publish_many(envelopes[start : start + BATCH])
    return len(envelopes)


async def envelopes_only(bus: AgentBus, data: bytes) -> int:
    """Parse and build the envelopes, publish nothing: the adapter's cost without Redis."""
    stream = OutputStream(bus, f"bench:{time.perf_counter_ns()}", Format.TEXT)
    return sum(len(stream.feed(piece)) for piece in chunks(data)) + len(stream.close())


async def raw_xadd(client: Client, data: bytes) -> int:
    entries = [data[i : i + KIB] for i in range(0, len(data), KIB)]
    for start in range(0, len(entries), BATCH):
        pipe = client.pipeline(transaction=False)
        for entry in entries[start : start + BATCH]:
            pipe.xadd(STREAM, {"data": entry})
        await pipe.execute()
    return len(entries)


async def raw_wire(client: Client, data: bytes) -> int:
    entries = [data[i : i + KIB] for i in range(0, len(data), KIB)]
    stream = STREAM.encode()
    for start in range(0, len(entries), BATCH):
        await wire.execute(
            client, stream, [(b"XADD", stream, b"*", b"data", e) for e in entries[start : start + BATCH]]
        )
    return len(entries)


async def timed(step: Callable[[], Awaitable[int]]) -> tuple[float, int]:
    started = time.perf_counter()
    count = await step()
    return time.perf_counter() - started, count


async def publish_rates(client: Client, data: bytes, repeat: int) -> dict[str, list[tuple[float, int]]]:
    bus = AgentBus(client, KEYS, "bench-agent", GROUP_ID, log=lambda _: None)
    sides: dict[str, Callable[[], Awaitable[int]]] = {
        "adapter": lambda: adapter_publish(bus, data),
        "publish_many": lambda: publish_many(bus, data),
        "parse+envelope, no Redis": lambda: envelopes_only(bus, data),
        "raw, bus.wire": lambda: raw_wire(client, data),
        "raw": lambda: raw_xadd(client, data),
    }
    samples: dict[str, list[tuple[float, int]]] = {name: [] for name in sides}
    for side in sides.values():  # warm-up, untimed
        await client.delete(STREAM)
        await side()
    for round_ in range(repeat):
        order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
        for name in order:
            await client.delete(STREAM)
            samples[name].append(await timed(sides[name]))
    await client.delete(STREAM)
    return samples


def table(
    data_mb: float, parser_rows: list[tuple[str, float, int]], samples: dict[str, list[tuple[float, int]]]
) -> str:
    lines = [f"input: {data_mb:.1f} MB per run, 64 KiB chunks", "", "parser (agents.parser.Parser)"]
    lines.append(f"  {'input':<28} {'MB/s':>9} {'items':>8}  target >= 50 MB/s")
    for name, rate, items in parser_rows:
        lines.append(f"  {name:<28} {rate:>9.1f} {items:>8}  {'ok' if rate >= 50 else 'BELOW TARGET'}")
    lines += ["", "publish, one signal per KiB (best round; ratio: median per-round layer/raw)"]
    lines.append(f"  {'path':<28} {'MB/s':>9} {'entries/s':>11} {'x raw':>7}")
    raw = samples["raw"]
    for name, runs in samples.items():
        best = min(seconds for seconds, _ in runs)
        count = runs[0][1]
        ratio = statistics.median(r[0] / s[0] for s, r in zip(runs, raw, strict=True))
        lines.append(f"  {name:<28} {data_mb / best:>9.1f} {count / best:>11.0f} {ratio:>7.2f}")
    return "\n".join(lines)


async def main(megabytes: float, repeat: int) -> None:
    size = int(megabytes * (1 << 20)) // KIB * KIB
    plain, signals = prose(size), with_signals(size)
    parser_rows = [
        ("prose, no signals", *parse_rate(plain, repeat)),
        ("one PROGRESS per KiB", *parse_rate(signals, repeat)),
    ]
    with tempfile.TemporaryDirectory() as directory:
        server = RedisProcess(Path(directory))
        server.start()
        try:
            client = await connect(Settings.from_url(server.url))
            try:
                samples = await publish_rates(client, signals, repeat)
            finally:
                await client.aclose()
        finally:
            server.stop()
    print(table(size / 1e6, parser_rows, samples))


if __name__ == "__main__":
    arguments = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    arguments.add_argument(
        "--megabytes",
        type=above_zero,
        help="agent output parsed and published per run (default 16; --quick 2)",
    )
    arguments.add_argument(
        "--repeat", type=at_least_one, help="runs; the best is reported (default 3; --quick 2)"
    )
    arguments.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    options = arguments.parse_args()
    sizes(options, {"megabytes": 16.0, "repeat": 3}, {"megabytes": 2.0, "repeat": 2})
    asyncio.run(main(options.megabytes, options.repeat))
