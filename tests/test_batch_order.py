"""A tick's batch writes the same commit whatever the order of the shard's states in memory.

After a take-over the states are in the order they were loaded, not the order the groups appeared: the
entries a tick emits across groups must still come out in one order (the same bytes on the streams).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from rules_kit import T0, Feed, stream_id

from bus.envelope import encode, new_envelope
from bus.events import AgentStarted, Tick
from bus.findings import Finding
from bus.keys import Keys, StreamKind
from bus.signals import Progress
from coordinator.batch import Batch, target_streams
from coordinator.commit import Commit
from coordinator.policy import Policy
from coordinator.state import GroupState
from coordinator.window import IdWindow

KEYS = Keys("order", 1)
POLICY = Policy(heartbeat_timeout_seconds=120, lost_timeout_seconds=900)
LATER = T0 + timedelta(seconds=200)
TICK = encode(new_envelope(Tick(now=LATER), agent_id="c", group_id="*", id="tick-1", ts=LATER))


def _states() -> dict[str, GroupState]:
    states = {}
    for group in ("g-2", "g-1", "g-3"):
        feed = Feed(POLICY, group=group)
        feed.send(AgentStarted(), f"agent-of-{group}", at=0)
        states[group] = feed.state
    return states


def _commit(stored: dict[str, GroupState]) -> tuple[list[bytes], list[bytes]]:
    commit = Commit("lease", KEYS.stream(0, StreamKind.SIGNALS), "version")
    batch = Batch(0, KEYS, POLICY, target_streams(KEYS, 0), KEYS.stream(0, StreamKind.DEAD), commit, stored)
    batch.add(stream_id(LATER), TICK, 1, 5)
    assert batch.dead == []
    batch.write()
    return commit.script_args("token", "coordinator", 5000, 0)


def test_a_tick_commits_the_same_whatever_the_order_of_the_states() -> None:
    states = _states()
    assert _commit(states) == _commit(dict(reversed(states.items())))


@pytest.mark.parametrize(
    ("entry_id", "reason"),
    [
        (stream_id(LATER + timedelta(seconds=31)), "more than 30 s apart, so no coordinator's"),
        (stream_id(LATER - timedelta(seconds=31)), "more than 30 s apart, so no coordinator's"),
        (b"tick-1", "whose id 'tick-1' tells no time"),
    ],
)
def test_a_tick_whose_time_is_not_its_entry_s_changes_nothing(entry_id: bytes, reason: str) -> None:
    commit = Commit("lease", KEYS.stream(0, StreamKind.SIGNALS), "version")
    batch = Batch(
        0, KEYS, POLICY, target_streams(KEYS, 0), KEYS.stream(0, StreamKind.DEAD), commit, _states()
    )
    batch.add(entry_id, TICK, 1, 5)
    [(_, refused)] = batch.dead
    assert reason in refused
    assert (batch.groups, batch.ticked_at) == ({}, None)


def _applied_in_batches(
    entries: list[tuple[bytes, bytes]], size: int, policy: Policy = POLICY, *, reloaded: bool = False
) -> tuple[list[bytes], dict[str, GroupState]]:
    """``entries`` applied in batches of ``size`` as a shard loop applies them: what was emitted, the
    states. ``reloaded``: each batch's states as read back from storage, their windows the last ids only."""
    states: dict[str, GroupState] = {}
    ticked_at, emitted = None, []
    for start in range(0, len(entries), size):
        commit = Commit("lease", KEYS.stream(0, StreamKind.SIGNALS), "version")
        dead = KEYS.stream(0, StreamKind.DEAD)
        if reloaded:
            limit = policy.idempotency_window
            for gid, state in states.items():
                ids = [i for chunk in state.window.chunks for i in chunk][-limit:]
                states[gid] = state.model_copy(update={"window": IdWindow().extend(ids, limit)})
        batch = Batch(0, KEYS, policy, target_streams(KEYS, 0), dead, commit, states, {}, ticked_at)
        for entry_id, data in entries[start : start + size]:
            batch.add(entry_id, data, 1, 5)
        assert batch.dead == []
        batch.write()
        emitted += [emit.data for emit in batch.emitted]
        batch.committed(states, {})
        ticked_at = batch.ticked_at
    return emitted, states


def test_where_the_batches_are_cut_changes_nothing() -> None:
    """Senders' clocks behind the server's: each entry's time is brought up to when it reached the stream,
    read from its batch's first entry of the same second. A batch cut in the middle of a second must not
    make an agent's time, nor the timeouts of the ticks after, differ from the same entries cut elsewhere."""
    behind = T0 - timedelta(minutes=10)  # the agents' clock
    entries = []
    for n in range(40):
        at = T0 + timedelta(milliseconds=n * 370)  # a few entries each second, at odd milliseconds
        agent = f"agent-{n % 3}"
        payload = AgentStarted() if n < 3 else Progress(agent_id=agent, percent=n)
        entries.append(
            (stream_id(at), encode(new_envelope(payload, agent_id=agent, group_id="g", ts=behind)))
        )
    for seconds in (140, 150, 1000):  # ticks that time the agents out, then lose them
        now = T0 + timedelta(seconds=seconds)
        tick = new_envelope(Tick(now=now), agent_id="c", group_id="*", id=f"tick-{seconds}", ts=now)
        entries.append((stream_id(now), encode(tick)))
    results = [_applied_in_batches(entries, size) for size in (1, 2, 3, 7, 100)]
    assert all(result == results[0] for result in results[1:])
    assert any(b"timed_out" in data for data in results[0][0])  # the ticks did time agents out


@pytest.mark.parametrize(("newer", "copies"), [(4, 1), (5, 2)], ids=["within", "past"])
def test_a_duplicate_at_the_edge_of_the_window_is_dropped_or_applied_wherever_the_batches_are_cut(
    newer: int, copies: int
) -> None:
    """A window holds up to a chunk's worth of ids more than its limit in memory, and exactly the limit
    read back from storage: a duplicate just past the limit was dropped or applied again depending on
    where batches were cut and on a reload. It is one among the last ``idempotency_window`` ids."""
    policy = POLICY.model_copy(update={"idempotency_window": 5})
    first = encode(
        new_envelope(Finding(title="the-repeated-one"), agent_id="a", group_id="g", id="dup", ts=T0)
    )
    entries = [(stream_id(T0), first)]
    for n in range(newer):
        later = new_envelope(Progress(agent_id="a", percent=2 + n), agent_id="a", group_id="g", ts=T0)
        entries.append((stream_id(T0 + timedelta(milliseconds=n + 1)), encode(later)))
    entries.append((stream_id(T0 + timedelta(seconds=1)), first))
    results = [
        _applied_in_batches(entries, size, policy, reloaded=reloaded)[0]
        for size in (1, 2, 3, 100)
        for reloaded in (False, True)
    ]
    assert all(result == results[0] for result in results[1:])
    assert sum(b"the-repeated-one" in data for data in results[0]) == copies, results[0]  # its copies
