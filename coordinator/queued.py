"""What waits on the shard streams, not applied yet: the human commands ``inbox`` shows as queued, and
the state a new command is checked against.

A human command is an entry of its group's shard stream; a coordinator applies it in order. While none
runs (or one is paused), a command waits there and the state the views read does not show it: the
question still looks open, and a second answer, queued behind the first, would be rejected when the
first resumes the agent, with only the coordinator's log to say so. So the views and the commands also
read the entries no coordinator has applied: the ones its consumer group has not been given yet and the
ones given but not acknowledged (a commit acknowledges what it applied). A new command is checked against
the committed state with those entries applied by the rules themselves (:func:`project`), the way a
coordinator will apply them: an answer after queued answers that resume the agent, a second resolution,
an approval of a request a queued denial decides are refused before they are published, and an answer
to a question the agent asks again in the queue is accepted. Given the people's key (:mod:`bus.human_key`),
a human command not signed with it is not counted: the coordinators, given it too, dead-letter it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Final, NamedTuple, cast

from bus.connection import Client, as_text, translated
from bus.directives import HumanAnswer, HumanApprove, HumanDeny
from bus.envelope import Envelope, EnvelopeType, Kind, decode
from bus.errors import BusError, DecodeError
from bus.fields import Model
from bus.human_key import signature_problem
from bus.keys import ConsumerGroup, Keys, StreamKind, entry_order
from bus.signals import DelegateWork
from bus.stream_replies import stream_entries
from coordinator.batch import arrival
from coordinator.policy import Policy
from coordinator.rules import apply
from coordinator.rules.run import Run
from coordinator.rules.trusted import evolve
from coordinator.state import GroupState
from coordinator.store import group_key, load_state, seen_key
from coordinator.tombstones import Late, admit, tombstones_of

__all__ = [
    "Queued",
    "QueuedCommand",
    "human_commands",
    "listed",
    "load_queued",
    "project",
    "projected",
    "queued_before",
    "with_window",
]

Report = Callable[[str], None]
"""Told, now and then, how far long work is (e.g. :meth:`bus.progress.Progress.update`)."""


def _silent(_: str) -> None:
    pass


_PAGE: Final = 1000
_TRIES: Final = 20
"""Reads of a group's state before a command gives up on a group changed by a commit at each."""
_PENDING_MAX: Final = 100_000
"""A coordinator holds at most a few batches of 100 entries per shard unacknowledged."""
_LISTED: Final = 3
"""Queued entries a refusal names (and how many more)."""
_SAID: Final = frozenset({Kind.HUMAN, Kind.SIGNAL, Kind.RESULT})
"""What a refusal names: the commands, the agent's signals and results (not its lifecycle events)."""


class Queued(NamedTuple):
    """An entry not applied yet: its id in the stream and its envelope."""

    entry_id: str
    envelope: Envelope


class QueuedCommand(Model):
    """A human command on its shard's stream that no coordinator has applied yet."""

    id: str
    """The envelope's id, which the command printed."""
    entry_id: str
    """Its entry's id in the stream."""
    group_id: str
    agent_id: str
    command: EnvelopeType
    question_ids: tuple[str, ...] = ()
    """The questions an ``answer`` answers."""
    request_id: str | None = None
    """The delegation an ``approve`` or ``deny`` decides."""


async def load_queued(
    client: Client,
    keys: Keys,
    shards: Iterable[int],
    *,
    human: bool = False,
    key: bytes | None = None,
    progress: Report = _silent,
) -> list[Queued]:
    """The entries of ``shards`` not applied yet, oldest first (by entry id: a shard's in stream order),
    the human commands only with ``human`` (the others are not decoded), and with ``key`` only the human
    commands signed with it. ``progress`` is told how many entries were read, page by page."""
    queued: list[Queued] = []
    read = 0

    def page_read(count: int) -> None:
        nonlocal read
        read += count
        progress(f"reading what no coordinator has applied yet: {read:,} entries")

    with translated():
        for shard in shards:
            found = await _shard(client, keys.stream(shard, StreamKind.SIGNALS), human, key, page_read)
            # a raw publisher's entry on another shard than its group's: a coordinator dead-letters it
            queued += [
                q
                for q in found
                if q.envelope.type is EnvelopeType.TICK or keys.shard_of(q.envelope.group_id) == shard
            ]
    return sorted(queued, key=lambda q: entry_order(q.entry_id))


