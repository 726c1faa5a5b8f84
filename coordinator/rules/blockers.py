"""The stop/resume protocol: a ``[STOP_WORK]`` opens a blocker; a human resolves it or picks a recovery.

- ``stop_reason: blocker`` -> the agent is ``blocked``; RESOLVE sends BLOCKER_RESOLVED (issue = the
  stop's ``details``, state restoration = its ``state_snapshot``, resume instructions = the human's, else
  to continue with the stop's ``blocked_work``, else to continue from the checkpoint).
- ``stop_reason: error`` (or ``blocker_type: error``) -> blocked too, and the decision lists the recovery
  patterns of seed 003. RECOVER sends ERROR_RECOVERY for the chosen option; ``delegate`` also launches an
  agent for the failing work. RESOLVE works for errors as well (the human fixed the cause), and RECOVER
  with ``skip_and_continue`` or ``delegate`` for any blocker (seed 000's resource-limit stop offers both).
- A stop on an external dependency from an agent that waits for delegates of its own (``blocks_current_work``)
  is that wait (seed 000's blocking delegation: "This agent: Will STOP_WORK until infrastructure ready ...
  Resume: When new agent completes"): no blocker opens, and the delegates' results resume the agent.
- ``stop_reason: completion`` -> treated as a completion report: SUCCESS, or PARTIAL when the stop lists
  ``blocked_work``, with ``completed_work`` as the summary.
- A stop from an agent whose outcome is decided is nothing to resume: it is kept as an unresolved blocker
  (:func:`coordinator.rules.aggregation.unresolved`), and the group's status is reported again.
"""

from __future__ import annotations

from typing import Final

from bus.directives import (
    BlockerResolved,
    ErrorRecovery,
    HumanRecover,
    HumanResolve,
    LaunchReason,
    RecoveryOption,
)
from bus.envelope import EnvelopeType
from bus.events import AgentState, DecisionType
from bus.results import ResultStatus
from bus.signals import BlockerType, StopReason, StopWork
from coordinator.rules.aggregation import finish, report_group, unresolved
from coordinator.rules.asked import asked_resume
from coordinator.rules.delegation import launch_limits
from coordinator.rules.holds import still_held, waits_for_delegation
from coordinator.rules.ids import recovery_agent_id, recovery_request_id
from coordinator.rules.launch import Launch, deliver, launch, priority_of
from coordinator.rules.recap import refuse_recap, settled
from coordinator.rules.step import Rejected, Step
from coordinator.state import EARLIER_BLOCKERS_KEPT, FINAL_STATES, AgentRecord, Completion, ViolationRule

__all__ = [
    "DEFAULT_RECOVERY",
    "is_error",
    "on_late_stop",
    "on_recover",
    "on_resolve",
    "on_stop",
    "open_blocker",
    "recoverable_stop",
]

DEFAULT_RECOVERY: Final = {
    RecoveryOption.RETRY_FROM_CHECKPOINT: "The cause of the error has been addressed. Restore from the "
    "checkpoint.",  # the directive says to retry (bus.directives.ErrorRecovery)
    RecoveryOption.SKIP_AND_CONTINUE: "Skip the problematic item and continue with the remaining work. "
    "Log the skipped item to SKIPPED_ITEMS.md for manual review.",
    RecoveryOption.DELEGATE: "Leave the work you stopped on to {agent}, which takes it over, "
    "and continue with the rest of your task.",
}


def is_error(stop: StopWork) -> bool:
    return stop.stop_reason is StopReason.ERROR or stop.blocker_type is BlockerType.ERROR


