"""``subagent-bus tail``: print the entries of one stream kind across every shard.

Order: the backlog (``--from`` an id) is merged across shards by entry id, which starts with the
millisecond time the server assigned, so it comes out in time order; shards on different cluster nodes
have their own clocks, so "time" is each node's. Once caught up, each batch of new entries is printed in
id order as it arrives.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import click
import orjson

from bus.connection import Client, as_text, connect, redis_options, translated
from bus.consumer import Ack, Consumer, Delivery, stream_entries
from bus.envelope import decode
from bus.errors import BusError, DecodeError
from bus.keys import Keys, StreamKind, open_namespace
from bus.settings import Settings

__all__ = ["Item", "TailOptions", "format_item", "tail", "tail_streams"]

_BATCH = 100
_FOLLOW_BLOCK_MS = 1000


@dataclass(frozen=True, slots=True)
class Item:
    """One stream entry as read: its shard, id and raw fields."""

    shard: int
    entry_id: str
    fields: Mapping[bytes, bytes]

    @property
    def order(self) -> tuple[int, int, int]:
        """Merge key across shards: the id's milliseconds and sequence, then the shard."""
        ms, _, seq = self.entry_id.partition("-")
        return int(ms), int(seq or 0), self.shard


@dataclass(frozen=True, slots=True)
class TailOptions:
    """What to read: ``start`` is an entry id to read after (``0``: everything, ``$``: only new)."""

    start: str = "$"
    count: int | None = None
    timeout: float | None = None
    group: str | None = None
    all_fields: bool = False
    """With ``group``: fetch every field of each entry, not only ``data`` (the dead-letter streams)."""


class _Cursor:
    """A plain reader: XREAD from a cursor, nothing stored in Redis."""

    def __init__(self, client: Client, shard: int, stream: str, cursor: str) -> None:
        self.client, self.shard, self.stream, self.cursor = client, shard, stream, cursor

    async def start(self) -> None:
        if self.cursor == "$":
            with translated():
                last = stream_entries(
                    [[self.stream, await self.client.xrevrange(self.stream, "+", "-", count=1)]]
                )
            self.cursor = as_text(last[0][0]) if last else "0-0"

    async def fetch(self, block_ms: int | None) -> list[Item]:
        with translated():
            reply = await self.client.xread({self.stream: self.cursor}, count=_BATCH, block=block_ms)
        items = [Item(self.shard, as_text(entry_id), fields) for entry_id, fields in stream_entries(reply)]
        if items:
            self.cursor = items[-1].entry_id
        return items

    async def done(self, items: Sequence[Item]) -> None:
        return None


class _Grouped:
    """A reader with its own consumer group: entries are acknowledged once printed."""

    def __init__(
        self, client: Client, shard: int, stream: str, group: str, start: str, *, all_fields: bool
    ) -> None:
        name = f"tail-{socket.gethostname()}-{os.getpid()}"
        self.shard, self.stream, self.start_id, self.all_fields = shard, stream, start, all_fields
        self.consumer = Consumer(client, stream, group, name, batch=_BATCH, block_ms=0)

    async def start(self) -> None:
        await self.consumer.ensure_group(self.start_id)

    async def fetch(self, block_ms: int | None) -> list[Item]:
        self.consumer.block_ms = block_ms or 0
        deliveries = await self.consumer.read()
        if not self.all_fields:
            return [
                Item(self.shard, d.entry_id, {b"data": d.raw} if d.raw is not None else {})
                for d in deliveries
            ]
        fields = await self._fields([d.entry_id for d in deliveries])
        return [Item(self.shard, d.entry_id, fields.get(d.entry_id, {})) for d in deliveries]

    async def _fields(self, ids: list[str]) -> dict[str, Mapping[bytes, bytes]]:
        if not ids:
            return {}
        pipe = self.consumer.client.pipeline(transaction=False)
        for entry_id in ids:
            pipe.xrange(self.stream, entry_id, entry_id)
        with translated():
            replies = await pipe.execute()
        return {as_text(reply[0][0]): reply[0][1] for reply in replies if reply}

    async def done(self, items: Sequence[Item]) -> None:
        if items:
            settled = [(Delivery(item.entry_id, None, None, None, 1), Ack.ACK, None) for item in items]
            await self.consumer.settle(settled)