async def _shard(
    client: Client, stream: str, human: bool, key: bytes | None, page_read: Callable[[int], None]
) -> list[Queued]:
    group = ConsumerGroup.COORDINATOR.value
    if not await client.exists(stream):
        return []
    ours = [g for g in await client.xinfo_groups(stream) if as_text(g["name"]) == group]
    start, delivered, pending = "-", (0, -1), set[str]()
    if ours:
        delivered = entry_order(as_text(ours[0]["last-delivered-id"]))
        start = "(" + as_text(ours[0]["last-delivered-id"])
        if int(ours[0]["pending"]):  # a live coordinator may acknowledge them before they are listed
            given = await client.xpending_range(stream, group, "-", "+", _PENDING_MAX)
            pending = {as_text(cast(bytes, p["message_id"])) for p in given}
            start = min(pending, key=entry_order, default=start)
    found: list[Queued] = []
    while True:
        page = stream_entries([[stream, await client.xrange(stream, start, "+", count=_PAGE)]])
        for raw_id, fields in page:
            entry_id = as_text(raw_id)
            if entry_id in pending or entry_order(entry_id) > delivered:  # else applied (acknowledged)
                envelope = _envelope(fields, human, key)
                found += [Queued(entry_id, envelope)] if envelope is not None else []
        page_read(len(page))
        if len(page) < _PAGE:
            return found
        start = "(" + as_text(page[-1][0])


def _envelope(fields: Any, human: bool, key: bytes | None) -> Envelope | None:
    data = fields.get(b"data") if fields else None
    # A human envelope's JSON names its kind; one that spells it with escapes, which no client here
    # writes, is applied all the same, only not listed as queued.
    if not isinstance(data, bytes) or (human and b'"human"' not in data):
        return None
    try:
        envelope = decode(data)
    except DecodeError:
        return None  # the coordinator dead-letters it
    if envelope.kind is not Kind.HUMAN:
        return None if human else envelope
    others = [(name, value) for name, value in fields.items() if name != b"data"]
    return None if key is not None and signature_problem(key, data, others) else envelope


def human_commands(queued: Sequence[Queued]) -> list[QueuedCommand]:
    """The human commands among ``queued``."""
    return [
        QueuedCommand(
            id=q.envelope.id,
            entry_id=q.entry_id,
            group_id=q.envelope.group_id,
            agent_id=q.envelope.agent_id,
            command=q.envelope.type,
            question_ids=tuple(a.question_id for a in p.answers) if isinstance(p, HumanAnswer) else (),
            request_id=_request(q.envelope),
        )
        for q in queued
        if q.envelope.kind is Kind.HUMAN
        for p in [q.envelope.payload]
    ]


async def projected(
    client: Client,
    keys: Keys,
    load: Callable[[], Awaitable[Sequence[GroupState]]],
    group_id: str | None,
    policy: Policy,
    *,
    key: bytes | None = None,
    progress: Report = _silent,
) -> tuple[list[GroupState], list[Queued]]:
    """The groups a command is checked against (``group_id``'s, or all), by group id, with what is
    queued applied (:func:`project`), and the queued entries that count (a coordinator will apply them).

    ``load`` reads the committed groups. It is called once the queue is read: an entry a coordinator
    commits meanwhile is then in both, not in neither (read the other way round, the command would be
    checked against a state without it). The queued entries' groups are read again, each with the ids
    it applied (:func:`with_window`), which :func:`~coordinator.rules.apply` drops as duplicates: those
    committed meanwhile, and those an adapter that died between its publish and its checkpoint published
    again (a coordinator drops them too).

    Besides the committed groups, the ones only the queue starts: a group's first signals wait there
    until a coordinator runs, and a command about them is applied then; a retired group's signals may
    start it anew (see :mod:`coordinator.tombstones`). With ``key``, a human command not signed with it
    is left out (see :func:`load_queued`). ``progress`` is told how far reading and applying the queue
    are: a long queue takes seconds."""
    shards = [keys.shard_of(group_id)] if group_id is not None else range(keys.shards)
    queued = await load_queued(client, keys, shards, key=key, progress=progress)
    known = {g.group_id: g for g in await load()}
    queued_ids = {q.envelope.group_id for q in queued if q.envelope.type is not EnvelopeType.TICK}
    for gid in sorted(g for g in queued_ids if group_id in (None, g)):  # the shard's others are not asked
        state = await with_window(client, keys, gid)
        if state is None:
            known.pop(gid, None)  # retired meanwhile
        else:
            known[gid] = state
    with translated():
        tombs = await tombstones_of(client, keys, queued_ids)
    states: list[GroupState] = []
    counted: list[Queued] = []
    by_group: dict[str, list[Queued]] = {}
    for q in queued:
        by_group.setdefault(q.envelope.group_id, []).append(q)
    for gid in sorted(known.keys() | {g for g in queued_ids if group_id in (None, g)}):
        mine = by_group.get(gid, [])
        state, applied = project(
            known.get(gid), gid, tombs.get(gid, frozenset()), mine, policy, progress=progress
        )
        states += [state] if state is not None else []
        counted += applied
    return states, sorted(counted, key=lambda q: entry_order(q.entry_id))


