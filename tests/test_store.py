"""The stored form of group states: what a batch writes reads back as the state the rules made."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rules_kit import GROUP, Feed, answers, clarification, delegate, one, stop_dependency
from test_rules_properties import POLICY, SETTINGS, Run, batches, script_st

from bus.envelope import EnvelopeType
from bus.errors import DecodeError
from bus.events import AgentExited, AgentStarted
from bus.keys import Keys
from bus.signals import ClarificationNeeded
from coordinator.commit import Commit
from coordinator.rules import apply
from coordinator.rules.run import Run as BatchRun
from coordinator.state import GroupState
from coordinator.store import Touched, decode_slots, group_key, load_state, merged_key, write_changes

KEYS = Keys("store", 4)
LIMIT = 1000


def _write(
    hashes: dict[str, dict[str, bytes]], old: GroupState | None, new: GroupState, touched: Touched
) -> None:
    """Play the hash writes of one batch's commit (HSET, HDEL of the group's hashes) onto ``hashes``, by
    key.

    They are read from what the commit script unpacks: a MessagePack ``array 32`` of ``str 32`` items, the
    ops laid out as :data:`coordinator.commit.COMMIT_SCRIPT` reads them.
    """
    commit = Commit("lease", "signals", "version")
    write_changes(commit, KEYS, 0, old, new, LIMIT, touched)
    keys, argv = commit.script_args("token", "coordinator", 5000, 0)
    data = argv[-1]
    assert data[0] == 0xDD
    items, at = [], 5
    for _ in range(int.from_bytes(data[1:5], "big")):
        assert data[at] == 0xDB
        size = int.from_bytes(data[at + 1 : at + 5], "big")
        items.append(data[at + 5 : at + 5 + size])
        at += 5 + size
    i = 0
    while i < len(items):
        op = items[i].decode()
        if op in "HD":
            fields = hashes.setdefault(keys[int(items[i + 1]) - 1].decode(), {})
            if op == "H":
                fields[items[i + 2].decode()] = items[i + 3]
            else:
                del fields[items[i + 2].decode()]
        i += {"H": 4, "D": 3, "S": 3, "X": 3, "L": 4}[op] + (int(items[i + 2]) if op in "XL" else 0)


def _read(hashes: dict[str, dict[str, bytes]], state: GroupState) -> GroupState:
    """The state read back from ``hashes``, with the ids of ``state``'s window as its stored list."""
    fields = hashes.get(group_key(KEYS, 0, GROUP), {})
    slots = decode_slots(hashes.get(merged_key(KEYS, 0, GROUP), {}))
    return load_state(GROUP, fields, [i for chunk in state.window.chunks for i in chunk], slots)


@SETTINGS
@given(script=script_st, data=st.data())
def test_the_writes_of_each_batch_read_back_as_its_state(
    script: list[tuple[tuple[Any, ...], int]], data: st.DataObject
) -> None:
    played = Run()
    played.play(script)
    hashes: dict[str, dict[str, bytes]] = {}
    stored: GroupState | None = None
    state = GroupState(group_id=GROUP)
    for batch in batches(played.envelopes, data):
        run = BatchRun()
        for envelope in batch:
            state = apply(state, envelope, POLICY, run).state
        state = state.model_copy(update={"window": state.window.extend(tuple(run.ids), LIMIT)})
        _write(hashes, stored, state, Touched(run.agents_touched, run.findings_touched))
        assert _read(hashes, state) == state
        stored = state


def test_values_orjson_cannot_write_are_stored_by_pydantic() -> None:
    """An agent's signal may carry extra fields of its own, which orjson cannot always write (an integer
    beyond 64 bits): such records are stored as pydantic writes them."""
    feed = Feed()
    feed.send(AgentStarted(task="scan", name="security-auditor"), "a")
    asked = clarification("a").model_dump()
    feed.send(ClarificationNeeded.model_validate({**asked, "ticket": 2**70}), "a")
    feed.send(stop_dependency("b"), "b")
    feed.send(delegate("c", priority="P2"), "c")
    questions = feed.state.agents["a"].questions
    assert questions is not None and questions.model_extra == {"ticket": 2**70}
    hashes: dict[str, dict[str, bytes]] = {}
    _write(hashes, None, feed.state, Touched(set(), set()))
    assert _read(hashes, feed.state) == feed.state


def test_a_resume_launch_kept_for_the_next_tick_reads_back_and_records_stored_before_it_load() -> None:
    feed = Feed()
    feed.send(AgentStarted(task="scan"), "parent")
    child = one(feed.send(delegate("parent"), "parent"), EnvelopeType.LAUNCH).new_agent_id
    feed.send(clarification(child), child)
    feed.send(AgentExited(exit_code=0, resumable=False), child)
    feed.send(answers(("Q1", "Both"), ("Q2", "3.0-beta")), child)
    relaunch = feed.state.agents[child].relaunch
    assert relaunch is not None and "A1: Both" in relaunch.context
    hashes: dict[str, dict[str, bytes]] = {}
    _write(hashes, None, feed.state, Touched(set(), set()))
    assert _read(hashes, feed.state) == feed.state
    before = (
        b'{"agent_id": "a1", "registered_at": "2026-01-11T08:00:00Z", "last_seen": "2026-01-11T08:00:00Z"}'
    )
    assert load_state("g", {b"a:a1": before}, []).agents["a1"].relaunch is None


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {b"a:a1": b"[]"},
            "invalid stored state of group g, field 'a:a1': AgentRecord: Input should be an object",
        ),
        (
            {b"meta": b'{"x": 1}'},
            "invalid stored state of group g: GroupState.x: Extra inputs are not permitted",
        ),
        (
            {b"d:r1": b"garbage"},
            "invalid stored state of group g, field 'd:r1': Delegation: Invalid JSON: expected value",
        ),
    ],
)
def test_a_damaged_stored_state_is_a_one_line_error(fields: dict[bytes, bytes], message: str) -> None:
    with pytest.raises(DecodeError) as caught:
        load_state("g", fields, [])
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value) and "errors.pydantic.dev" not in str(caught.value)
    with pytest.raises(
        DecodeError, match=r"^invalid stored merged finding 'k': FindingSlot: Invalid JSON[^\n]*$"
    ):
        decode_slots({b"k": b"garbage"})


def test_a_stored_merged_finding_without_reports_is_a_one_line_error() -> None:
    # the merged view takes a slot's best report: one without any was a traceback there
    empty = b'{"location": "a.py:1", "category": "SEC", "reports": {}}'
    with pytest.raises(
        DecodeError, match=r"^invalid stored merged finding 'k': FindingSlot.reports: [^\n]*$"
    ):
        decode_slots({b"k": empty})