_Reader = _Cursor | _Grouped


async def tail_streams(
    client: Client, streams: Sequence[tuple[int, str]], options: TailOptions, emit: Callable[[Item], bool]
) -> int:
    """Read ``streams`` (shard, key) and pass each entry to ``emit`` (which says whether it counted);
    returns the number counted. Stops at ``options.count``, after ``options.timeout`` seconds without
    entries, or never."""
    readers: list[_Reader] = [
        _Grouped(client, shard, key, options.group, options.start, all_fields=options.all_fields)
        if options.group
        else _Cursor(client, shard, key, options.start)
        for shard, key in streams
    ]
    for reader in readers:
        await reader.start()
    budget = _Budget(options.count, emit)
    await _catch_up(readers, budget)
    if not budget.full:
        await _follow(readers, budget, options.timeout)
    return budget.counted


class _Budget:
    def __init__(self, count: int | None, emit: Callable[[Item], bool]) -> None:
        self.count, self.emit, self.counted = count, emit, 0

    @property
    def full(self) -> bool:
        return self.count is not None and self.counted >= self.count

    def take(self, item: Item) -> None:
        if self.emit(item):
            self.counted += 1


async def _catch_up(readers: Sequence[_Reader], budget: _Budget) -> None:
    """Merge the backlogs by entry id: an entry is printed only when every shard that may still hold an
    older one has shown its next entry."""
    buffers: dict[int, deque[Item]] = {i: deque() for i in range(len(readers))}
    live = set(buffers)
    while live and not budget.full:
        empty = [i for i in live if not buffers[i]]
        batches = await asyncio.gather(*(readers[i].fetch(None) for i in empty))
        for i, batch in zip(empty, batches, strict=True):
            buffers[i].extend(batch)
            if not batch:
                live.discard(i)
        printed: dict[int, list[Item]] = {}
        while not budget.full and all(buffers[i] for i in live):
            heads = [i for i in buffers if buffers[i]]
            if not heads:
                break
            best = min(heads, key=lambda i: buffers[i][0].order)
            item = buffers[best].popleft()
            budget.take(item)
            printed.setdefault(best, []).append(item)
        for i, items in printed.items():
            await readers[i].done(items)


