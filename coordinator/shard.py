"""One shard as its coordinator sees it: what it holds of the shard, and the reads and commits on the
shard's signals stream.

A shard's entries are read with XREADGROUP on the shard's own connection (:class:`bus.wire.Pipe`), and a
batch is committed by one script (:mod:`coordinator.commit`). A following loop sends its next read in
the same write as the commit, right behind it; what that read returns is kept (``ahead``) for the next
step. Whenever the entries delivered to this process may differ from what it saw (a take-over, a commit
whose reply was lost), it reads its own pending entries first (``need_pending``), so every entry is
applied in stream order and none is skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from bus import wire
from bus.connection import Client, translated
from bus.envelope import decode
from bus.errors import DecodeError
from bus.events import Tick
from bus.keys import ConsumerGroup
from coordinator.batch import Entry, Fields, entries_of, tick_refused
from coordinator.commit import Commit, CommitResult, parse_result, refusals
from coordinator.rules import Target
from coordinator.state import GroupState

__all__ = ["GROUP", "Shard", "read_head"]

GROUP = ConsumerGroup.COORDINATOR.value
"""The consumer group every coordinator process joins on every shard's signals stream."""
_GROUP = GROUP.encode()


_TICKS: Final = wire.Script(
    """
local rows = redis.call('XREVRANGE', KEYS[1], ARGV[1], '-', 'COUNT', ARGV[2])
local reply = {#rows, #rows > 0 and rows[#rows][1] or ''}
for _, row in ipairs(rows) do
  local fields = row[2]
  for i = 1, #fields, 2 do
    if fields[i] == 'data' then
      if string.find(fields[i + 1], '"TICK"', 1, true) then
        reply[#reply + 1] = row[1]
        reply[#reply + 1] = fields[i + 1]
      end
      break
    end
  end
end
return reply
"""
)
"""``XREVRANGE <stream> <end> - COUNT <n>`` that returns, of the entries it read, only those whose
``data`` may hold a tick: how many it read, the id of the last, then id and data of each candidate.
Filtered in the server: a take-over looks for the last tick among up to ten thousand entries, and
shipping them all here to skip nearly every one was most of the take-over's time."""


def read_head(consumer: str, batch: int) -> tuple[bytes, ...]:
    """The start of every read of ``consumer``'s shards: ``XREADGROUP GROUP coordinator <consumer>
    COUNT <batch>`` (packed once, not per read)."""
    return (b"XREADGROUP", b"GROUP", _GROUP, consumer.encode(), b"COUNT", b"%d" % batch)


