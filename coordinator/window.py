"""The idempotency window: the ids of a group's most recently applied envelopes, to drop duplicates."""

from __future__ import annotations

from typing import ClassVar, Final

from pydantic import PrivateAttr

from bus.fields import Model

__all__ = ["IdWindow"]

_set: Final = object.__setattr__


class _ChunkIndex:
    """Which chunk each id went into, by chunk sequence number; shared by a window and its extensions.

    Windows only ever grow at the end, so successive windows of a group share one index: each adds its id
    and reads only the chunk numbers inside its own range. An index is never changed in a way an older
    window could see: a new id gets a chunk number at or after the older windows' newest chunk (whose ids
    they check against their own copy of it), and a window that is not the last to extend the index, or
    that adds an id the index already holds (a re-added id that had dropped out), starts an index of its
    own. Ids that dropped out of the window stay until the index holds twice the window, then a new index
    is built for the window alone.
    """

    __slots__ = ("chunk_of", "last", "newest")

    def __init__(self, chunks: tuple[tuple[str, ...], ...], first: int) -> None:
        self.chunk_of: dict[str, int] = {}
        for seq, chunk in enumerate(chunks, first):
            self.chunk_of.update(dict.fromkeys(chunk, seq))
        self.last = first + len(chunks) - 1
        """The number of the newest chunk the index knows."""
        self.newest = len(chunks[-1]) if chunks else 0
        """How many ids that chunk holds."""


class IdWindow(Model):
    """The ids of the most recently applied envelopes of a group, to drop duplicates.

    Ids are kept in fixed-size chunks, oldest first; the oldest chunk is dropped only while the others
    still hold at least ``limit`` ids, so the last ``limit`` ids are always remembered (and at most
    ``limit + CHUNK - 1``). Adding an id copies only the newest chunk; a membership test is one lookup in
    an index of the chunks shared with the windows this one was extended from or into (plus a scan of
    the newest chunk when the id is in it), so the cost does not grow with the window.

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
        return self._indexed()[2]

    def __contains__(self, envelope_id: object) -> bool:
        chunks = self.chunks
        if not chunks or not isinstance(envelope_id, str):
            return False
        index, newest, _ = self._indexed()
        seq = index.chunk_of.get(envelope_id)
        if seq is None:
            return False
        if seq == newest:  # a later window may have added more ids to this chunk than this one holds
            return envelope_id in chunks[-1]
        return newest - len(chunks) < seq < newest

    def add(self, envelope_id: str, limit: int) -> IdWindow:
        """A new window that also holds ``envelope_id``; ``self`` is unchanged."""
        chunks = self.chunks
        index, seq, total = self._indexed()
        newest = len(chunks[-1]) if chunks else 0
        if index.last != seq or index.newest != newest or envelope_id in index.chunk_of:
            index, seq = _ChunkIndex(chunks, 0), len(chunks) - 1
        if newest and newest < self.CHUNK:
            chunks = (*chunks[:-1], (*chunks[-1], envelope_id))
        else:
            chunks = (*chunks, (envelope_id,))
            seq += 1
        index.chunk_of[envelope_id] = seq
        index.last, index.newest = seq, len(chunks[-1])
        total += 1
        while len(chunks) > 1 and total - len(chunks[0]) >= limit:
            total -= len(chunks[0])
            chunks = chunks[1:]
        if len(index.chunk_of) > 2 * total + self.CHUNK:
            index, seq = _ChunkIndex(chunks, 0), len(chunks) - 1
        window = IdWindow.__new__(IdWindow)
        # what pydantic's construction does, minus its generic work: this runs for every applied entry
        _set(window, "__dict__", {"chunks": chunks})
        _set(window, "__pydantic_fields_set__", {"chunks"})
        _set(window, "__pydantic_extra__", None)
        _set(window, "__pydantic_private__", {"_cursor": (index, seq, total)})
        return window

    def _indexed(self) -> tuple[_ChunkIndex, int, int]:
        """The shared index, this window's newest chunk number in it, and the window's size."""
        private = self.__pydantic_private__
        cursor = private.get("_cursor") if private is not None else None
        if cursor is None:
            chunks = self.chunks
            cursor = (_ChunkIndex(chunks, 0), len(chunks) - 1, sum(map(len, chunks)))
            _set(self, "__pydantic_private__", {"_cursor": cursor})
        return cursor