async def _follow(readers: Sequence[_Reader], budget: _Budget, idle_limit: float | None) -> None:
    block = _FOLLOW_BLOCK_MS if idle_limit is None else max(1, min(_FOLLOW_BLOCK_MS, int(idle_limit * 1000)))
    tasks: dict[asyncio.Task[list[Item]], _Reader] = {}
    last_seen = time.monotonic()
    try:
        while not budget.full:
            busy = set(tasks.values())
            for reader in readers:
                if reader not in busy:
                    tasks[asyncio.ensure_future(reader.fetch(block))] = reader
            remaining = None if idle_limit is None else idle_limit - (time.monotonic() - last_seen)
            if remaining is not None and remaining <= 0:
                return
            finished, _ = await asyncio.wait(tasks, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            batch = [(item, tasks[task]) for task in finished for item in task.result()]
            for task in finished:
                del tasks[task]
            if batch:
                last_seen = time.monotonic()
            await _emit_sorted(batch, budget)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _emit_sorted(batch: list[tuple[Item, _Reader]], budget: _Budget) -> None:
    printed: dict[_Reader, list[Item]] = {}
    for item, reader in sorted(batch, key=lambda pair: pair[0].order):
        if budget.full:
            break
        budget.take(item)
        printed.setdefault(reader, []).append(item)
    for reader, items in printed.items():
        await reader.done(items)


# -- formatting ----------------------------------------------------------------------------------------


def format_item(item: Item, *, as_json: bool, dead: bool) -> tuple[bytes | str | None, str | None]:
    """(stdout line, stderr warning) for one entry; a line only for an envelope or a dead letter."""
    raw = item.fields.get(b"data")
    if dead:
        return _dead_line(item, raw, as_json=as_json), None
    try:
        envelope = decode(raw)
    except DecodeError as exc:
        return None, f"skipped entry {item.entry_id} of shard {item.shard}: {exc}"
    if as_json and raw is not None:
        return raw, None
    payload = orjson.dumps(envelope.payload.model_dump(mode="json", exclude_none=True)).decode()
    text = (
        f"{envelope.ts.isoformat()} s{item.shard} {item.entry_id} {envelope.kind.value}/{envelope.type.value} "
        f"{envelope.agent_id}@{envelope.group_id} {_cut(payload, 160)}"
    )
    return text, None


def _dead_line(item: Item, raw: bytes | None, *, as_json: bool) -> bytes | str:
    info = {
        key.decode(errors="replace"): value.decode(errors="replace") for key, value in item.fields.items()
    }
    info.pop("data", None)
    if as_json:
        try:
            data: object = orjson.loads(raw) if raw is not None else None
        except orjson.JSONDecodeError:
            data = raw.decode(errors="replace") if raw is not None else None
        return orjson.dumps({"dead_id": item.entry_id, "shard": item.shard, **info, "data": data})
    where = f"{info.get('stream', '?')} {info.get('entry_id', '?')}"
    return (
        f"s{item.shard} {item.entry_id} dead from {where} after {info.get('deliveries', '?')} deliveries: "
        f"{info.get('reason', '?')}"
    )


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- the command ---------------------------------------------------------------------------------------


def _streams(keys: Keys, stream: str, group_id: str | None) -> list[tuple[int, str]]:
    if stream.startswith("inbox:"):
        agent = stream.removeprefix("inbox:")
        if not agent:
            raise click.BadParameter("inbox:AGENT needs an agent id", param_hint="--stream")
        shards = [keys.shard_of(group_id)] if group_id else list(keys.all_shards())
        return [(shard, keys.inbox(shard, agent)) for shard in shards]
    try:
        kind = StreamKind(stream)
    except ValueError:
        choices = ", ".join(k.value for k in StreamKind)
        raise click.BadParameter(
            f"{stream!r} is not one of {choices} or inbox:AGENT", param_hint="--stream"
        ) from None
    return [(shard, keys.stream(shard, kind)) for shard in keys.all_shards()]


async def _tail(
    settings: Settings, stream: str, group_id: str | None, options: TailOptions, as_json: bool
) -> int:
    client = await connect(settings)
    try:
        keys = await open_namespace(client, settings.namespace, settings.shards)
        streams = _streams(keys, stream, group_id)
        dead = stream == StreamKind.DEAD.value

        def emit(item: Item) -> bool:
            line, warning = format_item(item, as_json=as_json, dead=dead)
            if warning:
                click.echo(warning, err=True)
            if line is None:
                return False
            click.echo(line)
            return True

        return await tail_streams(client, streams, options, emit)
    finally:
        await client.aclose()


@click.command("tail")
@click.option(
    "--stream",
    default="signals",
    show_default=True,
    help="signals, events, findings, dead, tasks, or inbox:AGENT (every shard; --group-id picks one).",
)
@click.option("--group", default=None, help="Read with this consumer group (created at --from) and ack.")
@click.option(
    "--group-id", default=None, help="For inbox:AGENT: the agent's task group, to read its shard only."
)
@click.option(
    "--from", "start", default="$", show_default=True, help="Start after this entry id; 0 = all, $ = new."
)
@click.option("--count", type=click.IntRange(min=1), default=None, help="Stop after N entries.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Stop after S seconds without entries.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print each envelope's JSON exactly as stored, one per line."
)
@redis_options
def tail(
    *,
    settings: Settings,
    stream: str,
    group: str | None,
    group_id: str | None,
    start: str,
    count: int | None,
    timeout: float | None,
    as_json: bool,
) -> None:
    """Print the entries of a stream across all shards, oldest first, then follow.

    Without --count or --timeout it follows until Ctrl-C (exit status 130). Entries that are not valid
    envelopes are reported on stderr and skipped. With --json, dead letters print as one JSON object
    each: the dead-letter fields plus the original data (parsed when it is JSON).
    """
    dead = stream == StreamKind.DEAD.value
    options = TailOptions(start=start, count=count, timeout=timeout, group=group, all_fields=dead)
    try:
        asyncio.run(_tail(settings, stream, group_id, options, as_json))
    except BrokenPipeError:
        return
    except BusError as exc:
        raise click.ClickException(str(exc)) from None
