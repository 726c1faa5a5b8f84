"""The latency baseline: a hand-written redis-py relay, about the least a process can do per signal.

    python -m bench.raw_relay REDIS_URL [--namespace bench] [--consumer NAME]

It reads every shard's signals stream in the consumer group ``relay`` (XREADGROUP COUNT 100 BLOCK, all
shards on one connection; several relays with different ``--consumer`` names share the entries), validates
each envelope as the raw consume loop of :mod:`bench.bench_coordinator` does, appends the entry's bytes to
the shard's findings stream and acknowledges it, one pipeline per read: no rules, no state, no lease, no
exactly-once commit. The coordinator benchmark measures its publish -> visible latency with the same
publisher and subscriber as the coordinator's, in the same run: what this machine, its scheduler and the
measuring process add on their own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
import redis.asyncio as redis

from bus.envelope import Envelope
from bus.keys import Keys, StreamKind, meta_key

GROUP = "relay"


async def relay(url: str, namespace: str, consumer: str) -> None:
    """Relay until killed."""
    client: Any = redis.from_url(url)
    keys = Keys(namespace, int(await client.get(meta_key(namespace))))
    findings = {}
    for shard in keys.all_shards():
        signals = keys.stream(shard, StreamKind.SIGNALS)
        findings[signals.encode()] = keys.stream(shard, StreamKind.FINDINGS)
        with contextlib.suppress(redis.ResponseError):  # BUSYGROUP: another relay (or the benchmark) made it
            await client.xgroup_create(signals, GROUP, id="0", mkstream=True)
    streams = {stream: ">" for stream in findings}
    while True:
        reply = await client.xreadgroup(GROUP, consumer, streams, count=100, block=1000)
        for stream, entries in reply or []:
            pipe = client.pipeline(transaction=False)
            for _, fields in entries:
                data = fields[b"data"]
                Envelope.model_validate(orjson.loads(data))
                pipe.xadd(findings[stream], {"data": data})
            pipe.xack(stream, GROUP, *(entry_id for entry_id, _ in entries))
            await pipe.execute()


def cli() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("url")
    parser.add_argument("--namespace", default="bench")
    parser.add_argument("--consumer", default="relay-1")
    args = parser.parse_args()
    asyncio.run(relay(args.url, args.namespace, args.consumer))


if __name__ == "__main__":
    cli()
