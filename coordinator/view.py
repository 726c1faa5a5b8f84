"""Read-only access to what the coordinators committed: group states and the findings stream.

Used by ``status``, ``inbox``, ``findings``, ``replay`` and the human commands (to find the group of an
agent or of a delegation request). Nothing here writes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from bus.connection import Client, as_text, translated
from bus.display import cut
from bus.envelope import Envelope, decode
from bus.errors import BusError, CommandFailed, DecodeError
from bus.findings import Finding
from bus.keys import ConsumerGroup, Keys, StreamKind
from bus.wire import server_time
from coordinator.console import replay_command
from coordinator.lease import members_key
from coordinator.rules.summary import GroupSummary, summarize
from coordinator.state import FindingSlot, GroupState
from coordinator.store import (
    decode_slots,
    group_key,
    legacy_slots,
    load_state,
    merged_key,
    seen_key,
    stored_text,
)
from coordinator.tombstones import load_tombstones, retired_key

__all__ = [
    "UnknownAgent",
    "each_group",
    "find_agent",
    "find_request",
    "group_ids",
    "iter_findings",
    "load_groups",
    "load_shard",
    "load_summaries",
    "no_coordinator_note",
    "retired_agent_note",
    "retired_note",
    "was_retired",
]


class UnknownAgent(BusError):
    """No group the coordinators keep a state for knows the agent."""

    def __init__(self, message: str, agent_id: str) -> None:
        super().__init__(message)
        self.agent_id = agent_id


async def retired_note(client: Client, keys: Keys, group_id: str) -> str | None:
    """What to say of a group that is not known when a coordinator retired it (its tombstone is kept)."""
    retired = await was_retired(client, keys, group_id)
    return _retired(group_id, keys.namespace) if retired else None


async def was_retired(client: Client, keys: Keys, group_id: str) -> bool:
    """Whether a coordinator retired the group (it may have started anew since)."""
    with translated():
        return bool(await client.hexists(retired_key(keys, keys.shard_of(group_id)), group_id))


def _retired(group_id: str, namespace: str) -> str:
    return (
        f"group {group_id!r} was retired: nothing was applied to it for the policy's retire_after_seconds "
        f"(`{replay_command(group_id, namespace)}` recomputes its merged findings)"
    )


async def retired_agent_note(client: Client, keys: Keys, agent_id: str) -> str | None:
    """What to say of an agent that is not known when a group it was in was retired."""
    for shard in keys.all_shards():
        with translated():
            tombstones = await load_tombstones(client, keys, shard)
            live = {stored_text(raw, keys.groups(shard)) for raw in await client.smembers(keys.groups(shard))}
        for group_id in sorted(g for g, agents in tombstones.items() if agent_id in agents):
            if group_id in live:
                return (
                    f"agent {agent_id!r} was in group {group_id!r} before it was retired; the group started "
                    "anew without it (an AGENT_STARTED of the agent brings it back)"
                )
            return f"agent {agent_id!r} was in group {group_id!r}: {_retired(group_id, keys.namespace)}"
    return None


async def group_ids(client: Client, keys: Keys) -> list[str]:
    """The ids of the groups the coordinators keep a state for, sorted."""
    ids: list[str] = []
    for shard in keys.all_shards():
        ids += await _shard_group_ids(client, keys, shard)
    return sorted(ids)


async def _shard_group_ids(client: Client, keys: Keys, shard: int) -> list[str]:
    with translated():
        return sorted(
            stored_text(raw, keys.groups(shard)) for raw in await client.smembers(keys.groups(shard))
        )


async def load_shard(
    client: Client, keys: Keys, shard: int, *, window: bool = True, in_thread: bool = False
) -> dict[str, GroupState]:
    """Every group state of one shard, by group id (``window=False`` skips the idempotency windows).

    ``in_thread`` decodes in a worker thread, so that the event loop goes on meanwhile (a group with
    hundreds of thousands of merged findings takes seconds to decode).
    """
    groups: dict[str, GroupState] = {}
    for gid in await _shard_group_ids(client, keys, shard):
        with translated():
            groups[gid] = await _load(client, keys, shard, gid, window=window, in_thread=in_thread)
    return groups


_SLOT_PAGE = 1000
"""Merged-finding slots read per HSCAN: a huge group is decoded page by page, never whole as a reply."""
_THREAD_PAGE = 100
"""The fewest slots decoded in a worker thread (``in_thread``)."""


async def _load(
    client: Client,
    keys: Keys,
    shard: int,
    group_id: str,
    *,
    window: bool,
    in_thread: bool = False,
    on_page: Callable[[int], None] | None = None,
) -> GroupState:
    """A group's state; ``on_page`` is told after each page of merged findings how many were read."""
    fields = await client.hgetall(group_key(keys, shard, group_id))
    seen = await client.lrange(seen_key(keys, shard, group_id), 0, -1) if window else []
    slots: dict[str, FindingSlot] = {}
    cursor, merged = 0, merged_key(keys, shard, group_id)
    while True:
        reply: Any = await client.hscan(merged, cursor, count=_SLOT_PAGE)
        cursor, page = reply
        big = in_thread and len(page) > _THREAD_PAGE  # a thread hop costs more than a small page
        slots.update(
            await asyncio.to_thread(decode_slots, page, merged) if big else decode_slots(page, merged)
        )
        if on_page is not None:
            on_page(len(page))
        if not cursor:
            break
    if in_thread:
        return await asyncio.to_thread(load_state, group_id, fields, seen, slots)
    return load_state(group_id, fields, seen, slots)


