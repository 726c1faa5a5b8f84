"""Reading the entries of one stream kind across every shard, in order, and following them.

:func:`tail_streams` is what ``subagent-bus tail`` (:mod:`bus.tail_cli`) prints from. Without a timeout
it outlives a lost connection: it says so once and asks again, with backoff, until the server answers,
then resumes where it stopped.

Order: the backlog (``--from`` an id) is merged across shards by entry id, which starts with the
millisecond time the server assigned, so it comes out in time order; shards on different cluster nodes
have their own clocks, so "time" is each node's. Once caught up, each batch of new entries is printed in
id order as it arrives.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import click
import orjson

from bus.connection import Client, as_text, translated
from bus.consumer import Ack, Consumer, Delivery
from bus.errors import BusError, CommandFailed, ConnectionFailed, PermissionDenied
from bus.keys import entry_order
from bus.payloads import EnvelopeType
from bus.stream_replies import stream_entries
from bus.waits import backoff

__all__ = ["Item", "TailOptions", "tail_streams"]

_BATCH = 100
_FOLLOW_BLOCK_MS = 1000
_RELEASE_MAX = 4 * _BATCH  # a consumer holds at most the batch in hand and one whose read was cut short
_RELEASED_IDLE_MS = 86_400_000  # idle past any reclaim threshold, not past the server's clock
_RELEASE_TIMEOUT_S = 5.0
T = TypeVar("T")


def _stderr(message: str) -> None:
    click.echo(f"subagent-bus tail: {message}", err=True)


@dataclass(frozen=True, slots=True)
class Item:
    """One stream entry as read: its shard, id and raw fields."""

    shard: int
    entry_id: str
    fields: Mapping[bytes, bytes]

    @property
    def order(self) -> tuple[int, int, int]:
        """Merge key across shards: the id's milliseconds and sequence, then the shard."""
        return (*entry_order(self.entry_id), self.shard)


@dataclass(frozen=True, slots=True)
class TailOptions:
    """What to read: ``start`` is an entry id to read after (``0``: everything, ``$``: only new)."""

    start: str = "$"
    count: int | None = None
    timeout: float | None = None
    group: str | None = None
    consumer: str | None = None
    """With ``group``: the consumer name (default ``tail-<host>-<pid>``, one per process)."""
    all_fields: bool = False
    """With ``group``: fetch every field of each entry, not only ``data`` (the dead-letter streams)."""


class _Link:
    """How the readers meet a lost connection. A follower says so once on stderr and tries each call again
    with backoff until the server answers; otherwise the error is the command's."""

    def __init__(self, retry: bool, log: Callable[[str], None]) -> None:
        self.retry, self.log = retry, log
        self._failing: set[int] = set()
        self._down = False

    async def call(self, who: int, op: Callable[[], Awaitable[T]]) -> T:
        delays = backoff()
        while True:
            try:
                result = await op()
            except ConnectionFailed as exc:
                if not self.retry:
                    raise
                if who not in self._failing and not self._down:
                    self.log(f"lost the server: {exc}; retrying until it answers")
                    self._down = True
                self._failing.add(who)
                await asyncio.sleep(next(delays))
                continue
            if who in self._failing:
                self._failing.discard(who)
                if self._down:
                    self.log("reconnected to the server; resuming where the tail stopped")
                    self._down = False
            return result


class _Cursor:
    """A plain reader: XREAD from a cursor, nothing stored in Redis. Every call goes through the link; the
    cursor moves only with a reply, so a read whose reply was lost is simply made again."""

    def __init__(self, link: _Link, client: Client, shard: int, stream: str, cursor: str) -> None:
        self.link, self.client, self.shard, self.stream, self.cursor = link, client, shard, stream, cursor

    async def start(self) -> None:
        await self.link.call(self.shard, self._start)

    async def fetch(self, block_ms: int | None) -> list[Item]:
        return await self.link.call(self.shard, lambda: self._fetch(block_ms))

    async def done(self, items: Sequence[Item]) -> None:
        return None

    async def _start(self) -> None:
        if self.cursor == "$":
            with translated():
                last = stream_entries(
                    [[self.stream, await self.client.xrevrange(self.stream, "+", "-", count=1)]]
                )
            self.cursor = as_text(last[0][0]) if last else "0-0"

    async def _fetch(self, block_ms: int | None) -> list[Item]:
        with translated():
            reply = await self.client.xread({self.stream: self.cursor}, count=_BATCH, block=block_ms)
        items = [Item(self.shard, as_text(entry_id), fields) for entry_id, fields in stream_entries(reply)]
        if items:
            self.cursor = items[-1].entry_id
        return items


