"""A group started anew after its retirement keeps its tombstone, which holds back only the entries of its
old agents that the group as it is now does not know; ticks are not agents' entries at all."""

from __future__ import annotations

from datetime import timedelta

from rules_kit import T0, Feed, stream_id

from bus.envelope import encode, new_envelope
from bus.events import AgentStarted, AgentState, Heartbeat, Tick
from bus.keys import Keys, StreamKind
from coordinator.batch import Batch, target_streams
from coordinator.commit import Commit
from coordinator.policy import Policy
from coordinator.state import GroupState

KEYS = Keys("tombs", 1)
POLICY = Policy(heartbeat_timeout_seconds=120, lost_timeout_seconds=900)
LATER = T0 + timedelta(seconds=200)


def _batch(stored: dict[str, GroupState], tombstones: dict[str, frozenset[str]], *datas: bytes) -> Batch:
    commit = Commit("lease", KEYS.stream(0, StreamKind.SIGNALS), "version")
    batch = Batch(
        0, KEYS, POLICY, target_streams(KEYS, 0), KEYS.stream(0, StreamKind.DEAD), commit, stored, tombstones
    )
    for n, data in enumerate(datas):
        batch.add(stream_id(LATER, n), data, 1, 5)
    batch.write()
    return batch


def _started_anew() -> dict[str, GroupState]:
    """Group g as it is now: agents "new" and "again" (an id its earlier life had too, as a retry's is)."""
    feed = Feed(POLICY, group="g")
    feed.send(AgentStarted(), "new", at=0)
    feed.send(AgentStarted(), "again", at=0)
    return {"g": feed.state}


TOMBSTONES = {"g": frozenset({"old", "again", "coord-1"})}


def test_an_old_agent_the_group_knows_again_is_applied_one_it_does_not_is_dropped() -> None:
    beats = [
        encode(new_envelope(Heartbeat(pid=1), agent_id=agent, group_id="g", ts=T0 + timedelta(seconds=10)))
        for agent in ("again", "old")
    ]
    batch = _batch(_started_anew(), TOMBSTONES, *beats)
    assert batch.dead == []
    assert sorted(batch.groups["g"].agents) == ["again", "new"]  # "old" is not registered
    assert batch.groups["g"].agents["again"].applied == 2
    assert batch.tombs == {}


def test_a_tick_named_like_an_old_agent_still_applies_to_the_group() -> None:
    tick = encode(new_envelope(Tick(now=LATER), agent_id="coord-1", group_id="*", id="tick-1", ts=LATER))
    batch = _batch(_started_anew(), TOMBSTONES, tick)
    assert batch.dead == []
    states = {agent: record.state for agent, record in batch.groups["g"].agents.items()}
    assert states == {"new": AgentState.TIMED_OUT, "again": AgentState.TIMED_OUT}
