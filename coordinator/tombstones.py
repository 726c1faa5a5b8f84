"""What a shard remembers of its retired groups: their ids and their agents' ids, and nothing else.

A retired group's state is deleted (:mod:`coordinator.rules.retirement`), but its agents' adapters may
still run, and an entry of theirs may still come (a heartbeat, a duplicate re-published): applied to no
state, it would start the group again with that agent running, to be declared lost and retried. The
tombstone tells such entries apart. In a shard's hash ``retired``: the group id -> the JSON list of its
agents' ids (a few bytes per group, against the kilobytes of a state).

Per entry of a group that has a tombstone (:func:`admit`):

- from one of its agents, a sign of life (heartbeat, progress, exit): dropped;
- from one of its agents, anything else: dead-lettered, saying why (nothing is lost without a word);
- AGENT_STARTED, or an entry of an agent it did not have: applied, to the group started anew when it has
  no state. The tombstone stays, but for the agent an AGENT_STARTED brought back: an adapter of an old
  agent still running would otherwise register that agent in the new group, to be declared lost there
  and retried. A group retired again gets the agents of both.

Ticks, and entries of an agent that the group as it is now knows (the rules may register an old id again:
a retry's id is the same in each of the group's lives), are the live group's, whatever the tombstone says.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import Enum
from typing import Final, NamedTuple

import orjson

from bus.connection import Client
from bus.envelope import Envelope, EnvelopeType
from bus.errors import DecodeError
from bus.keys import Keys
from coordinator.commit import Commit
from coordinator.state import GroupState
from coordinator.store import stored_text

__all__ = [
    "Admission",
    "Late",
    "Tombstones",
    "admit",
    "bury",
    "late_reason",
    "load_tombstones",
    "tombstones_of",
    "unbury",
]

Tombstones = Mapping[str, frozenset[str]]
"""A shard's retired groups: group id -> its agents' ids."""

_NO_AGENTS: Final = frozenset[str]()
_SIGNS_OF_LIFE: Final = frozenset({EnvelopeType.HEARTBEAT, EnvelopeType.PROGRESS, EnvelopeType.AGENT_EXITED})


def retired_key(keys: Keys, shard: int) -> str:
    return keys.state(shard, "retired")


def bury(commit: Commit, keys: Keys, shard: int, group_id: str, agents: frozenset[str]) -> None:
    """Add to ``commit`` the tombstone of a group retired by it."""
    commit.hset(retired_key(keys, shard), group_id, orjson.dumps(sorted(agents)))


def unbury(commit: Commit, keys: Keys, shard: int, group_id: str) -> None:
    """Add to ``commit`` the removal of a group's tombstone (its agents all came back)."""
    commit.hdel(retired_key(keys, shard), group_id)


class Late(Enum):
    """What becomes of an entry of a retired group."""

    APPLIED = "applied"
    DROPPED = "dropped"
    DEAD_LETTERED = "dead-lettered"


def _late(envelope: Envelope, agents: frozenset[str]) -> Late:
    """What becomes of ``envelope``, of a retired group whose agents were ``agents``."""
    if envelope.type is EnvelopeType.AGENT_STARTED or envelope.agent_id not in agents:
        return Late.APPLIED
    return Late.DROPPED if envelope.type in _SIGNS_OF_LIFE else Late.DEAD_LETTERED


class Admission(NamedTuple):
    """What becomes of an entry of a group with a tombstone, or one retired by an earlier entry."""

    late: Late
    anew: bool
    """Applied to the group started anew: an empty state in place of none, or of the retired one."""
    tomb: frozenset[str] | None
    """The group's tombstone after the entry when the entry changes it (empty: it goes)."""


def admit(state: GroupState | None, tomb: frozenset[str], envelope: Envelope) -> Admission:
    """What becomes of ``envelope`` of a group whose state is ``state`` (None: none is kept) and whose
    tombstone names ``tomb`` (empty: none). The one place the rules of this module's docstring live: the
    coordinator's batch applies them, and so does the check of a human command against what is queued.

    A ``state`` retired by an earlier entry (a tick of the same batch) counts as a tombstone naming its
    agents besides ``tomb``'s."""
    retired = state is not None and state.retired_at is not None
    members = tomb | frozenset(state.agents) if state is not None and retired else tomb
    if (
        members
        and state is not None
        and not retired
        and (envelope.type is EnvelopeType.TICK or envelope.agent_id in state.agents)
    ):
        # a tick (its agent id is a coordinator's name), or an agent of the group as it is now (one the
        # rules registered again: a retry's id is the same in each of the group's lives)
        members = _NO_AGENTS
    anew = state is None or retired
    if not members:
        return Admission(Late.APPLIED, anew, None)
    late = _late(envelope, members)
    if late is not Late.APPLIED:
        return Admission(late, False, None)
    # an AGENT_STARTED of one of them takes it out (its entries count again); a retired group gets one
    left = members - {envelope.agent_id} if envelope.type is EnvelopeType.AGENT_STARTED else members
    return Admission(late, anew, left if retired or left != members else None)


def late_reason(envelope: Envelope) -> str:
    """The dead-letter reason of an entry :func:`admit` dead-letters."""
    return (
        f"group {envelope.group_id!r} was retired, with agent {envelope.agent_id!r} in it: its "
        f"{envelope.type.value} came after (an AGENT_STARTED of the agent brings it back)"
    )


async def load_tombstones(client: Client, keys: Keys, shard: int) -> dict[str, frozenset[str]]:
    """The shard's tombstones; a :class:`DecodeError` when one is corrupt."""
    key = retired_key(keys, shard)
    raw = await client.hgetall(key)
    return {stored_text(name, key): _agents(name, value) for name, value in raw.items()}


async def tombstones_of(client: Client, keys: Keys, group_ids: Iterable[str]) -> dict[str, frozenset[str]]:
    """The tombstones of those of ``group_ids`` that have one; a :class:`DecodeError` when one is corrupt."""
    by_shard: dict[int, list[str]] = {}
    for gid in group_ids:
        by_shard.setdefault(keys.shard_of(gid), []).append(gid)
    tombstones: dict[str, frozenset[str]] = {}
    for shard, gids in sorted(by_shard.items()):
        values = await client.hmget(retired_key(keys, shard), gids)
        tombstones |= {gid: _agents(gid, value) for gid, value in zip(gids, values, strict=True) if value}
    return tombstones


def _agents(name: str | bytes, value: str | bytes) -> frozenset[str]:
    try:
        agents = orjson.loads(value)
    except orjson.JSONDecodeError:
        agents = None
    if not isinstance(agents, list) or not all(isinstance(a, str) for a in agents):
        raise DecodeError(f"invalid tombstone of group {name!r}: {value!r:.200}")
    return frozenset(agents)