async def with_window(client: Client, keys: Keys, group_id: str) -> GroupState | None:
    """A group's committed state (None: there is none) with its window of applied ids, both as one
    commit left them. A commit changes them in one script, which a reader may not run (the observer and
    human roles have no EVAL, nor MULTI): the window's last id, read before the state and again after,
    tells whether one came between, as every commit of the group adds ids to its window."""
    shard = keys.shard_of(group_id)
    seen, group = seen_key(keys, shard, group_id), group_key(keys, shard, group_id)
    for _ in range(_TRIES):
        pipe = client.pipeline(transaction=False)
        pipe.lindex(seen, -1)
        pipe.hgetall(group)
        pipe.lrange(seen, 0, -1)
        with translated():
            last, fields, ids = await pipe.execute()
        if (ids[-1] if ids else None) == last:
            return load_state(group_id, fields, ids) if fields else None
    raise BusError(f"group {group_id!r} changed at each of {_TRIES} reads of its state: try again")


def project(
    state: GroupState | None,
    group_id: str,
    tomb: frozenset[str],
    queued: Sequence[Queued],
    policy: Policy,
    *,
    progress: Report = _silent,
) -> tuple[GroupState | None, list[Queued]]:
    """The state of group ``group_id`` (``state``: the committed one, None when there is none) with its
    ``queued`` entries applied by the rules, as a coordinator will apply them, the group's tombstone
    (``tomb``'s agents) included (None when the queue does not start the group either); and the entries
    that count, those a coordinator will not drop or dead-letter by the tombstone.

    Not the ticks: what they time out depends on the coordinators' policy, which a command may not be
    given, and a command is better accepted, then rejected, than refused for a timeout that may not
    come. ``progress`` is told how many entries are applied, every thousand."""
    applied: list[Queued] = []
    # One run for the entries in a row, as a coordinator's batch: applied one by one, each finding copied
    # the group's map of merged findings, and 200 000 queued findings took minutes.
    run = Run()
    for n, q in enumerate(queued, 1):
        if n % 1000 == 0:
            progress(f"applying what is queued for group {group_id}: {n:,} of {len(queued):,} entries")
        envelope = q.envelope
        if envelope.group_id != group_id or envelope.type is EnvelopeType.TICK:
            continue
        admission = admit(state, tomb, envelope)
        if admission.late is not Late.APPLIED:
            continue
        tomb = tomb if admission.tomb is None else admission.tomb
        base = state if state is not None and not admission.anew else GroupState(group_id=group_id)
        if base is not state:  # a group the queue starts (anew): its run starts with it
            run = Run()
        try:
            outcome = apply(base, envelope, policy, run, arrival(q.entry_id.encode()))
        except Exception:  # a rule's bug: the coordinator dead-letters the entry, which changes nothing
            continue
        if not outcome.duplicate:
            state = outcome.state
            applied.append(q)
    if state is not None and run.ids:  # the run's ids go into the window at its end, as a commit's do
        state = evolve(state, window=state.window.extend(tuple(run.ids), policy.idempotency_window))
    return state, applied


def queued_before(queued: Sequence[Queued], subject: str, group_id: str | None) -> str:
    """``" (counting what is queued before it, which no coordinator has applied yet: ...)"``: the queued
    entries of ``subject`` (an agent, or a delegation request) in group ``group_id`` (any, with None), or
    ``""`` when there are none."""
    mine = [
        q
        for q in {q.envelope.id: q for q in queued}.values()  # a copy is applied once
        if q.envelope.kind in _SAID
        and q.envelope.type is not EnvelopeType.PROGRESS
        and subject in (q.envelope.agent_id, _request(q.envelope))
        and group_id in (None, q.envelope.group_id)
    ]
    if not mine:
        return ""
    named = listed([f"{q.envelope.type.value.lower()} {q.envelope.id}" for q in mine])
    return f" (counting what is queued before it, which no coordinator has applied yet: {named})"


def listed(names: Sequence[str]) -> str:
    """The last few of ``names``, after how many more there are: ``"7 more, then a, b, c"``."""
    more = f"{len(names) - _LISTED} more, then " if len(names) > _LISTED else ""
    return more + ", ".join(names[-_LISTED:])


def _request(envelope: Envelope) -> str | None:
    """The delegation request an envelope asks for or decides."""
    payload = envelope.payload
    if isinstance(payload, DelegateWork):
        return payload.request_id(envelope.agent_id)
    return payload.request_id if isinstance(payload, HumanApprove | HumanDeny) else None