_GROUPS_PER_READ = 500
"""Group hashes read in one round trip (a pipeline) by the views of every group: read one by one, the
thousands of groups of a busy namespace took a round trip each, minutes from a distant server."""


async def _group_hashes(
    client: Client, keys: Keys, refs: list[tuple[int, str]], *, count_slots: bool = False
) -> AsyncIterator[tuple[str, Any, int]]:
    """``(group id, group hash, number of merged findings)`` of each of ``refs``, in their order, a
    pipeline of :data:`_GROUPS_PER_READ` groups per round trip (the number is counted with
    ``count_slots`` only, else 0)."""
    for start in range(0, len(refs), _GROUPS_PER_READ):
        chunk = refs[start : start + _GROUPS_PER_READ]
        pipe = client.pipeline(transaction=False)
        for shard, gid in chunk:
            pipe.hgetall(group_key(keys, shard, gid))
            if count_slots:
                pipe.hlen(merged_key(keys, shard, gid))
        with translated():
            replies = await pipe.execute()
        step = 2 if count_slots else 1
        for n, (shard, gid) in enumerate(chunk):
            fields = replies[n * step]
            count = replies[n * step + 1] if count_slots else 0
            legacy = legacy_slots(fields) if count_slots else None
            if legacy:  # 0.1.0's slots, some of them merged again since
                with translated():
                    merged = await client.hkeys(merged_key(keys, shard, gid))
                count = len(legacy.keys() | {stored_text(k, merged_key(keys, shard, gid)) for k in merged})
            yield gid, fields, count


async def _group_refs(client: Client, keys: Keys, group_id: str | None) -> list[tuple[int, str]]:
    """``(shard, group id)`` of every group (or of ``group_id`` when it is known), by group id."""
    if group_id is not None:
        shard = keys.shard_of(group_id)
        with translated():
            known = await client.sismember(keys.groups(shard), group_id)
        return [(shard, group_id)] if known else []
    refs = [
        (shard, gid) for shard in keys.all_shards() for gid in await _shard_group_ids(client, keys, shard)
    ]
    return sorted(refs, key=lambda ref: ref[1])


async def load_groups(
    client: Client,
    keys: Keys,
    group_id: str | None = None,
    *,
    findings: bool = True,
    on_page: Callable[[int], None] | None = None,
) -> list[GroupState]:
    """Every group's committed state (or just ``group_id``'s), ordered by group id, without windows.

    ``findings=False`` leaves the merged findings out: one command per group, however many it merged.
    ``on_page`` is told, after each page of merged findings, how many were read so far (of every group).
    """
    return [state async for state in each_group(client, keys, group_id, findings=findings, on_page=on_page)]


async def each_group(
    client: Client,
    keys: Keys,
    group_id: str | None = None,
    *,
    findings: bool = True,
    on_page: Callable[[int], None] | None = None,
) -> AsyncIterator[GroupState]:
    """:func:`load_groups`, one group at a time: a caller that keeps less than a whole state of each (a
    merged view) then holds one state, not every group's."""
    read = 0

    def counted(count: int) -> None:
        nonlocal read
        read += count
        if on_page is not None:
            on_page(read)

    refs = await _group_refs(client, keys, group_id)
    shards = {gid: shard for shard, gid in refs}
    # the hashes pipelined, with the number of merged findings: only a group that has some is read again
    async for gid, fields, count in _group_hashes(client, keys, refs, count_slots=findings):
        if not count:
            yield load_state(gid, fields, [], {} if findings else None)
            continue
        with translated():
            state = await _load(client, keys, shards[gid], gid, window=False, on_page=counted)
        yield state
        del state  # not held while the next one is read


async def load_summaries(client: Client, keys: Keys, group_id: str | None = None) -> list[GroupSummary]:
    """:func:`~coordinator.rules.summarize` of every group (or of ``group_id``), ordered by group id,
    without reading the merged findings (only their number)."""
    refs = await _group_refs(client, keys, group_id)
    return [
        summarize(load_state(gid, fields, []), findings=count)
        async for gid, fields, count in _group_hashes(client, keys, refs, count_slots=True)
    ]


