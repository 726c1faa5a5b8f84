"""Human commands published but not applied yet: what ``inbox`` shows as queued, and what a second
command for the same thing would be rejected for.

A human command is an entry of its group's shard stream; a coordinator applies it in order. While none
runs (or one is paused), a command waits there and the state the views read does not show it: the
question still looks open, and a second answer, queued behind the first, would be rejected when the
first resumes the agent, with only the coordinator's log to say so. So the views and the commands also
read the entries no coordinator has applied: the ones its consumer group has not been given yet and the
ones given but not acknowledged (a commit acknowledges what it applied).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, cast

from bus.connection import Client, as_text, translated
from bus.consumer import stream_entries
from bus.directives import HumanAnswer, HumanApprove, HumanDeny
from bus.envelope import Envelope, EnvelopeType, Kind, Payload, decode, type_of
from bus.errors import DecodeError
from bus.fields import Model
from bus.keys import ConsumerGroup, Keys, StreamKind
from coordinator.state import GroupState

__all__ = ["QueuedCommand", "load_queued", "open_questions", "superseded"]

_PAGE: Final = 1000
_PENDING_MAX: Final = 100_000
"""A coordinator holds at most a few batches of 100 entries per shard unacknowledged."""
_T = EnvelopeType
_BLOCKER: Final = frozenset({_T.RESOLVE, _T.RECOVER})
"""Either settles an agent's blocker."""
_DELEGATION: Final = frozenset({_T.APPROVE, _T.DENY})
_REOPENED_BY: Final = {_T.ANSWER: _T.CLARIFICATION_NEEDED, _T.RESOLVE: _T.STOP_WORK, _T.RECOVER: _T.STOP_WORK}
"""The agent's signals that open again what a human command settles: new questions, a new blocker."""
_REOPENING: Final = frozenset(_REOPENED_BY.values())
_WORDS: Final = (b'"human"', *(f'"{t.value}"'.encode() for t in _REOPENING))


class QueuedCommand(Model):
    """A human command on its shard's stream that no coordinator has applied yet (or an agent's signal
    that opens again what one settles: :attr:`human` is false)."""

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

    @property
    def human(self) -> bool:
        return self.command not in _REOPENING


async def load_queued(client: Client, keys: Keys, shards: Iterable[int]) -> list[QueuedCommand]:
    """What is queued on ``shards`` and not applied yet, oldest first in each."""
    queued: list[QueuedCommand] = []
    with translated():
        for shard in shards:
            queued += await _shard(client, keys.stream(shard, StreamKind.SIGNALS))
    return queued


async def _shard(client: Client, stream: str) -> list[QueuedCommand]:
    group = ConsumerGroup.COORDINATOR.value
    if not await client.exists(stream):
        return []
    ours = [g for g in await client.xinfo_groups(stream) if as_text(g["name"]) == group]
    start, delivered, pending = "-", (0, -1), set[str]()
    if ours:
        delivered = _order(as_text(ours[0]["last-delivered-id"]))
        start = "(" + as_text(ours[0]["last-delivered-id"])
        if int(ours[0]["pending"]):  # a live coordinator may acknowledge them before they are listed
            given = await client.xpending_range(stream, group, "-", "+", _PENDING_MAX)
            pending = {as_text(cast(bytes, p["message_id"])) for p in given}
            start = min(pending, key=_order, default=start)
    found: list[QueuedCommand] = []
    while True:
        page = stream_entries([[stream, await client.xrange(stream, start, "+", count=_PAGE)]])
        for raw_id, fields in page:
            entry_id = as_text(raw_id)
            if entry_id in pending or _order(entry_id) > delivered:  # else applied (acknowledged)
                command = _command(entry_id, fields)
                found += [command] if command is not None else []
        if len(page) < _PAGE:
            return found
        start = "(" + as_text(page[-1][0])


def _order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)


def _command(entry_id: str, fields: Any) -> QueuedCommand | None:
    data = fields.get(b"data") if fields else None
    # Only what may be a human command or a signal that reopens what one settles is decoded: its JSON
    # names its kind or type. (One that spells them with escapes, which no client here writes, is applied
    # all the same; it is only not seen here.)
    if not isinstance(data, bytes) or not any(word in data for word in _WORDS):
        return None
    try:
        envelope = decode(data)
    except DecodeError:
        return None  # the coordinator dead-letters it
    if envelope.kind is not Kind.HUMAN and envelope.type not in _REOPENING:
        return None
    return _queued(entry_id, envelope)


def _queued(entry_id: str, envelope: Envelope) -> QueuedCommand:
    payload = envelope.payload
    return QueuedCommand(
        id=envelope.id,
        entry_id=entry_id,
        group_id=envelope.group_id,
        agent_id=envelope.agent_id,
        command=envelope.type,
        question_ids=tuple(a.question_id for a in payload.answers)
        if isinstance(payload, HumanAnswer)
        else (),
        request_id=payload.request_id if isinstance(payload, HumanApprove | HumanDeny) else None,
    )


def superseded(payload: Payload, agent_id: str, state: GroupState, queued: list[QueuedCommand]) -> str | None:
    """Why a new human command would be rejected because of the ones queued before it, which settle what
    it is about, or none: an answer when queued answers already answer every open question of the agent
    (they resume it), a resolve or recover when one is queued for the agent's blocker, an approve or deny
    of a request already decided by one, a second dismiss. Unless the agent asks again or stops again
    after them: then what the new command is about is not known before a coordinator applies them."""
    command = type_of(payload)
    mine = [q for q in queued if q.group_id == state.group_id]
    theirs = [q for q in mine if q.agent_id == agent_id]
    if isinstance(payload, HumanApprove | HumanDeny):
        earlier = [q for q in mine if q.command in _DELEGATION and q.request_id == payload.request_id]
        what = f"request {payload.request_id!r} is already decided"
    elif command is _T.ANSWER:
        earlier = [q for q in theirs if q.command is _T.ANSWER]
        if open_questions(state, agent_id) - {qid for q in earlier for qid in q.question_ids}:
            earlier = []  # they leave a question open: this one may answer it, or answer one again
        what = f"every open question of agent {agent_id!r} is answered"
    elif command in _BLOCKER:
        earlier = [q for q in theirs if q.command in _BLOCKER]
        what = f"the blocker of agent {agent_id!r} is already resolved"
    else:
        earlier = [q for q in theirs if q.command is command]
        what = f"the escalation of agent {agent_id!r} is already dismissed"
    reopening = _REOPENED_BY.get(command)
    if not earlier or any(
        q.command is reopening and _order(q.entry_id) > _order(earlier[0].entry_id) for q in theirs
    ):
        return None
    queued_as = " and ".join(f"the {q.command.value.lower()} queued as {q.id}" for q in earlier)
    return f"{what} by {queued_as}, which no coordinator has applied yet: this one would be rejected"


def open_questions(state: GroupState, agent_id: str) -> set[str]:
    """The questions of the agent's clarification that are not answered yet."""
    record = state.agents.get(agent_id)
    if record is None or record.questions is None:
        return set()
    return {q.question_id for q in record.questions.questions} - {a.question_id for a in record.answers}