@dataclass
class Shard:
    """What a coordinator process holds of one shard, and its reads and commits on the signals stream."""

    index: int
    signals: str
    """The key of the shard's signals stream."""
    dead: str
    targets: dict[Target, str]
    """The stream key of each target but the inbox (whose key depends on the agent)."""
    pipe: wire.Pipe
    """The shard's reads and commits, on one connection that the shard's loop holds."""
    head: tuple[bytes, ...]
    """The start of each read (:func:`read_head`)."""
    token: str = ""
    owned: bool = False
    need_pending: bool = True
    version: int = 0
    """The shard's commit counter that ``groups`` correspond to (see :mod:`coordinator.commit`)."""
    groups: dict[str, GroupState] = field(default_factory=dict)
    tombstones: dict[str, frozenset[str]] = field(default_factory=dict)
    """The shard's retired groups (:mod:`coordinator.tombstones`), loaded with ``groups``."""
    last_tick: float = 0.0
    ticked_at: datetime | None = None
    """The ``now`` of the last tick applied to the shard (:attr:`coordinator.batch.Batch.ticked_at`)."""
    ahead: list[Entry] | None = None
    """Entries read behind the last commit, in the same write (see :meth:`commit`): the next batch, or
    ``[]`` when none came within the block time; None when nothing was read ahead."""
    rest: list[Entry] | None = None
    """The entries of the last read that :meth:`take` left for the next step (pending here already, in
    stream order after the batch taken): what the next :meth:`read` returns, also where it would read the
    pending list (read again, each would count a delivery more, which dead-letters after a few). A
    take-over drops them, to read the pending list whole."""
    failures: int = 0
    """Steps failed in a row (the server unreachable, or a commit refused by its checks): the first of an
    outage is logged, and one a minute, not every retry."""
    shed: bool = False
    """To be given back to balance the load, which the shard's own loop does between two steps."""
    exhausted: bool = False
    """The signals stream holds the last possible entry id (said once): no tick can be added to it."""
    refused: bool = False
    """The last commit was refused by its checks (a key of another type, a missing permission): not the
    entries' doing, so until a commit succeeds their deliveries do not count toward dead-lettering them."""

    async def read(self, block_ms: int | None) -> list[Entry]:
        """The next batch: what :meth:`take` left of the last read, else own pending entries when they
        may be there, else what was read ahead, else new entries (waiting up to ``block_ms``; None: not at
        all)."""
        # through bus.wire, as the commit: at a batch or two per step (a steady trickle of signals),
        # redis-py's packing and reply callbacks were a third of the step
        rest, self.rest = self.rest, None
        if rest:
            return rest
        ahead, self.ahead = self.ahead, None
        if self.need_pending:  # what was read ahead is pending too, and comes again in order
            (reply,) = await self.pipe.execute([self._read_command(None, b"0")])
            entries = entries_of(reply)
            if entries:
                return entries
            self.need_pending = False
        elif ahead is not None:
            return ahead
        (reply,) = await self.pipe.execute([self._read_command(block_ms, b">")])
        return entries_of(reply)

    def take(self, entries: list[Entry], budget: int) -> list[Entry]:
        """The head of ``entries`` that holds at most ``budget`` bytes (one entry at least); the rest is
        kept (:attr:`rest`) for the next step."""
        total = 0
        for _, data in entries:
            total += len(data) if data.__class__ is bytes else _size(data)
        if total <= budget:
            return entries
        total = 0
        for index, (_, data) in enumerate(entries):
            total += _size(data)
            if total > budget and index:
                self.rest = entries[index:]
                return entries[:index]
        return entries

    def _read_command(self, block_ms: int | None, start: bytes) -> wire.Command:
        block = () if block_ms is None else (b"BLOCK", b"%d" % block_ms)
        return (*self.head, *block, b"STREAMS", self.signals.encode(), start)

    async def commit(
        self, script: wire.Script, commit: Commit, ttl_ms: int, block_ms: int | None
    ) -> CommitResult:
        """Run the commit script; a following shard loop (``block_ms``) sends its next read in the same
        write, right behind it: one write and one wake-up per batch instead of two, and the read already
        waits in the server when the next entry arrives. Whatever the script decides, the entries read
        are the group's next ones, delivered to this process: used if the commit went through, pending
        here otherwise (and then read again from the pending list, or claimed by the shard's owner)."""
        keys, argv = commit.script_args(self.token, GROUP, ttl_ms, self.version)
        with refusals():
            if block_ms is None or self.need_pending or self.rest:
                return parse_result(await script(self.pipe, keys, argv))
            read = self._read_command(block_ms, b">")
            try:
                reply, after = await script.run(self.pipe, keys, argv, [read])
            except BaseException:
                self.need_pending = True  # the read may have delivered entries whose reply is lost
                raise
        if after is None:
            self.need_pending = True
        else:
            self.ahead = entries_of(after[0])
        return parse_result(reply)

    async def stream_tick(self, scan: int = 10_000) -> datetime | None:
        """The ``now`` of the latest coordinator's tick among the last ``scan`` entries of the shard's
        stream (a tick is added every few seconds by the shard's owner), none if there is none.

        For a take-over with no stored group to take the shard's last tick from: a group that starts
        then would otherwise count its first entries by their senders' clocks, and one behind the
        server's by more than the heartbeat timeout would time its agents out at its first tick. (The
        last tick may come after entries not applied yet, which then count as sent at its time until
        an older tick among them brings them back to its own: late, never early.)"""
        end = b"+"
        while scan > 0:
            page = min(scan, 1000)
            scanned, last, *found = await _TICKS(self.pipe, [self.signals.encode()], [end, b"%d" % page])
            for entry_id, data in zip(found[::2], found[1::2], strict=True):
                try:
                    payload = decode(data).payload
                except DecodeError:
                    continue
                if isinstance(payload, Tick) and tick_refused(entry_id, payload) is None:
                    return payload.now
            if scanned < page:
                return None
            scan -= page
            end = b"(" + last
        return None

    async def delivery_counts(self, client: Client, entries: list[Entry]) -> dict[bytes, int]:
        """How many times the group delivered each of ``entries`` (read from the pending list)."""
        with translated():
            rows = await client.xpending_range(
                self.signals, GROUP, min=entries[0][0], max=entries[-1][0], count=len(entries)
            )
        return {_bytes(row["message_id"]): int(row["times_delivered"]) for row in rows}


def _size(data: bytes | Fields | None) -> int:
    """The bytes of an entry's data (of every field of a foreign producer's)."""
    if data is None:
        return 0
    return len(data) if isinstance(data, bytes) else sum(map(len, data))


def _bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode()
