"""One batch of a shard's signals in the making: decoded, applied, and turned into one commit.

The entries are applied in stream order to the shard's group states, each group's as one run of the
rules (the shard's committed states stay as they are until the commit succeeds); everything the batch
writes (emitted envelopes, dead letters, changed state fields) goes into one
:class:`~coordinator.commit.Commit`, which the service runs only after the whole batch is applied. No I/O
happens here.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from bus.connection import as_text
from bus.consumer import DELETED_REASON, dead_letter_fields
from bus.display import field_names
from bus.envelope import WIRE_UTC, Envelope, EnvelopeType, decode
from bus.errors import DecodeError
from bus.events import Tick
from bus.human_key import signature_problem
from bus.keys import ConsumerGroup, Keys, StreamKind
from bus.payloads import Kind
from coordinator.commit import Commit
from coordinator.policy import Policy
from coordinator.rules import Emit, Outcome, Target, apply
from coordinator.rules.run import Run
from coordinator.rules.trusted import evolve
from coordinator.state import GroupState
from coordinator.store import Touched, delete_group, write_changes
from coordinator.tombstones import Late, Tombstones, admit, bury, late_reason, unbury

__all__ = ["Batch", "Entry", "Fields", "entries_of", "target_streams", "tick_refused"]

log = logging.getLogger("subagent_bus.coordinator")

_NO_AGENTS: Final = frozenset[str]()
_INBOX_GROUP: Final = ConsumerGroup.ADAPTER.value


class Fields(tuple[bytes, ...]):
    """The flat field list of an entry that has fields besides ``data``, or no ``data`` at all: a
    foreign producer's. Its ``data`` is applied as any entry's; a dead letter keeps every field."""

    __slots__ = ()

    def split(self) -> tuple[bytes | None, list[tuple[bytes, bytes]]]:
        """The first ``data`` value (None when there is none) and the other fields, as (name, value), in
        order."""
        pairs = [(self[i], self[i + 1]) for i in range(0, len(self) - 1, 2)]
        first = next((i for i, (name, _) in enumerate(pairs) if name == b"data"), None)
        if first is None:
            return None, pairs
        return pairs[first][1], pairs[:first] + pairs[first + 1 :]


Entry = tuple[bytes, bytes | Fields | None]
"""``(entry_id, data)`` of a stream entry: ``data`` is ``None`` for a deleted entry, :class:`Fields` for
one whose fields are not exactly ``data``."""


def entries_of(reply: Any) -> list[Entry]:
    """The entries of a one-stream XREADGROUP reply as the server sends it (RESP2 lists, or a RESP3 map),
    each with the value of its ``data`` field. Ids stay bytes, as the reply has them and as they are
    acked."""
    if not reply:
        return []
    rows = next(iter(reply.values())) if isinstance(reply, Mapping) else reply[0][1]
    return [(entry_id, _data(fields)) for entry_id, fields in rows or ()]


def _data(fields: list[bytes] | None) -> bytes | Fields | None:
    """The ``data`` value of an entry's flat field list; None for an entry deleted while pending (the
    server sends no fields), all its fields for one that has others."""
    if fields is None:
        return None
    if len(fields) == 2 and fields[0] == b"data":
        return fields[1]
    return Fields(fields)


TICK_SKEW: Final = timedelta(seconds=30)
"""How far a tick's time may be from its stream entry's. A coordinator reads the server's clock (``TIME``)
and adds its tick right after, which stamps the entry's id by the same clock: the two are milliseconds
apart, seconds for a process paused in between. Any producer may add a TICK entry (ACLs do not look inside
an entry: the adapter and human roles may), and one whose time is far off would pull every agent's time
back, or push it on, and lose every running agent of the shard at the next tick."""


def arrival(entry_id: bytes) -> datetime | None:
    """When the entry was added to its stream, by the server's clock (the time in its id), to the second;
    None for an id that tells none (beyond the year 9999).

    To the second, not the millisecond: a batch reads it from the first entry of each second it holds
    (:attr:`Batch.arrived`), and which entry of a second comes first in a batch depends on where the
    batches were cut; the second's start is the same for all of them, so the rules' output is too."""
    head = entry_id.partition(b"-")[0]
    try:  # in the envelopes' own zone object: a time in another compares with theirs ten times slower
        return datetime.fromtimestamp(int(head) // 1000, WIRE_UTC)
    except (ValueError, OverflowError, OSError):
        return None


def tick_refused(entry_id: bytes, tick: Tick) -> str | None:
    """Why a tick is refused (dead-lettered): its time is more than :data:`TICK_SKEW` from the time in
    its entry's id; None for a coordinator's."""
    added = arrival(entry_id)
    if added is None:
        return f"a tick in an entry whose id {as_text(entry_id)!r} tells no time"
    if abs(tick.now - added) <= TICK_SKEW:
        return None
    return (
        f"a tick at {tick.now.isoformat()} in an entry added at {added.isoformat()}: more than "
        f"{TICK_SKEW.seconds} s apart, so no coordinator's (a coordinator's tick is the server's time)"
    )


_TARGET_STREAM: Final = {
    Target.EVENTS: StreamKind.EVENTS,
    Target.TASKS: StreamKind.TASKS,
    Target.FINDINGS: StreamKind.FINDINGS,
}


def target_streams(keys: Keys, shard: int) -> dict[Target, str]:
    """The shard's stream key of each target but the inbox (whose key depends on the agent)."""
    return {target: keys.stream(shard, kind) for target, kind in _TARGET_STREAM.items()}


