"""Envelopes and connections shared by the bus tests and the worker scripts they start."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

from bus.connection import Client, connect
from bus.envelope import Envelope, new_envelope
from bus.settings import Settings
from bus.signals import Progress

__all__ = ["EPOCH", "connected", "entries", "progress", "progresses", "read_group"]

EPOCH = datetime(2025, 1, 1, tzinfo=UTC)


def progress(
    i: int, *, group_id: str = "group-1", agent_id: str = "agent-1", message: str | None = None
) -> Envelope:
    """A PROGRESS envelope with the deterministic id ``e<i>`` (and time: ``i`` seconds after EPOCH)."""
    payload = Progress(
        agent_id=agent_id, percent=i % 101, message=message if message is not None else f"step {i}"
    )
    ts = EPOCH + timedelta(seconds=i)
    return new_envelope(payload, agent_id=agent_id, group_id=group_id, id=f"e{i}", ts=ts)


def progresses(count: int, *, group_id: str = "group-1", start: int = 0) -> list[Envelope]:
    return [progress(i, group_id=group_id) for i in range(start, start + count)]


@asynccontextmanager
async def connected(url: str) -> AsyncIterator[Client]:
    client = await connect(Settings.from_url(url))
    try:
        yield client
    finally:
        await client.aclose()


async def entries(
    client: Client, stream: str, start: str = "-", end: str = "+"
) -> list[tuple[str, dict[bytes, bytes]]]:
    """``XRANGE`` as (entry id, fields) pairs."""
    reply: Any = await client.xrange(stream, start, end)
    return [(_text(entry_id), dict(fields or {})) for entry_id, fields in reply]


async def read_group(client: Client, stream: str, group: str, count: int, consumer: str = "c") -> list[str]:
    """The ids of up to ``count`` new entries delivered to ``consumer`` of ``group``."""
    reply: Any = await client.xreadgroup(group, consumer, {stream: ">"}, count=count)
    return [_text(entry_id) for entry_id, _ in reply[0][1]] if reply else []


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
