"""Which waits of an agent lend its launcher slot: only one for its own blocking delegation requests."""

from __future__ import annotations

from pathlib import Path

from rules_kit import delegate

from agents.delegate_wait import DelegateWait
from bus.directives import (
    AnswerItem,
    ClarificationResponse,
    DelegationApproved,
    DelegationCompleted,
    DelegationDenied,
)
from bus.envelope import Envelope, Payload, new_envelope


def envelope(payload: Payload) -> Envelope:
    return new_envelope(payload, agent_id="lead", group_id="g")


def test_only_a_wait_for_a_blocking_delegate_lends_the_slot(tmp_path: Path) -> None:
    idle, logged = tmp_path / "lead.idle", list[str]()
    wait = DelegateWait(idle, logged.append)
    parallel, blocking = delegate("lead"), delegate("lead", independence="blocks_current_work")
    wait.signalled([envelope(parallel)])
    wait.between_turns(True)
    assert not idle.exists()  # nothing it waits for: it keeps its slot
    wait.signalled([envelope(blocking)])
    wait.between_turns(True)
    assert idle.exists()
    wait.between_turns(False)  # a turn starts (the approval, say): the slot is taken again
    assert not idle.exists()
    request = blocking.request_id()
    for other in (
        DelegationApproved(request_id=request, new_agent_id="d1", task="t"),
        DelegationCompleted(request_id="dlg-other", delegate_agent_id="d2", status="SUCCESS", summary="s"),
        ClarificationResponse(answers=[AnswerItem(question_id="Q1", question="q?", answer="a")]),
    ):
        wait.directed(envelope(other))
        wait.between_turns(True)
        assert idle.exists(), other  # still waiting for this delegate
    wait.directed(
        envelope(
            DelegationCompleted(request_id=request, delegate_agent_id="d1", status="SUCCESS", summary="s")
        )
    )
    wait.between_turns(True)
    assert not idle.exists()  # its delegate answered: it waits for nothing it lent its slot for
    wait.signalled([envelope(blocking)])  # printed again (a recap): answered, it waits for nothing
    wait.between_turns(True)
    assert not idle.exists()
    second = delegate("lead", independence="blocks_current_work", task="Another task altogether")
    wait.signalled([envelope(second)])
    wait.directed(envelope(DelegationDenied(request_id=second.request_id(), reason="no")))
    wait.between_turns(True)
    assert not idle.exists() and logged == []


def test_a_file_that_cannot_be_written_is_said_and_changes_nothing_else(tmp_path: Path) -> None:
    logged = list[str]()
    wait = DelegateWait(tmp_path / "missing" / "lead.idle", logged.append)
    wait.signalled([envelope(delegate("lead", independence="blocks_current_work"))])
    wait.between_turns(True)
    assert len(logged) == 1 and "cannot create" in logged[0]


def test_a_request_naming_another_agent_is_answered_under_the_coordinator_s_id(tmp_path: Path) -> None:
    """The block names an example's agent id, not the agent's: the coordinator's id for it takes the
    sender as the requester, and so does the wait, which its answer then ends."""
    idle = tmp_path / "lead.idle"
    wait = DelegateWait(idle, list[str]().append)
    copied = delegate("example-agent", independence="blocks_current_work")
    wait.signalled([envelope(copied)])
    wait.between_turns(True)
    assert idle.exists()
    wait.directed(envelope(DelegationDenied(request_id=copied.request_id("lead"), reason="no")))
    wait.between_turns(True)
    assert not idle.exists()