@dataclass
class Batch:
    """The group states a batch changed, over the shard's committed ones, and the commit that stores
    what the batch did."""

    shard: int
    keys: Keys
    policy: Policy
    targets: dict[Target, str]
    """:func:`target_streams` of the shard."""
    dead_stream: str
    commit: Commit
    stored: Mapping[str, GroupState]
    """The shard's committed states (read only: the batch may yet fail to commit)."""
    tombstones: Tombstones = field(default_factory=dict)
    """The shard's retired groups (read only, like ``stored``; see :mod:`coordinator.tombstones`)."""
    ticked_at: datetime | None = None
    """The ``now`` of the shard's last tick (the batch's own once it applied one): a new group starts with
    it, as if it had been there for that tick, so that its first entries count as sent after it
    (:mod:`coordinator.rules.timeouts`)."""
    groups: dict[str, GroupState] = field(default_factory=dict)
    """The states of the groups the batch changed (not a copy of the shard's: a shard holds thousands)."""
    runs: dict[str, Run] = field(default_factory=dict)
    """Per group, what applying its entries in a row keeps (see :class:`~coordinator.rules.run.Run`):
    the ids :meth:`write` adds to its window at once, and the records the batch may have replaced."""
    emitted: list[Emit] = field(default_factory=list)
    types_in: dict[EnvelopeType, int] = field(default_factory=dict)
    dead: list[tuple[str, str]] = field(default_factory=list)
    """``(entry id, reason)`` of each entry the batch dead-letters (logged once it is committed)."""
    retired: set[str] = field(default_factory=set)
    """The groups a tick of the batch retired, whose stored state the commit deletes (a later entry of
    the batch may have started one again, as a new group)."""
    tombs: dict[str, frozenset[str]] = field(default_factory=dict)
    """The tombstones the batch changes: the agents of a group it retired, or that a retired group's agent
    left (back with its AGENT_STARTED); an empty set when the tombstone goes."""
    arrived: datetime | None = None
    """The floor of the current entry's time (:attr:`~coordinator.rules.step.Step.floor`): the second it
    was added to the stream in (:func:`arrival`), read from the first entry of the batch with the same
    first ten digits of its id (the same second, for every id since 2001): reading a time from every id
    would cost a few percent of an entry. A batch of a backlog that spans minutes (entries that waited
    for a coordinator) still gives each entry its own second."""
    human_key: bytes | None = field(default=None, repr=False)
    """When given, a human command is applied only when its entry is signed with it (:mod:`bus.human_key`)."""
    _second: bytes = field(default=b"", init=False, repr=False)

    def add(self, entry_id: bytes, data: bytes | Fields | None, deliveries: int, max_deliveries: int) -> None:
        """Apply one entry (the next in stream order), or dead-letter it when it cannot be applied."""
        self.commit.entry_ids.append(entry_id)
        second = entry_id[:10]
        if second != self._second:
            self._second, self.arrived = second, arrival(entry_id)
        others: Sequence[tuple[bytes, bytes]] = ()  # not a list: no allocation for the common entry
        if isinstance(data, Fields):
            data, others = data.split()
        if data is None and others:
            reason: str | None = f"entry has no 'data' field (fields: {field_names(n for n, _ in others)})"
        elif others and any(name == b"data" for name, _ in others):
            reason = "entry has more than one 'data' field: which one it means is not known"
        else:
            reason = self._apply_entry(entry_id, data, deliveries, max_deliveries, others)
        if reason:
            self.dead.append((as_text(entry_id), reason))
            letter = dead_letter_fields(
                stream=self.commit.stream_key,
                entry_id=as_text(entry_id),
                raw=data,
                reason=reason,
                deliveries=deliveries,
                others=others,
            )
            self.commit.xadd(self.dead_stream, letter)

    def write(self) -> None:
        """Complete the batch's states and add to the commit the writes that turn the stored states into
        them."""
        limit = self.policy.idempotency_window
        for gid in sorted(self.retired):
            if gid in self.stored:
                delete_group(self.commit, self.keys, self.shard, gid)
            final = self.groups[gid]
            if final.retired_at is not None:  # not started anew since (which set its tombstone then)
                self.tombs[gid] = self._tomb(gid) | frozenset(final.agents)
        for gid, agents in sorted(self.tombs.items()):
            if agents:
                bury(self.commit, self.keys, self.shard, gid, agents)
            elif gid in self.tombstones:
                unbury(self.commit, self.keys, self.shard, gid)
        for gid, applied in self.groups.items():  # replacing values, not keys, while iterating
            if applied.retired_at is not None:
                continue
            run = self.runs[gid]
            window = applied.window.extend(tuple(run.ids), limit)
            state = self.groups[gid] = evolve(applied, window=window)
            touched = Touched(run.agents_touched, run.findings_touched)
            stored = None if gid in self.retired else self.stored.get(gid)
            write_changes(self.commit, self.keys, self.shard, stored, state, limit, touched)

    def committed(self, states: dict[str, GroupState], tombstones: dict[str, frozenset[str]]) -> None:
        """Bring the shard's ``states`` and ``tombstones`` to what the batch committed (after
        :meth:`write`, once the commit succeeded): the changed groups' new states, the retired ones gone."""
        for gid, state in self.groups.items():
            if state.retired_at is None:
                states[gid] = state
            else:
                states.pop(gid, None)
        for gid, agents in self.tombs.items():
            if agents:
                tombstones[gid] = agents
            else:
                tombstones.pop(gid, None)

    def _apply_entry(
        self,
        entry_id: bytes,
        data: bytes | None,
        deliveries: int,
        max_deliveries: int,
        others: Sequence[tuple[bytes, bytes]],
    ) -> str | None:
        """Apply one entry to the working copy; the dead-letter reason when it cannot be applied."""
        if deliveries > max_deliveries:
            return f"delivered {deliveries} times without being committed"
        if data is None:
            return DELETED_REASON
        try:
            envelope = decode(data)
        except DecodeError as exc:
            return str(exc)
        head = envelope.__dict__  # one attribute read of the model rather than two
        type_ = head["type"]
        self.types_in[type_] = self.types_in.get(type_, 0) + 1
        if type_ is EnvelopeType.TICK:
            return self._apply_tick(entry_id, envelope)
        gid = head["group_id"]
        # The group must live on this shard: a raw publisher that computed another shard would otherwise
        # split the group in two states, and its directives would reach no adapter.
        if gid not in self.groups and gid not in self.stored and self.keys.shard_of(gid) != self.shard:
            return f"group {gid!r} belongs to shard {self.keys.shard_of(gid)}, not {self.shard}"
        unsigned = None
        if self.human_key is not None and head["kind"] is Kind.HUMAN:
            unsigned = signature_problem(self.human_key, data, others)
        return unsigned or self._apply_to(gid, envelope)

    def _apply_tick(self, entry_id: bytes, envelope: Envelope) -> str | None:
        """Apply a tick to every group of the shard; the dead-letter reason of one that is no
        coordinator's."""
        if isinstance(envelope.payload, Tick):
            refused = tick_refused(entry_id, envelope.payload)
            if refused:
                return refused
            self.ticked_at = envelope.payload.now
        for gid in sorted(self.stored.keys() | self.groups.keys()):  # in an order a reload keeps
            state = self.groups[gid] if gid in self.groups else self.stored[gid]
            if state.retired_at is not None:  # by an earlier tick of the batch
                continue
            reason = self._apply_to(gid, envelope)
            if reason:  # one group's rule bug must not stop the clock of the others
                log.error("tick skipped group %s: %s", gid, reason, extra={"group_id": gid})
        return None

    def _tomb(self, gid: str) -> frozenset[str]:
        """The agents of the group's tombstone, as the batch has it so far (none: no tombstone)."""
        tomb = self.tombs.get(gid)
        return tomb if tomb is not None else self.tombstones.get(gid, _NO_AGENTS)

    def _apply_to(self, gid: str, envelope: Envelope) -> str | None:
        state = self.groups.get(gid)
        if state is None:
            state = self.stored.get(gid)
        run = self.runs.get(gid)
        tomb = self._tomb(gid) if self.tombs or self.tombstones else _NO_AGENTS  # mostly none at all
        if tomb or (state is not None and state.retired_at is not None):  # else admit() applies it
            admission = admit(state, tomb, envelope)
            if admission.late is Late.DEAD_LETTERED:
                return late_reason(envelope)
            if admission.late is Late.DROPPED:
                log.debug(
                    "%s of retired group %s: dropped", envelope.type.value, gid, extra={"group_id": gid}
                )
                return None
            if admission.tomb is not None:
                self.tombs[gid] = admission.tomb
            if admission.anew:
                state = None
        if state is None:  # a new group, or a retired one that starts anew
            state, run = GroupState(group_id=gid, ticked_at=self.ticked_at), None
        if run is None:
            run = self.runs[gid] = Run()
        try:
            outcome = apply(state, envelope, self.policy, run, self.arrived)
        except Exception as exc:  # a rule bug must not stop the shard: dead-letter the entry
            log.exception("rule failed on %s", envelope.id, extra={"group_id": gid})
            return f"rule failed: {type(exc).__name__}: {exc}"
        self._record(gid, envelope, state, outcome)
        return None

    def _record(self, gid: str, envelope: Envelope, state: GroupState, outcome: Outcome) -> None:
        """Keep what applying ``envelope`` to the group's ``state`` gave, and add its emits to the commit."""
        if outcome.duplicate:
            log.debug("envelope %s was applied before: dropped", envelope.id, extra={"group_id": gid})
        if outcome.state is not state:  # a new group's first entry always makes a new state
            self.groups[gid] = outcome.state
        if outcome.state.retired_at is not None:
            self.retired.add(gid)
        for emit in outcome.emits:
            key = self.targets.get(emit.target) or self.keys.inbox(self.shard, emit.agent_id)
            self.commit.xadd_data(key, emit.data)
        if outcome.superseded:  # rare: no loop (and its iterator) for every entry
            for agent_id, envelope_ids in outcome.superseded:
                self.commit.ack_unread(self.keys.inbox(self.shard, agent_id), _INBOX_GROUP, envelope_ids)
        self.emitted += outcome.emits
