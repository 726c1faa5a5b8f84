"""An agent's lifecycle as seen through its own envelopes (signals, results, findings, adapter events).

- Any envelope from an agent the group does not know registers it (``running``, depth 0).
- Any envelope from an agent refreshes ``last_seen`` (never backwards, but by a tick: see
  :mod:`coordinator.rules.timeouts`); one from a ``timed_out`` or
  ``lost`` agent brings it back to ``running``: it was slow, not gone. Not a finding imported from a
  file (:data:`~bus.findings.IMPORTED_SOURCE`): whoever imports it, often long after, is not the agent.
- AGENT_STARTED names the agent and its task. AGENT_EXITED with a non-zero exit code of a ``running``
  agent that sent no completion makes it ``failed`` (and feeds status aggregation); a clean exit ends a
  turn. An agent that exits while it waits for an answer, a resolution or a delegate keeps its state:
  background agents end their run after such a signal and are resumed later. An exit after a completion
  changes nothing. An exit whose adapter stops reading the inbox may start the agent again
  (:func:`coordinator.rules.launch.after_exit`).
- PROGRESS records the percentage and message; it is not a decision and emits nothing.
"""

from __future__ import annotations

from bus.envelope import EnvelopeType
from bus.events import AgentExited, AgentStarted, AgentState, DecisionType
from bus.findings import IMPORTED_SOURCE
from bus.results import ResultStatus
from bus.signals import Progress
from coordinator.policy import agent_key
from coordinator.rules.aggregation import finish
from coordinator.rules.launch import after_exit
from coordinator.rules.step import Step
from coordinator.rules.trusted import construct
from coordinator.state import AgentProgress, AgentRecord, Completion

__all__ = ["on_exited", "on_heartbeat", "on_progress", "on_started", "touch"]

_REVIVABLE = frozenset({AgentState.TIMED_OUT, AgentState.LOST})
_EXIT_FAILS = frozenset({AgentState.RUNNING, AgentState.TIMED_OUT})


def touch(step: Step) -> AgentRecord:
    """Register the sending agent if needed, and revive it if it had gone quiet.

    The step refreshes the agent's ``last_seen`` when it counts the entry (:meth:`Step.finish`), together
    with its other counters, so a sign of life costs one copy of the agent's record.
    """
    agent_id = step.agent_id
    watched = step.entry_type is not EnvelopeType.FINDING
    imported = not watched and step.envelope.__dict__["source"].startswith(IMPORTED_SOURCE)
    step.alive = not imported
    record = step.find(agent_id)
    if record is None:
        record = step.put(
            AgentRecord(agent_id=agent_id, registered_at=step.at, last_seen=step.at, watched=watched)
        )
        step.decide(DecisionType.STATE_CHANGED, agent_id, "registered on its first envelope")
        return record
    if watched and not record.watched:
        record = step.update(agent_id, watched=True)
    if record.state in _REVIVABLE and not imported:
        step.transition(
            agent_id,
            AgentState.RUNNING,
            DecisionType.STATE_CHANGED,
            f"heard from again after {record.state.value}",
        )
        record = step.agent(agent_id)
    return record


def on_heartbeat(step: Step) -> None:
    """Nothing beyond :func:`touch`."""


def on_started(step: Step) -> None:
    event = step.payload(AgentStarted)
    record = step.agent(step.envelope.agent_id)
    changes: dict[str, object] = {
        "exited": False,
        "exit_code": None,
        "unreachable": False,
        "sent": (),
        "sent_ids": (),
    }
    if event.name and event.name.strip():
        changes["name"] = agent_key(event.name)
    if event.task and event.task.strip() and not record.task:
        changes["task"] = event.task
    step.update(record.agent_id, **changes)


def on_exited(step: Step) -> None:
    event = step.payload(AgentExited)
    record = step.update(
        step.envelope.agent_id,
        exited=True,
        exit_code=event.exit_code,
        unreachable=event.resumable is False,
    )
    # A clean exit without a completion report ends a turn: turn-based agents (claude -p, codex exec)
    # exit after every answer and are resumed by their adapter. So does an end whose exit code nobody
    # knows (the end of a piped output, a watched process gone): failing it would retry an agent that
    # may be done. If nothing resumes the agent, the heartbeat timeout marks it timed_out and then
    # lost, which is retried like a failure; unless a launcher started it and a directive went to its
    # inbox during the session (see after_exit).
    if record.state in _EXIT_FAILS and event.exit_code not in (0, None):
        _failed(step, record, event)
    if event.resumable is False:
        after_exit(step, step.agent(record.agent_id))
    elif event.resumable and record.sent:
        step.update(record.agent_id, sent=(), sent_ids=())  # its adapter goes on reading the inbox


def _failed(step: Step, record: AgentRecord, event: AgentExited) -> None:
    summary = f"exited (exit code {event.exit_code}) without a completion report"
    if event.completed:
        summary += " reaching the coordinator (its adapter saw one)"
    if event.stderr_tail and event.stderr_tail.strip():
        summary += f"\n{event.stderr_tail.strip()}"
    completion = Completion(
        status=ResultStatus.FAILED,
        summary=summary,
        source=EnvelopeType.AGENT_EXITED,
        envelope_id=step.envelope.id,
    )
    finish(step, record.agent_id, completion, decision=DecisionType.STATE_CHANGED)


def on_progress(step: Step) -> None:
    signal = step.payload(Progress)
    progress = construct(AgentProgress, percent=signal.percent, message=signal.message, eta=signal.eta)
    step.update(step.envelope.agent_id, progress=progress)
