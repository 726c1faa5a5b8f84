"""Group state: the idempotency window and the stored JSON form."""

from __future__ import annotations

import pytest
from rules_kit import Feed, clarification, delegate, finding, result, stop_dependency

from bus.errors import DecodeError
from bus.events import AgentStarted
from coordinator.state import GroupState, IdWindow


def test_window_remembers_at_least_the_last_limit_ids() -> None:
    window = IdWindow()
    limit = 1000
    for i in range(5000):
        window = window.add(f"id-{i}", limit)
        assert min(i + 1, limit) <= len(window) < limit + IdWindow.CHUNK
    assert all(f"id-{i}" in window for i in range(4000, 5000))
    assert "id-0" not in window and "id-3000" not in window
    assert len(window) < limit + IdWindow.CHUNK


def test_window_add_leaves_the_original_unchanged_and_compares_by_content() -> None:
    first = IdWindow().add("a", 10)
    second = first.add("b", 10)
    assert "b" not in first and "a" in second and "b" in second
    rebuilt = IdWindow.model_validate_json(second.model_dump_json())
    assert rebuilt == second and "a" in rebuilt and "b" in rebuilt
    assert hash(rebuilt) == hash(second)


def test_state_round_trips_through_json() -> None:
    feed = Feed()
    feed.send(AgentStarted(task="scan", name="security-auditor"), "a")
    feed.send(clarification("a"), "a")
    feed.send(stop_dependency("b"), "b")
    feed.send(delegate("c", priority="P2"), "c")
    feed.send(result("qa-engineer", findings=[finding("")]), "d")
    data = feed.state.to_json()
    restored = GroupState.from_json(data)
    assert restored == feed.state
    assert restored.to_json() == data
    assert GroupState.model_validate_json(feed.state.model_dump_json()) == feed.state


def test_corrupt_state_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        GroupState.from_json(b"{not json")
    with pytest.raises(DecodeError):
        GroupState.from_json(b'{"group_id": 3, "agents": []}')
