"""A consumer run as its own process so that a test can kill it with SIGKILL.

python crash_consumer.py URL STREAM GROUP NAME hold BATCH
    reads one batch, prints its envelope ids as one JSON line, then waits (never acknowledges)
python crash_consumer.py URL STREAM GROUP NAME run BATCH
    runs the consumer loop and prints each envelope id as it handles it (before the batch is acked)
"""

from __future__ import annotations

import asyncio
import sys

import orjson

from bus.connection import connect
from bus.consumer import Ack, Consumer, Delivery
from bus.settings import Settings


def _say(line: bytes) -> None:
    sys.stdout.buffer.write(line + b"\n")
    sys.stdout.buffer.flush()


async def main(url: str, stream: str, group: str, name: str, mode: str, batch: int) -> None:
    client = await connect(Settings.from_url(url))
    consumer = Consumer(client, stream, group, name, batch=batch, block_ms=100)
    if mode == "hold":
        deliveries = await consumer.read()
        _say(orjson.dumps([d.envelope.id for d in deliveries if d.envelope]))
        await asyncio.Event().wait()  # hold the batch, unacknowledged, until killed

    async def handler(delivery: Delivery) -> Ack:
        _say((delivery.envelope.id if delivery.envelope else "?").encode())
        return Ack.ACK

    await consumer.run(handler)


if __name__ == "__main__":
    url_, stream_, group_, name_, mode_, batch_ = sys.argv[1:7]
    asyncio.run(main(url_, stream_, group_, name_, mode_, int(batch_)))