class _Grouped(_Cursor):
    """A reader with its own consumer group: entries are acknowledged once printed, before the next read,
    so after a lost connection this consumer's pending entries are exactly those a lost reply delivered:
    a new Consumer object reads them first. ``cursor`` is only where the group starts."""

    def __init__(self, link: _Link, client: Client, shard: int, stream: str, options: TailOptions) -> None:
        super().__init__(link, client, shard, stream, options.start)
        self.group, self.all_fields = options.group or "", options.all_fields
        self.name = options.consumer or f"tail-{socket.gethostname()}-{os.getpid()}"
        self.consumer = self._consumer()
        self.last_id: str | None = None

    def _consumer(self) -> Consumer:
        return Consumer(self.client, self.stream, self.group, self.name, batch=_BATCH, block_ms=0)

    async def done(self, items: Sequence[Item]) -> None:
        if items:
            await self.link.call(self.shard, lambda: self._done(items))

    async def _start(self) -> None:
        await self.consumer.ensure_group(self.cursor)
        if self.cursor == "$":  # where the group is: a group made anew after a loss starts there
            with contextlib.suppress(PermissionDenied):  # the adapter's and launcher's users: "0" then
                with translated():
                    groups = await self.client.xinfo_groups(self.stream)
                names = {as_text(g["name"]): g["last-delivered-id"] for g in groups}
                self.cursor = as_text(names.get(self.group, b"$"))

    async def _fetch(self, block_ms: int | None) -> list[Item]:
        try:
            return await self._read(block_ms)
        except ConnectionFailed:
            self.consumer = self._consumer()
            raise

    async def _read(self, block_ms: int | None) -> list[Item]:
        self.consumer.block_ms = block_ms or 0
        try:
            deliveries = await self.consumer.read()
        except CommandFailed as exc:
            if "NOGROUP" not in str(exc):
                raise
            # The server lost the group (restarted without its data, or it was destroyed): a new one
            # starts after the last entry printed, or where the group was when this tail started ("$"
            # when that is not known would skip what was written since a restart: "0").
            await self.consumer.ensure_group(self.last_id or ("0" if self.cursor == "$" else self.cursor))
            deliveries = await self.consumer.read()
        if not self.all_fields:
            return [
                Item(self.shard, d.entry_id, {b"data": d.raw} if d.raw is not None else {})
                for d in deliveries
            ]
        pipe = self.client.pipeline(transaction=False)
        for d in deliveries:
            pipe.xrange(self.stream, d.entry_id, d.entry_id)
        with translated():
            replies = await pipe.execute() if deliveries else []
        fields = {as_text(reply[0][0]): reply[0][1] for reply in replies if reply}
        return [Item(self.shard, d.entry_id, fields.get(d.entry_id, {})) for d in deliveries]

    async def _done(self, items: Sequence[Item]) -> None:
        await self.consumer.settle(
            [(Delivery(i.entry_id, None, None, None, 1), Ack.ACK, None) for i in items]
        )
        self.last_id = items[-1].entry_id

    async def release(self) -> None:
        """Hand back what this consumer was delivered and did not print (a batch past ``--count``, a read
        cut short): made long idle, it is what the group's next reader claims first, in order."""
        with translated():
            held = await self.client.xpending_range(
                self.stream, self.group, "-", "+", _RELEASE_MAX, consumername=self.name
            )
            ids: list[Any] = [entry["message_id"] for entry in held]
            if ids:
                await self.client.xclaim(
                    self.stream, self.group, self.name, 0, ids, idle=_RELEASED_IDLE_MS, justid=True
                )


_Reader = _Cursor | _Grouped


async def tail_streams(
    client: Client,
    streams: Sequence[tuple[int, str]],
    options: TailOptions,
    emit: Callable[[Item], bool],
    log: Callable[[str], None] = _stderr,
) -> int:
    """Read ``streams`` (shard, key) and pass each entry to ``emit`` (which says whether it counted);
    returns the number counted. Stops at ``options.count``, after ``options.timeout`` seconds without
    entries, or never. Without a timeout a lost connection is reported to ``log`` and retried; with one
    it raises :class:`~bus.errors.ConnectionFailed`."""
    link = _Link(options.timeout is None, log)
    readers: list[_Reader] = [
        _Grouped(link, client, shard, key, options)
        if options.group
        else _Cursor(link, client, shard, key, options.start)
        for shard, key in streams
    ]
    for reader in readers:
        await reader.start()
    budget = _Budget(options.count, emit)
    try:
        await _catch_up(readers, budget)
        if not budget.full:
            await _follow(readers, budget, options.timeout)
    finally:
        with contextlib.suppress(BusError, TimeoutError):
            async with asyncio.timeout(_RELEASE_TIMEOUT_S):
                await asyncio.gather(*(r.release() for r in readers if isinstance(r, _Grouped)))
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


async def _all(calls: list[Coroutine[Any, Any, list[Item]]]) -> list[list[Item]]:
    """The results of ``calls`` run together; the first error stops the others (left running, they would
    meet the connection closed under them, and say the server was lost)."""
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


async def _catch_up(readers: Sequence[_Reader], budget: _Budget) -> None:
    """Merge the backlogs by entry id: an entry is printed only when every shard that may still hold an
    older one has shown its next entry."""
    buffers: dict[int, deque[Item]] = {i: deque() for i in range(len(readers))}
    live = set(buffers)
    while live and not budget.full:
        empty = [i for i in live if not buffers[i]]
        batches = await _all([readers[i].fetch(None) for i in empty])
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
            if any(not _tick(item) for item, _ in batch):
                last_seen = time.monotonic()
            await _emit_sorted(batch, budget)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _tick(item: Item) -> bool:
    """Whether an entry is a coordinator's ``TICK``: one lands on every shard's signals stream every few
    seconds, so ``--timeout`` (seconds without entries) would never come on a running bus if it counted."""
    data = item.fields.get(b"data")
    if not data or b'"TICK"' not in data:
        return False
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return False
    return isinstance(value, dict) and value.get("type") == EnvelopeType.TICK.value


async def _emit_sorted(batch: list[tuple[Item, _Reader]], budget: _Budget) -> None:
    printed: dict[_Reader, list[Item]] = {}
    for item, reader in sorted(batch, key=lambda pair: pair[0].order):
        if budget.full:
            break
        budget.take(item)
        printed.setdefault(reader, []).append(item)
    for reader, items in printed.items():
        await reader.done(items)
