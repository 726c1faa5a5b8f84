"""The idempotency window: the ids of a group's most recently applied envelopes, to drop duplicates."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Final

from pydantic import PrivateAttr

from bus.fields import Model, trusted_instance

__all__ = ["IdWindow"]

_set: Final = object.__setattr__


class _ChunkIndex:
    """Which chunk each id went into, by chunk number; shared by a window and the windows extending it.

    Windows only grow at the end, so successive windows of a group share one index: each adds its id,
    drops the ids of the chunks it drops, and reads only the chunk numbers inside its own range. What an
    older window can see never changes under it: a new id gets a chunk number at or after its newest
    chunk (whose ids it checks against its own copy of that chunk), and once chunks it still holds were
    dropped (``first`` is past its own first chunk) it indexes its chunks anew. A window that is not the
    last to extend the index, or that adds an id the index still holds, starts an index of its own.
    """

    __slots__ = ("chunk_of", "first", "last", "newest")

    def __init__(self, chunks: tuple[tuple[str, ...], ...]) -> None:
        self.chunk_of: dict[str, int] = {}
        for seq, chunk in enumerate(chunks):
            self.chunk_of.update(dict.fromkeys(chunk, seq))
        self.first = 0
        """The number of the oldest chunk whose ids the index holds."""
        self.last = len(chunks) - 1
        """The number of the newest chunk."""
        self.newest = len(chunks[-1]) if chunks else 0
        """How many ids that chunk holds."""

    def drop(self, chunk: tuple[str, ...]) -> None:
        """Forget the ids of the oldest chunk (an id also in a later chunk stays)."""
        chunk_of, first = self.chunk_of, self.first
        for envelope_id in chunk:
            if chunk_of.get(envelope_id) == first:
                del chunk_of[envelope_id]
        self.first = first + 1


class IdWindow(Model):
    """The ids of the most recently applied envelopes of a group, to drop duplicates.

    Ids are kept in fixed-size chunks, oldest first; the oldest chunk is dropped only while the others
    still hold at least ``limit`` ids, so the last ``limit`` ids are always remembered (and at most
    ``limit + CHUNK - 1``). Adding ids copies only the chunk list and the newest chunk; a membership
    test is one lookup in an index of the chunks shared with the windows this one was extended from or
    into (plus a scan of the newest chunk when the id is in it), so the cost does not grow with the
    window, and the index holds the ids of the newest window only.

    Why a bounded window is enough: envelope ids are deterministic (an agent's output at a byte offset
    always yields the same id), and a duplicate only arises from a retried publish or an adapter
    re-reading the chunk it had not acknowledged before a restart. Both happen right after the original,
    while at most a few batches of the group's entries lie between them, far fewer than the window.
    The window is most of a stored state's size (about 35 bytes of JSON per id), which is the reason to
    bound it at all.
    """

    CHUNK: ClassVar[int] = 128

    chunks: tuple[tuple[str, ...], ...] = ()
    _cursor: tuple[_ChunkIndex, int, int] | None = PrivateAttr(default=None)
    """The shared index, the number of this window's newest chunk in it, and how many ids the window holds."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IdWindow) and self.chunks == other.chunks

    def __hash__(self) -> int:
        return hash(self.chunks)

    def __len__(self) -> int:
        return _indexed(self, self.chunks)[2]

    def __contains__(self, envelope_id: object) -> bool:
        chunks = self.chunks
        if not chunks or not isinstance(envelope_id, str):
            return False
        index, newest, _ = _indexed(self, chunks)
        seq = index.chunk_of.get(envelope_id)
        if seq is None:
            return False
        if seq == newest:  # a later window may have added more ids to this chunk than this one holds
            return envelope_id in chunks[-1]
        return newest - len(chunks) < seq < newest

    def holds(self, envelope_id: str, last: int) -> bool:
        """Whether ``envelope_id`` is among the window's ``last`` newest ids. A window holds up to
        ``CHUNK - 1`` ids more than its limit, and one read back from storage exactly the limit: a
        duplicate is one among the last ``limit`` applied ids, wherever batches were cut and whether the
        state was reloaded meanwhile, not one the chunks happen to hold still."""
        if last <= 0 or envelope_id not in self:
            return False
        chunks = self.chunks
        index, newest, total = _indexed(self, chunks)
        if total <= last:
            return True
        # every chunk but the newest is full: the id's place counts the chunks before its own
        at = len(chunks) - 1 - (newest - index.chunk_of[envelope_id])
        return total - (at * IdWindow.CHUNK + chunks[at].index(envelope_id)) <= last

    def add(self, envelope_id: str, limit: int) -> IdWindow:
        """A new window that also holds ``envelope_id``; ``self`` is unchanged."""
        return self.extend((envelope_id,), limit)

    def extend(self, ids: Sequence[str], limit: int) -> IdWindow:
        """A new window that also holds ``ids`` (in order), as adding them one by one would; ``self`` is
        unchanged. The cost is one copy of the chunk list and of the newest chunk, however many ids:
        the coordinator adds a batch's ids to a group's window at once."""
        if not ids:
            return self
        chunks = self.chunks
        index, seq, total = _indexed(self, chunks)
        newest = len(chunks[-1]) if chunks else 0
        chunk_of = index.chunk_of
        if index.last != seq or index.newest != newest or any(i in chunk_of for i in ids):
            index, seq = _ChunkIndex(chunks), len(chunks) - 1
            chunk_of = index.chunk_of
        out, size = list(chunks), IdWindow.CHUNK  # read once: a model's attribute costs ten plain ones
        if newest and newest < size:
            tail = list(out.pop())
        else:
            tail, seq = [], seq + 1
        for envelope_id in ids:
            if len(tail) == size:
                out.append(tuple(tail))
                tail, seq = [], seq + 1
            tail.append(envelope_id)
            chunk_of[envelope_id] = seq
        out.append(tuple(tail))
        index.last, index.newest = seq, len(tail)
        total += len(ids)
        first = 0
        while len(out) - first > 1 and total - len(out[first]) >= limit:
            total -= len(out[first])
            index.drop(out[first])
            first += 1
        cursor = {"_cursor": (index, seq, total)}
        return trusted_instance(IdWindow, {"chunks": tuple(out[first:])}, {"chunks"}, cursor)


def _indexed(window: IdWindow, chunks: tuple[tuple[str, ...], ...]) -> tuple[_ChunkIndex, int, int]:
    """The shared index, the window's newest chunk number in it, and the window's size (``chunks``: the
    window's, which its caller has read already: each attribute read of a model costs ten plain ones)."""
    private = window.__pydantic_private__
    cursor = private.get("_cursor") if private is not None else None
    if cursor is None or cursor[1] - len(chunks) < cursor[0].first - 1:  # not (or no longer) indexed
        total = cursor[2] if cursor is not None else sum(map(len, chunks))
        cursor = (_ChunkIndex(chunks), len(chunks) - 1, total)
        _set(window, "__pydantic_private__", {"_cursor": cursor})
    return cursor
