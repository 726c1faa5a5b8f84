"""Scaling: one backlog applied by 1, 2, 3 coordinator processes, and by as many raw redis-py relays.

    python -m bench.bench_scaling [--quick] [--signals N] [--processes 1,2,3] [--rounds R]

Per round, on a server started for the run: the mixed workload of :mod:`bench.bench_coordinator` is
published into a namespace of 8 shards, and the consumer group is created *behind* it, so that nothing
is read yet. Then N processes start and settle: coordinators (``subagent-bus coordinator``) until the
shards' leases are split between them (``ceil(8 / N)`` at most each), raw relays
(:mod:`bench.raw_relay`: read, validate, copy to the findings stream, ack; no rules, state or lease)
until each has joined the group. The clock starts when the group is set back to the start of the streams
(``XGROUP SETID 0``, and one more entry per shard wakes the blocked reads) and stops when every entry is
read and acknowledged. Printed: entries per second for each N (the best of the rounds) and the speed-up
over one process, for both.

The relays are the baseline: how far the simplest consumer group gains from more processes on the same
machine. On a machine with fewer cores than processes plus the server, neither can gain much.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.arguments import at_least_one, sizes
from bench.bench_coordinator import CLI, publish_all, start_process, workload
from bus.connection import Client, connect
from bus.embedded import RedisProcess
from bus.envelope import encode, new_envelope
from bus.events import Heartbeat
from bus.keys import Keys, StreamKind, open_namespace
from bus.settings import Settings
from coordinator.service import GROUP

RELAY_GROUP = "relay"
Start = Callable[[str, int], subprocess.Popen[bytes]]


def coordinator(url: str, n: int) -> subprocess.Popen[bytes]:
    argv = [
        CLI,
        "coordinator",
        "--redis-url",
        url,
        "--namespace",
        "bench",
        "--tick",
        "3600",
        "--name",
        f"c{n}",
    ]
    return start_process(argv)


def relay(url: str, n: int) -> subprocess.Popen[bytes]:
    return start_process(
        [sys.executable, "-m", "bench.raw_relay", url, "--namespace", "bench", "--consumer", f"r{n}"]
    )


async def _leases_split(client: Client, keys: Keys, n: int) -> bool:
    holders: dict[str, int] = {}
    for shard in keys.all_shards():
        token: Any = await client.get(keys.state(shard, "lease"))
        if token is None:
            return False
        holder = token.decode().rpartition(":")[0]
        holders[holder] = holders.get(holder, 0) + 1
    return len(holders) == n and max(holders.values()) <= -(-keys.shards // n)


async def _relays_joined(client: Client, keys: Keys, n: int) -> bool:
    consumers: Any = await client.xinfo_consumers(keys.stream(0, StreamKind.SIGNALS), RELAY_GROUP)
    return len(consumers) == n


async def _until(check: Callable[[], Any], what: str, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not await check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _drained(client: Client, streams: list[str], group: str) -> bool:
    for stream in streams:
        last: Any = await client.xrevrange(stream, count=1)
        [info] = [g for g in await client.xinfo_groups(stream) if g["name"] in (group, group.encode())]
        if info["pending"] or info["last-delivered-id"] != last[0][0]:
            return False
    return True


def _wake(keys: Keys, shard: int) -> bytes:
    """A heartbeat of a group on ``shard``: an entry that wakes the reads blocked on its stream."""
    group = next(g for g in (f"wake-{i}" for i in range(10_000)) if keys.shard_of(g) == shard)
    return encode(new_envelope(Heartbeat(), agent_id="waker", group_id=group, source="bench"))


async def one_round(url: str, signals: int, n: int, start: Start, group: str) -> float:
    """Entries per second for ``n`` processes that ``start`` starts, on a fresh backlog."""
    client = await connect(Settings.from_url(url))
    await client.flushall()
    keys = await open_namespace(client, "bench", 8)
    await publish_all(client, keys, workload(signals))
    streams = [keys.stream(shard, StreamKind.SIGNALS) for shard in keys.all_shards()]
    for stream in streams:
        await client.xgroup_create(stream, group, id="$")
    processes = [start(url, i) for i in range(n)]
    try:
        if group == GROUP:
            await _until(lambda: _leases_split(client, keys, n), "the coordinators to split the shards")
        else:
            await _until(lambda: _relays_joined(client, keys, n), "the relays to join")
        wakes = [_wake(keys, shard) for shard in keys.all_shards()]
        started = time.perf_counter()
        for stream, wake in zip(streams, wakes, strict=True):
            await client.execute_command("XGROUP", "SETID", stream, group, "0", "ENTRIESREAD", "0")
            await client.xadd(stream, {"data": wake})
        await _until(lambda: _drained(client, streams, group), "the backlog to be applied", 600)
        return (signals + len(streams)) / (time.perf_counter() - started)
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait()
        await client.aclose()


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisProcess(Path(tmp))
        server.start()
        try:
            rates: dict[str, dict[int, float]] = {"coordinator": {}, "raw relay": {}}
            for n in args.processes:
                for name, start, group in (
                    ("coordinator", coordinator, GROUP),
                    ("raw relay", relay, RELAY_GROUP),
                ):
                    best = max(
                        [
                            await one_round(server.url, args.signals, n, start, group)
                            for _ in range(args.rounds)
                        ]
                    )
                    rates[name][n] = best
                    print(f"{name + ' processes':24} {n:>2}: {best:>10,.0f} entries/s", flush=True)
            print(
                f"speed-up over one process ({os.cpu_count()} cores, the server and the processes on them):"
            )
            for name, by_n in rates.items():
                ups = "  ".join(f"{n}: {rate / by_n[args.processes[0]]:.2f}x" for n, rate in by_n.items())
                print(f"  {name:22} {ups}")
        finally:
            server.stop()


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    parser.add_argument(
        "--signals", type=at_least_one, help="signals applied per round (default 100000; --quick 10000)"
    )
    parser.add_argument(
        "--processes", default="1,2,3", help="process counts, comma-separated (default 1,2,3)"
    )
    parser.add_argument(
        "--rounds", type=at_least_one, help="rounds per count, the best printed (default 3; --quick 1)"
    )
    args = parser.parse_args()
    try:
        args.processes = [at_least_one(n) for n in args.processes.split(",")]
    except argparse.ArgumentTypeError:
        parser.error("--processes takes whole numbers of at least 1 separated by commas, e.g. 1,2,3")
    sizes(args, {"signals": 100_000, "rounds": 3}, {"signals": 10_000, "rounds": 1})
    asyncio.run(main(args))


if __name__ == "__main__":
    cli()
