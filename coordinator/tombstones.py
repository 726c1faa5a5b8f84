"""What a shard remembers of its retired groups: their ids and their agents' ids, and nothing else.

A retired group's state is deleted (:mod:`coordinator.rules.retirement`), but its agents' adapters may
still run, and an entry of theirs may still come (a heartbeat, a duplicate re-published): applied to no
state, it would start the group again with that agent running, to be declared lost and retried. The
tombstone tells such entries apart. In a shard's hash ``retired``: the group id -> the JSON list of its
agents' ids (a few bytes per group, against the kilobytes of a state).

Per entry of a group that has a tombstone (see :meth:`coordinator.batch.Batch.add`):

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

from collections.abc import Mapping
from enum import Enum
from typing import Final

import orjson

from bus.connection import Client, as_text
from bus.envelope import Envelope, EnvelopeType
from bus.errors import DecodeError
from bus.keys import Keys
from coordinator.commit import Commit

__all__ = ["Late", "Tombstones", "bury", "late_entry", "late_reason", "load_tombstones", "unbury"]

Tombstones = Mapping[str, frozenset[str]]
"""A shard's retired groups: group id -> its agents' ids."""

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


def late_entry(envelope: Envelope, agents: frozenset[str]) -> Late:
    """What becomes of ``envelope``, of a retired group whose agents were ``agents``."""
    if envelope.type is EnvelopeType.AGENT_STARTED or envelope.agent_id not in agents:
        return Late.APPLIED
    return Late.DROPPED if envelope.type in _SIGNS_OF_LIFE else Late.DEAD_LETTERED


def late_reason(envelope: Envelope) -> str:
    """The dead-letter reason of an entry :func:`late_entry` dead-letters."""
    return (
        f"group {envelope.group_id!r} was retired, with agent {envelope.agent_id!r} in it: its "
        f"{envelope.type.value} came after (an AGENT_STARTED of the agent brings it back)"
    )


async def load_tombstones(client: Client, keys: Keys, shard: int) -> dict[str, frozenset[str]]:
    """The shard's tombstones; a :class:`DecodeError` when one is corrupt."""
    tombstones: dict[str, frozenset[str]] = {}
    for name, value in (await client.hgetall(retired_key(keys, shard))).items():
        try:
            agents = orjson.loads(value)
        except orjson.JSONDecodeError:
            agents = None
        if not isinstance(agents, list) or not all(isinstance(a, str) for a in agents):
            raise DecodeError(f"invalid tombstone of group {as_text(name)!r}: {value!r:.200}")
        tombstones[as_text(name)] = frozenset(agents)
    return tombstones
