"""Consuming a stream with a consumer group: read, reclaim, acknowledge, dead-letter.

Delivery is at least once. An entry leaves the group's pending list only through :meth:`Consumer.settle`:
acknowledged, or written to the dead-letter stream and acknowledged in the same transaction. A consumer
that dies with entries in hand loses nothing: any other consumer of the group claims them once they have
been idle for ``reclaim_idle_ms`` (``XAUTOCLAIM``), and a restarted consumer with the same name first
re-reads its own pending entries. The replies of those reads and claims, in each shape Redis gives
them, are taken apart by :mod:`bus.stream_replies`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from enum import StrEnum
from typing import Any, Final, NamedTuple

import redis.asyncio
from redis.crc import key_slot

from bus.connection import Client, as_text, check_block, translated
from bus.display import field_names
from bus.envelope import MAX_ENVELOPE_BYTES, Envelope, decode
from bus.errors import CommandFailed, ConfigError, ConnectionFailed, DecodeError
from bus.keys import dead_stream_for
from bus.stream_replies import Entry, parse_autoclaim, stream_entries

__all__ = [
    "DELETED_REASON",
    "Ack",
    "Consumer",
    "Delivery",
    "Handler",
    "dead_letter_fields",
]

log = logging.getLogger(__name__)

DELETED_REASON: Final = "deleted before processing"
_MAX_REASON: Final = 2000
_MAX_DEAD_FIELDS: Final = 100
_MAX_DEAD_NAME: Final = 256
_MAX_DEAD_BYTES: Final = MAX_ENVELOPE_BYTES
"""The most bytes of a dead letter's ``data`` and other fields together. A larger entry is no envelope
(over the limit) and keeps its first bytes: copied whole, a foreign entry of hundreds of MiB would make a
commit the server refuses, at every retry (a poison entry blocking its shard)."""
"""Fields of a dead entry kept in its dead letter (see :func:`dead_letter_fields`)."""


class Ack(StrEnum):
    """What became of a delivery."""

    ACK = "ack"
    """Done: acknowledged."""
    RETRY = "retry"
    """Left pending; redelivered once it has been idle for ``reclaim_idle_ms``."""
    DEAD = "dead"
    """Written to the dead-letter stream with a reason, then acknowledged."""


class Delivery(NamedTuple):
    """One entry as this consumer received it.

    ``error`` is set when the entry must not be processed: it is not a valid envelope (``envelope`` is
    None), it was deleted before anyone processed it, or it has been delivered more than
    ``max_deliveries`` times (``envelope`` is kept). Such a delivery is to be dead-lettered with
    ``error`` as the reason. ``deliveries`` counts deliveries to the group, this one included
    (0 when unknown: the entry was deleted).
    """

    entry_id: str
    raw: bytes | None
    envelope: Envelope | None
    error: str | None
    deliveries: int

    @property
    def ok(self) -> bool:
        return self.error is None


Handler = Callable[[Delivery], Awaitable[Ack | tuple[Ack, str]]]
"""What to do with a delivery: an :class:`Ack`, or ``(Ack.DEAD, reason)`` to dead-letter it saying why."""
_ACKS: Final = frozenset(ack.value for ack in Ack)
# Module-level aliases: reading an enum member through its class costs ~100 ns, paid per message.
_ACK: Final = Ack.ACK
_RETRY: Final = Ack.RETRY
_DEAD: Final = Ack.DEAD


def dead_letter_fields(
    *,
    stream: str,
    entry_id: str,
    raw: bytes | None,
    reason: str,
    deliveries: int,
    others: Sequence[tuple[bytes, bytes]] = (),
) -> dict[str | bytes, bytes | str]:
    """The fields of a dead-letter entry: the original ``data`` bytes untouched, the entry's other fields
    (``others``: name and value) as ``field:<name>`` (a name given again as ``field:<name>#2``, ...), and
    why it died. Of an entry with thousands of fields (hostile: a script cannot write them in one command)
    the first :data:`_MAX_DEAD_FIELDS` are kept and ``fields_dropped`` counts the rest; of one over
    :data:`_MAX_DEAD_BYTES` (names and values) the first bytes are kept, ``data_bytes`` is the length of
    its ``data``, and ``fields_cut`` counts the other fields cut short; a name over
    :data:`_MAX_DEAD_NAME` bytes keeps its start and a digest of the whole."""
    fields: dict[str | bytes, bytes | str] = {}
    room = _MAX_DEAD_BYTES
    if raw is not None:
        fields["data"] = raw if len(raw) <= room else raw[:room]
        if len(raw) > room:
            fields["data_bytes"] = str(len(raw))
        room -= len(fields["data"])
    cut = 0
    for name, value in others[:_MAX_DEAD_FIELDS]:
        short = _dead_name(name)
        key, again = b"field:" + short, 1
        while key in fields:
            again += 1
            key = b"field:%s#%d" % (short, again)
        room = max(room - len(key), 0)
        fields[key] = value if len(value) <= room else value[:room]
        cut += short is not name or len(value) > room
        room -= len(fields[key])
    if cut:
        fields["fields_cut"] = str(cut)
    if len(others) > _MAX_DEAD_FIELDS:
        fields["fields_dropped"] = str(len(others) - _MAX_DEAD_FIELDS)
    fields["reason"] = reason[:_MAX_REASON]
    fields["stream"] = stream
    fields["entry_id"] = entry_id
    fields["deliveries"] = str(deliveries)
    return fields


def _dead_name(name: bytes) -> bytes:
    """A field's name as its dead letter keeps it: a long one, its start and a digest of the whole (names
    stay apart, and take little room)."""
    if len(name) <= _MAX_DEAD_NAME:
        return name
    return name[: _MAX_DEAD_NAME - 17] + b"~" + hashlib.sha256(name).hexdigest()[:16].encode()


class Consumer:
    """One named consumer of ``group`` on ``stream``.

    :meth:`read` returns, in this order: the consumer's own pending entries (after a restart), entries
    of other consumers idle for ``reclaim_idle_ms`` (checked every ``reclaim_idle_ms / 2``), then new
    entries, waiting up to ``block_ms`` for them (below the client's socket timeout, or it is refused).
    """

    def __init__(
        self,
        client: Client,
        stream: str,
        group: str,
        name: str,
        *,
        batch: int = 100,
        block_ms: int = 1000,
        reclaim_idle_ms: int = 30_000,
        max_deliveries: int = 5,
        dead_stream: str | None = None,
    ) -> None:
        if batch < 1 or block_ms < 0 or reclaim_idle_ms < 0 or max_deliveries < 1:
            raise ConfigError("batch and max_deliveries must be >= 1, block_ms and reclaim_idle_ms >= 0")
        check_block(client, block_ms)
        if not (stream and group and name):
            raise ConfigError("a consumer needs a stream, a group and a name")
        self.client = client
        self.stream = stream
        self.group = group
        self.name = name
        self.batch = batch
        self.block_ms = block_ms
        self.reclaim_idle_ms = reclaim_idle_ms
        self.max_deliveries = max_deliveries
        self.dead_stream = dead_stream or dead_stream_for(stream)
        if isinstance(client, redis.asyncio.RedisCluster) and key_slot(self.dead_stream.encode()) != key_slot(
            stream.encode()
        ):
            raise ConfigError(f"dead-letter stream {self.dead_stream} is not in the hash slot of {stream}")
        self._own_cursor: str | None = "0"
        self._claim_cursor = "0-0"
        self._next_reclaim = 0.0

    async def ensure_group(self, start_id: str = "0") -> None:
        """Create the group at ``start_id`` (and the stream if missing); an existing group is kept."""
        try:
            with translated():
                await self.client.xgroup_create(self.stream, self.group, id=start_id, mkstream=True)
        except CommandFailed as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    async def read(self) -> list[Delivery]:
        """The next batch: own pending entries, then reclaimed ones, then new ones (may be empty)."""
        return await self._read(self.block_ms or None)

    async def settle(self, decisions: Sequence[tuple[Delivery, Ack, str | None]]) -> None:
        """Apply decisions in one round trip: ACK acknowledges, RETRY leaves the entry pending, DEAD
        writes it to the dead-letter stream (reason: the given one, else the delivery's error) and
        acknowledges it in the same transaction. Anything else than an :class:`Ack` value is a
        ``ConfigError``, before anything is settled."""
        done: list[bytes] = []
        dead: list[dict[str | bytes, bytes | str]] = []
        for delivery, ack, reason in decisions:
            if ack is _ACK:
                done.append(delivery.entry_id.encode())  # bytes: the client's fastest argument type
                continue
            if ack == _RETRY:
                continue
            if ack != _DEAD:  # acknowledged, a typo would drop the entry without a word
                raise ConfigError(f"{ack!r} is no decision for entry {delivery.entry_id}: give an Ack")
            done.append(delivery.entry_id.encode())
            dead.append(self._dead_fields(delivery, reason or delivery.error or "rejected by the handler"))
        if not done:
            return
        with translated():
            if not dead:
                await self.client.xack(self.stream, self.group, *done)
                return
            pipe = self.client.pipeline(transaction=True)
            for fields in dead:
                pipe.xadd(self.dead_stream, fields)  # type: ignore[arg-type]
            pipe.xack(self.stream, self.group, *done)
            await pipe.execute()

    async def run(self, handler: Handler, *, burst: bool = False, stop: asyncio.Event | None = None) -> int:
        """Read, handle and settle until ``stop`` is set; returns the number of entries finished
        (acknowledged or dead-lettered).

        Deliveries with an ``error`` are dead-lettered without calling ``handler``. A handler that
        raises counts as RETRY; a RETRY on the ``max_deliveries``-th delivery dead-letters the entry.
        With ``burst`` it returns once the group has nothing left: no new entries and nothing pending
        (it waits for other consumers' pending entries to be acknowledged or reclaimed). On ``stop`` the
        batch in hand is finished and settled first; a blocked read returns within ``block_ms``.
        """
        finished = 0
        waiting = False
        while stop is None or not stop.is_set():
            block = self._burst_block(waiting) if burst else (self.block_ms or None)
            deliveries = await self._read(block)
            if deliveries:
                finished += await self._process(deliveries, handler)
                waiting = False
            elif burst:
                if await self.pending_count() == 0:
                    return finished
                waiting = True
                self._next_reclaim = 0.0
        return finished

    async def hold(self, delivery: Delivery) -> None:
        """Make a delivery this consumer is still working on look fresh (``XCLAIM`` to itself, idle 0), so
        that no reader of the group takes it for one a dead consumer left."""
        with translated():
            await self.client.xclaim(self.stream, self.group, self.name, 0, [delivery.entry_id], justid=True)

    async def pending_count(self) -> int:
        """Entries delivered to some consumer of the group and not yet settled."""
        with translated():
            summary = await self.client.xpending(self.stream, self.group)
        return int(summary["pending"])

    # -- reading ---------------------------------------------------------------------------------------

    async def _read(self, block_ms: int | None) -> list[Delivery]:
        try:
            if self._own_cursor is not None:
                own = await self._read_own(self._own_cursor)
                if own:
                    return own
            if time.monotonic() >= self._next_reclaim:
                claimed = await self._reclaim()
                if claimed:
                    return claimed
            with translated():
                reply = await self.client.xreadgroup(
                    self.group, self.name, {self.stream: ">"}, count=self.batch, block=block_ms
                )
        except ConnectionFailed:
            # A lost reply (of a read or a claim) may have given this consumer entries: the next read
            # takes them from its pending list.
            self._own_cursor = "0"
            raise
        return [self.delivery(entry_id, fields, 1) for entry_id, fields in stream_entries(reply)]

    async def _read_own(self, cursor: str) -> list[Delivery]:
        with translated():
            reply = await self.client.xreadgroup(
                self.group, self.name, {self.stream: cursor}, count=self.batch
            )
        entries = [(as_text(entry_id), fields) for entry_id, fields in stream_entries(reply)]
        self._own_cursor = entries[-1][0] if entries else None
        return await self._counted(entries)

    async def _reclaim(self) -> list[Delivery]:
        with translated():
            reply = await self.client.xautoclaim(
                self.stream, self.group, self.name, self.reclaim_idle_ms, self._claim_cursor, count=self.batch
            )
        cursor, entries, deleted, unnamed = parse_autoclaim(reply)
        self._claim_cursor = cursor
        if cursor == "0-0":
            self._next_reclaim = time.monotonic() + max(self.reclaim_idle_ms / 2000, 0.01)
        if unnamed:
            self._own_cursor = "0"  # Redis 6.2: the deleted ones show up there, by id
        gone = [Delivery(entry_id, None, None, DELETED_REASON, 0) for entry_id in deleted]
        return gone + await self._counted(entries)

    async def _counted(self, entries: list[Entry]) -> list[Delivery]:
        """Deliveries of re-read or claimed entries, with their delivery counts from the pending list."""
        if not entries:
            return []
        pipe = self.client.pipeline(transaction=False)
        for entry_id, _ in entries:
            pipe.xpending_range(self.stream, self.group, min=entry_id, max=entry_id, count=1)
        with translated():
            replies = await pipe.execute()
        counts = [int(reply[0]["times_delivered"]) if reply else 1 for reply in replies]
        return [
            self.delivery(entry_id, fields, count)
            for (entry_id, fields), count in zip(entries, counts, strict=True)
        ]

    def delivery(self, entry_id: bytes | str, fields: Mapping[Any, Any], deliveries: int) -> Delivery:
        """An entry read from the stream (its fields as the server sent them) as a :class:`Delivery`:
        decoded, or with the reason it is to be dead-lettered."""
        entry = entry_id.decode() if type(entry_id) is bytes else str(entry_id)
        raw = fields.get(b"data")
        # The common case in one step; anything unusual takes the checked path, which says why.
        if type(raw) is bytes and len(raw) <= MAX_ENVELOPE_BYTES and deliveries <= self.max_deliveries:
            try:
                envelope = decode(raw)
                # tuple.__new__ builds the NamedTuple in a third of the time its __new__ takes
                return tuple.__new__(Delivery, (entry, raw, envelope, None, deliveries))
            except DecodeError:
                pass
        return self._checked_delivery(entry, fields, deliveries)

    def _checked_delivery(self, entry: str, fields: Mapping[Any, Any], deliveries: int) -> Delivery:
        if not fields:
            return Delivery(entry, None, None, DELETED_REASON, deliveries)
        raw = fields.get(b"data")
        if raw is None:
            raw = fields.get("data")
        if isinstance(raw, str):
            raw = raw.encode()
        try:
            envelope: Envelope | None = decode(raw)
        except DecodeError as exc:
            error = f"{exc} (fields: {field_names(fields)})" if raw is None else str(exc)
            return Delivery(entry, raw, None, error, deliveries)
        if deliveries > self.max_deliveries:
            error = f"delivered {deliveries} times, over the limit of {self.max_deliveries}"
            return Delivery(entry, raw, envelope, error, deliveries)
        return Delivery(entry, raw, envelope, None, deliveries)

    def _burst_block(self, waiting: bool) -> int | None:
        """Burst reads never block, except while other consumers' entries wait to become idle."""
        return max(1, min(self.block_ms or self.reclaim_idle_ms, self.reclaim_idle_ms)) if waiting else None

    # -- handling --------------------------------------------------------------------------------------

    async def _process(self, deliveries: list[Delivery], handler: Handler) -> int:
        decisions: list[tuple[Delivery, Ack, str | None]] = []
        for delivery in deliveries:
            if delivery.error is not None:
                decisions.append((delivery, _DEAD, delivery.error))
                continue
            try:
                outcome: object = await handler(delivery)
            except Exception as exc:  # any handler failure is a retry, never a crash of the loop
                log.warning("handler failed on %s %s: %r", self.stream, delivery.entry_id, exc)
                outcome = exc
            decisions.append((delivery, _ACK, None) if outcome is _ACK else self._decision(delivery, outcome))
        await self.settle(decisions)
        return sum(1 for _, ack, _ in decisions if ack != _RETRY)

    def _decision(self, delivery: Delivery, outcome: object) -> tuple[Delivery, Ack, str | None]:
        """The decision for a handler's outcome other than ACK: an Ack value, or the exception it raised."""
        reason: str | None = None
        if isinstance(outcome, Exception):
            ack, reason = _RETRY, f"handler failed: {type(outcome).__name__}: {outcome}"
        elif isinstance(outcome, str) and outcome in _ACKS:
            ack = Ack(outcome)
        elif isinstance(outcome, tuple) and len(outcome) == 2 and outcome[0] == _DEAD:
            ack, reason = _DEAD, str(outcome[1])
        else:
            ack, reason = _RETRY, f"handler returned {outcome!r}, not an Ack"
        if ack == _RETRY and delivery.deliveries >= self.max_deliveries:
            why = reason or "the handler asked for a retry"
            return (
                delivery,
                _DEAD,
                f"{why} (delivery {delivery.deliveries} of at most {self.max_deliveries})",
            )
        return delivery, ack, reason

    def _dead_fields(self, delivery: Delivery, reason: str) -> dict[str | bytes, bytes | str]:
        return dead_letter_fields(
            stream=self.stream,
            entry_id=delivery.entry_id,
            raw=delivery.raw,
            reason=reason,
            deliveries=delivery.deliveries,
        )