def on_stop(step: Step) -> None:
    stop = step.payload(StopWork)
    agent_id = step.envelope.agent_id
    if stop.stop_reason is StopReason.COMPLETION:
        _stop_as_completion(step, stop)
        return
    record = step.agent(agent_id)
    refuse_recap(record, stop)
    detail = f"{stop.kind}: {stop.details.strip()}"
    if _is_wait(record, step, stop):
        # Settled at once, so that the same stop quoted again once the agent is resumed is a recap.
        step.update(agent_id, settled=settled(record, stop))
        step.decide(DecisionType.STATE_CHANGED, agent_id, f"{detail}\ntaken as its wait for its delegates")
        return
    if is_error(stop):
        detail += "\nrecovery options: " + ", ".join(option.value for option in RecoveryOption)
    earlier = _still_open(record, stop)
    if earlier:
        detail += f"\nstill open with it: {len(earlier)} earlier blocker(s), resolved with it"
    step.transition(
        agent_id,
        AgentState.BLOCKED,
        DecisionType.BLOCKER_OPENED,
        detail,
        blocker=stop,
        earlier_blockers=earlier,
    )


def _is_wait(record: AgentRecord, step: Step, stop: StopWork) -> bool:
    """Whether ``stop`` is the agent's word that it waits for its delegates: a stop on an external
    dependency while it waits for a ``blocks_current_work`` delegate (or for a human to decide such a
    request). Any other stop (missing information, a resource limit, an error) needs a human all the same."""
    return (
        stop.stop_reason is StopReason.BLOCKER
        and stop.blocker_type is BlockerType.EXTERNAL_DEPENDENCY
        and waits_for_delegation(record, step.state)
    )


def _still_open(record: AgentRecord, stop: StopWork) -> tuple[StopWork, ...]:
    """The agent's blockers open when ``stop`` comes that it does not repeat, each once (the latest
    :data:`EARLIER_BLOCKERS_KEPT`)."""
    kept: list[StopWork] = []
    for other in (*record.earlier_blockers, record.blocker):
        if other is not None and other != stop and other not in kept:
            kept.append(other)
    return tuple(kept[-EARLIER_BLOCKERS_KEPT:])


def on_late_stop(step: Step) -> None:
    """A STOP_WORK from an agent whose outcome is decided (completed or failed): a completion is one
    more report of it, a recap of a stop it was resolved on is rejected (quoted in its final report, it
    comes after it), anything else a blocker left unresolved."""
    stop = step.payload(StopWork)
    if stop.stop_reason is StopReason.COMPLETION:
        _stop_as_completion(step, stop)
        return
    refuse_recap(step.agent(step.envelope.agent_id), stop)
    unresolved(step, step.envelope.agent_id, stop)
    report_group(step, step.envelope.agent_id)


def _stop_as_completion(step: Step, stop: StopWork) -> None:
    partial = bool(stop.blocked_work and stop.blocked_work.strip())
    completion = Completion(
        status=ResultStatus.PARTIAL if partial else ResultStatus.SUCCESS,
        summary=stop.completed_work or stop.details,
        source=EnvelopeType.STOP_WORK,
        envelope_id=step.envelope.id,
    )
    finish(step, step.envelope.agent_id, completion)


def open_blocker(record: AgentRecord) -> StopWork:
    """The agent's open blocker (also checked by the ``resolve`` command before it publishes)."""
    if record.blocker is None:
        why = ""
        if record.state in FINAL_STATES and record.completion is not None:
            left = any(v.rule is ViolationRule.UNRESOLVED_BLOCKER for v in record.violations)
            why = f" (it is {record.state.value}: nothing resumes it" + (
                "; `status` shows a blocker it left)" if left else ")"
            )
        raise Rejected(f"agent {record.agent_id!r} has no open blocker{why}")
    return record.blocker


def recoverable_stop(record: AgentRecord, option: RecoveryOption) -> StopWork:
    """The agent's open blocker, if ``option`` recovers it (also checked by the ``recover`` command).

    Any blocker may be skipped or handed to a new agent (seed 000's resource-limit and timeout stops offer
    both); a retry from the checkpoint is for an error, whose cause was fixed (a blocker is resolved)."""
    stop = open_blocker(record)
    if option is RecoveryOption.RETRY_FROM_CHECKPOINT and not is_error(stop):
        raise Rejected(
            f"agent {record.agent_id!r} is blocked, not stopped by an error: resolve it instead (or recover "
            "it with skip_and_continue or delegate)"
        )
    return stop