def find_agent(groups: list[GroupState], agent_id: str) -> GroupState:
    """The group that knows ``agent_id``; a :class:`BusError` naming the known agents otherwise."""
    for state in groups:
        if agent_id in state.agents:
            return state
    known = sorted({a for s in groups for a in s.agents})
    hint = f" (known: {', '.join(known[:10])}{' ...' if len(known) > 10 else ''})" if known else ""
    raise UnknownAgent(f"no agent {agent_id!r} is known to the coordinators{hint}", agent_id)


def find_request(groups: list[GroupState], request_id: str) -> GroupState:
    """The group holding the delegation request ``request_id``."""
    for state in groups:
        if request_id in state.delegations:
            return state
    raise BusError(f"no delegation request {cut(repr(request_id), 80)} (see `subagent-bus inbox`)")


async def iter_findings(
    client: Client,
    keys: Keys,
    group_id: str | None = None,
    *,
    page: int = 1000,
    on_page: Callable[[int], None] | None = None,
    on_skipped: Callable[[str, str, str], None] | None = None,
) -> AsyncIterator[tuple[str, Finding, str, str]]:
    """``(entry_id, finding, agent_id, group_id)`` from the append-only findings stream, from id 0.

    Shards are read one after another; within a shard, in stream order. ``on_page`` is told, after each
    page read, how many stream entries were read so far (of every group: a group's findings share their
    shard's stream with other groups); ``on_skipped`` of each entry that is no envelope, or the envelope
    of no finding (stream, entry id, why), which only a writer other than the coordinators can have put
    there.
    """
    shards = [keys.shard_of(group_id)] if group_id is not None else list(keys.all_shards())
    read = 0
    for shard in shards:
        stream = keys.stream(shard, StreamKind.FINDINGS)
        cursor = "-"
        while True:
            with translated():
                rows: list[Any] = await client.xrange(stream, min=cursor, max="+", count=page) or []
            read += len(rows)
            if on_page is not None:
                on_page(read)
            for entry_id, fields in rows:
                eid = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                found = _finding_in(fields)
                if isinstance(found, str):
                    if on_skipped is not None:
                        on_skipped(stream, eid, found)
                elif group_id in (None, found[1].group_id):
                    yield eid, found[0], found[1].agent_id, found[1].group_id
            if len(rows) < page:
                break
            last = rows[-1][0]
            cursor = "(" + (last.decode() if isinstance(last, bytes) else str(last))


def _finding_in(fields: dict[bytes, bytes] | None) -> tuple[Finding, Envelope] | str:
    """The finding a findings stream's entry holds, with its envelope; or why it holds none."""
    try:
        envelope = decode((fields or {}).get(b"data"))
    except DecodeError as exc:
        return str(exc)
    if not isinstance(envelope.payload, Finding):
        return f"a {envelope.type.value} envelope, not a finding"
    return envelope.payload, envelope


async def no_coordinator_note(client: Client, keys: Keys) -> str:
    """`` (N signal(s) wait for a coordinator: start one, ...)`` while signals wait and no coordinator
    has ever read the namespace's (none has created its consumer group on a shard with signals), or
    ``(N signal(s) not applied yet: no coordinator is running; ...)`` while no coordinator is live and
    some are unread; else ""."""
    group = ConsumerGroup.COORDINATOR.value
    waiting, seen = 0, False
    with translated():
        if await _coordinator_live(client, keys):
            return ""
        for shard in range(keys.shards):
            stream = keys.stream(shard, StreamKind.SIGNALS)
            length = await client.xlen(stream)
            ours = (
                [g for g in await client.xinfo_groups(stream) if as_text(g["name"]) == group]
                if length
                else []
            )
            seen = seen or bool(ours)
            # unread, and read by a coordinator that did not commit them (its lease has expired)
            waiting += int(ours[0].get("lag") or 0) + int(ours[0]["pending"]) if ours else length
    start = "start one, `subagent-bus coordinator`"
    if not waiting:
        return ""
    if not seen:
        return f" ({waiting} signal(s) wait for a coordinator: {start})"
    return f" ({waiting} signal(s) not applied yet: no coordinator is running; {start})"


_CLOCK_SLACK_MS = 10_000
"""How far this machine's clock may run ahead of the server's before a live coordinator looks gone."""


async def _coordinator_live(client: Client, keys: Keys) -> bool:
    """Whether a coordinator's membership has not expired, by the server's clock, which its expiry is in;
    by this machine's, give or take :data:`_CLOCK_SLACK_MS`, for a user that may not ask for it (made by
    an earlier version's ``acl --apply``)."""
    key = members_key(keys)
    try:
        since = (await server_time(client, key)).timestamp() * 1000
    except CommandFailed:
        since = time.time() * 1000 - _CLOCK_SLACK_MS
    return bool(await client.zrangebyscore(key, since, "+inf", start=0, num=1))
