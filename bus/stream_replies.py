"""The entries in Redis's replies to stream reads and claims, whatever their shape: RESP2 or RESP3
(``XREAD``, ``XREADGROUP``), Redis 6.2 or 7 (``XAUTOCLAIM``, which reports deleted entries differently).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bus.connection import as_text

__all__ = ["Entry", "parse_autoclaim", "stream_entries", "streams_entries"]

Entry = tuple[str, Mapping[Any, Any]]
"""An entry's id and its fields as the server sent them."""


def stream_entries(reply: Any) -> list[tuple[Any, Mapping[Any, Any]]]:
    """The entries of a one-stream XREAD/XREADGROUP reply, in RESP2 (list) or RESP3 (dict) shape."""
    if not reply:
        return []
    streams = list(reply.values()) if isinstance(reply, Mapping) else [item[1] for item in reply]
    entries: list[tuple[Any, Mapping[Any, Any]]] = streams[0] or []
    if entries and isinstance(entries[0], list):  # RESP3 legacy shape wraps the list once more
        entries = entries[0]
    return entries  # (id, fields) pairs; redis-py gives {} for the fields of a deleted entry


def streams_entries(reply: Any) -> list[tuple[str, Any, Mapping[Any, Any]]]:
    """``(stream, entry id, fields)`` of an XREAD reply of several streams, in either shape."""
    pairs = reply.items() if isinstance(reply, Mapping) else reply or ()
    return [
        (as_text(stream), entry_id, fields)
        for stream, rows in pairs
        for entry_id, fields in stream_entries([[stream, rows]])
    ]


def parse_autoclaim(reply: Sequence[Any]) -> tuple[str, list[Entry], list[str], int]:
    """Split an ``XAUTOCLAIM`` reply into (next cursor, claimed entries, deleted ids, unnamed deleted).

    Redis >= 7 answers ``[cursor, entries, deleted-ids]`` and has already dropped the deleted ids from
    the pending list. Redis 6.2 answers ``[cursor, entries]`` with a nil in place of each deleted entry,
    which stays pending: those are only counted here, and found by id when the consumer re-reads its
    own pending entries (where they come back with no fields).
    """
    cursor = as_text(reply[0])
    entries: list[Entry] = []
    unnamed = 0
    for item in reply[1] or ():
        if item is None or item[0] is None:
            unnamed += 1
        else:
            entries.append((as_text(item[0]), item[1] or {}))
    deleted = [as_text(entry_id) for entry_id in reply[2]] if len(reply) > 2 and reply[2] else []
    return cursor, entries, deleted, unnamed