def on_resolve(step: Step) -> None:
    command = step.payload(HumanResolve)
    record = step.agent(step.envelope.agent_id)
    stop = open_blocker(record)
    then = command.instructions or _resume_instructions(stop)
    wait = still_held(record, step.state, then, blocker=None)  # e.g. questions it asked too
    directive = BlockerResolved(
        issue=record.blocker_details(stop),
        resolution=command.resolution,
        state_restoration=_restoration(stop),
        resume_instructions=wait or then,
    )
    deliver(step, record.agent_id, directive, hold=wait is not None)
    step.resume(
        record.agent_id,
        DecisionType.BLOCKER_RESOLVED,
        f"resolved: {command.resolution.strip()}",
        blocker=None,
        earlier_blockers=(),
        settled=settled(record, *record.earlier_blockers, stop),
    )


def _restoration(stop: StopWork) -> str | None:
    """What was completed (seed 000: the parent acknowledges it; seed 003's ``Completed:``), then the
    state snapshot."""
    completed = (stop.completed_work or "").strip()
    parts = [f"Completed:\n{completed}" if completed else "", (stop.state_snapshot or "").strip()]
    return "\n\n".join(part for part in parts if part) or None


def _resume_instructions(stop: StopWork) -> str:
    if (asked := asked_resume(stop.resume_requirements)) is not None:
        return asked
    if stop.blocked_work and stop.blocked_work.strip():
        return f"Continue with the work that was blocked:\n{stop.blocked_work.strip()}"
    # else not its resume_requirements: what the parent had to do, or a menu of options (seed 000's
    # examples), of which the resolution above says what was done or chosen
    if stop.state_snapshot and stop.state_snapshot.strip():
        return "Continue the task from the checkpoint above."
    return "Continue the task from where you stopped."


def on_recover(step: Step) -> None:
    command = step.payload(HumanRecover)
    record = step.agent(step.envelope.agent_id)
    stop = recoverable_stop(record, command.option)
    instructions = command.instructions or DEFAULT_RECOVERY[command.option]
    detail = f"recovery: {command.option.value}"
    if command.option is RecoveryOption.DELEGATE:
        limits = launch_limits(record, step.state, step.policy)
        if limits is not None:
            raise Rejected(f"no agent can take over {record.agent_id}'s work now: {limits}")
        delegate = _launch_takeover(step, record, stop)
        instructions = instructions.replace("{agent}", delegate)
        detail += f" to {delegate}"  # which `recover` prints: the agent to follow
    wait = still_held(record, step.state, instructions, blocker=None)  # e.g. questions it asked too
    directive = ErrorRecovery(
        option=command.option,
        instructions=wait or instructions,
        checkpoint=stop.state_snapshot,
        error=None if is_error(stop) else False,
    )
    deliver(step, record.agent_id, directive, hold=wait is not None)
    step.resume(
        record.agent_id,
        DecisionType.BLOCKER_RESOLVED,
        detail,
        blocker=None,
        earlier_blockers=(),
        settled=settled(record, *record.earlier_blockers, stop),
    )


def _launch_takeover(step: Step, record: AgentRecord, stop: StopWork) -> str:
    """The ``delegate`` recovery: a new agent takes over the work the agent stopped on.

    A human chose it, so the delegation checklist does not apply, but for its resources (checked first).
    """
    request_id = recovery_request_id(step.envelope.id)
    work = (stop.blocked_work or stop.details).strip()
    what, stopped = ("an error", "Error") if is_error(stop) else (f"blocked: {stop.kind}", "Blocker")
    context = "\n\n".join(
        part
        for part in (
            f"{stopped} reported by {record.agent_id}:\n{stop.details.strip()}",
            f"Checkpoint:\n{stop.state_snapshot.strip()}" if stop.state_snapshot else "",
        )
        if part
    )
    new = launch(
        step,
        Launch(
            new_agent_id=recovery_agent_id(request_id),
            request_id=request_id,
            reason=LaunchReason.DELEGATION,
            task=f"Take over work that agent {record.agent_id} could not complete ({what}):\n{work}",
            context=context,
            parent=record,
            depth=record.depth + 1,
            priority=priority_of(step.state, record),  # the work's own: it is the same work
        ),
    )
    return new.agent_id
