"""Starting a new agent: a launch request on the tasks stream and the agent's record in the group."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from bus.directives import (
    BlockerResolved,
    ClarificationResponse,
    DelegationApproved,
    DelegationCompleted,
    DelegationDenied,
    ErrorRecovery,
    LaunchReason,
    LaunchRequest,
)
from bus.envelope import EnvelopeType
from bus.events import AgentState, DecisionType
from bus.signals import Priority
from coordinator.rules.ids import resume_request_id
from coordinator.rules.outcome import Target
from coordinator.rules.step import Step
from coordinator.state import FINAL_STATES, AgentRecord, GroupState, Relaunch

__all__ = ["SENT_KEPT", "Directive", "Launch", "after_exit", "deliver", "launch", "priority_of", "reissue"]

Directive = (
    ClarificationResponse
    | BlockerResolved
    | ErrorRecovery
    | DelegationApproved
    | DelegationDenied
    | DelegationCompleted
)
"""What the rules send an agent to resume it."""

_RESUMED: Final = (
    "Your previous session ended, and nothing resumes it: this is a new session with the same agent id "
    "and task. Continue from where the messages below pick the work up.\n\n"
)


SENT_KEPT: Final = 20
"""The most directives of one session an agent's record keeps for a new session (the latest): the record
is written again with every batch of the agent's entries."""


@dataclass(frozen=True)
class Launch:
    """What to start; ``parent`` is the agent the new one works for (none for a retried top-level agent)."""

    new_agent_id: str
    request_id: str
    reason: LaunchReason
    task: str
    parent: AgentRecord | None
    depth: int
    context: str | None = None
    priority: Priority = Priority.P1
    attempt: int = 1
    blocks_parent: bool = False
    retry_of: str | None = None
    name: str | None = None


def launch(step: Step, spec: Launch) -> AgentRecord:
    """Register the new agent and emit its launch request.

    The agent counts as running from now, so a launch that never starts times out. The request goes to
    the tasks stream with the new agent's id on the envelope.
    """
    parent_id = spec.parent.agent_id if spec.parent is not None else None
    request = LaunchRequest(
        request_id=spec.request_id,
        new_agent_id=spec.new_agent_id,
        parent_agent_id=parent_id,
        reason=spec.reason,
        task=spec.task,
        context=spec.context,
        priority=spec.priority,
        depth=spec.depth,
        attempt=spec.attempt,
        expires_at=_expiry(step),
    )
    record = step.put(
        AgentRecord(
            agent_id=spec.new_agent_id,
            name=spec.name,
            parent_agent_id=parent_id,
            depth=spec.depth,
            task=spec.task,
            registered_at=step.at,
            last_seen=step.at,
            attempt=spec.attempt,
            retry_of=spec.retry_of,
            request_id=spec.request_id,
            blocks_parent=spec.blocks_parent,
            context=spec.context,
        )
    )
    step.emit(Target.TASKS, request, spec.new_agent_id)
    detail = f"{spec.reason.value} launch of {spec.new_agent_id} (attempt {spec.attempt}, depth {spec.depth})"
    step.decide(DecisionType.LAUNCH_REQUESTED, spec.new_agent_id, detail, request_id=spec.request_id)
    return record


def priority_of(state: GroupState, record: AgentRecord) -> Priority:
    """The priority of the delegation request whose work ``record`` does (its first attempt's); P1 for
    work no request asked for."""
    first = state.first_attempt(record)
    delegation = state.delegations.get(first.request_id) if first.request_id is not None else None
    return delegation.request.priority if delegation is not None else Priority.P1


def deliver(step: Step, agent_id: str, directive: Directive, *, hold: bool = False) -> None:
    """Send ``directive`` to the agent: into its inbox, or with the agent started again.

    An adapter that stops with its agent (no ``--until-complete``, or stopped itself) says so in
    AGENT_EXITED; a directive put in the inbox of such an agent would wait there for a reader that is
    not coming. When a launcher started the agent (it has a launch request), a resume launch request
    (same agent id, task and depth) carries the directive in its context instead, after the original
    request's context, and the directive is not put in the inbox as well: the new session's adapter
    would deliver it a second time. ``hold`` marks a directive that asks the agent to wait for more (a
    blocking delegation approved, one of several delegates' results): it is kept for the relaunch that
    the last of them causes, rather than paying for a session that can only wait. An agent that was not
    launched by the bus keeps the inbox: whoever started it may start an adapter or ``listen`` again,
    which reads it. A launched agent's inbox directives are also kept (``sent``) until its adapter
    ends: see :func:`after_exit`.
    """
    record = step.agent(agent_id)
    if record.request_id is None:
        step.direct(agent_id, directive)
        return
    if not record.unreachable:
        envelope_id = step.direct(agent_id, directive)
        record = step.agent(agent_id)
        step.update(
            agent_id,
            sent=(*record.sent, directive.render())[-SENT_KEPT:],
            sent_ids=(*record.sent_ids, envelope_id)[-SENT_KEPT:],
        )
        return
    held = (*record.held, directive.render())
    if hold:
        step.update(agent_id, held=held)
        return
    _relaunch(step, record, held, "its adapter ended with it; the directive is in the new prompt")


def after_exit(step: Step, record: AgentRecord) -> None:
    """An adapter ended with its launched agent (AGENT_EXITED ``resumable: false``): its inbox directives.

    A directive can reach the inbox while the agent still runs (a quick answer, a delegation approved
    by policy) and the session end without reading it. An agent that is ``running`` again (the
    directive resumed it) and did not complete is started again with them, as :func:`deliver` does; one
    that waits for something more keeps them for the directive that will start it; one that is done
    needs them no more. An agent that read them gets them again in the new session, which knows nothing
    of the old one.

    Either way the directives are the rules' to carry from here on, not the inbox's: they are
    acknowledged there unread, in the same commit. Left in the inbox, the new session's adapter (or a
    ``listen`` of the agent) would deliver them a second time, after the prompt that holds them.
    """
    if not record.sent:
        return
    step.supersede(record.agent_id, record.sent_ids)
    if record.state is AgentState.RUNNING:
        why = "its adapter ended with it after directives went to its inbox; they are in the new prompt"
        _relaunch(step, record, (*record.held, *record.sent), why)
    elif record.state in FINAL_STATES:
        step.update(record.agent_id, sent=(), sent_ids=())
    else:
        step.update(record.agent_id, held=(*record.held, *record.sent), sent=(), sent_ids=())


def _relaunch(step: Step, record: AgentRecord, directives: tuple[str, ...], why: str) -> None:
    """A resume launch request for ``record``'s agent with ``directives`` in its context.

    One an entry caused is kept in the record (:attr:`AgentRecord.relaunch`) for the group's next tick,
    which writes it again if the entry waited for a coordinator longer than a request lives (see
    :func:`reissue`); one a tick makes expires from that tick's ``now``, and is written at once.
    """
    agent_id = record.agent_id
    request_id = resume_request_id(agent_id, step.envelope.id)
    before = f"{record.context.strip()}\n\n" if record.context and record.context.strip() else ""
    context = before + _RESUMED + "\n\n".join(directives)
    request = _again(step, record, LaunchReason.RESUME, context, request_id)
    relaunch = None
    if step.entry_type is not EnvelopeType.TICK:
        # the entry counts for the agent once applied when it is the agent's own, or a human's command to
        # it (Step.finish): the count it leaves is the one that says nothing came since
        relaunch = Relaunch(context=context, applied=record.applied + int(step.agent_id == agent_id))
    step.update(agent_id, unreachable=False, held=(), sent=(), sent_ids=(), relaunch=relaunch)
    step.emit(Target.TASKS, request, agent_id)
    step.decide(
        DecisionType.LAUNCH_REQUESTED, agent_id, f"resume launch of {agent_id}: {why}", request_id=request_id
    )


def reissue(step: Step, record: AgentRecord, relaunch: Relaunch | None, silent: str) -> None:
    """Write the launch request of an agent not heard from since, with a new expiry: at a tick that
    comes after no coordinator ticked the group for longer than a request lives, when the agent was
    launched in that time, or resumed (``relaunch``, its request) by an entry of that time (see
    :mod:`coordinator.rules.timeouts`). Its request was caused by an entry that may have waited that
    long for a coordinator, and then expired before it was written: no launcher could start it, and the
    agent is not lost, nor its attempt spent, for it."""
    agent_id = record.agent_id
    request_id = resume_request_id(agent_id, step.envelope.id)
    if relaunch is not None:
        request = _again(step, record, LaunchReason.RESUME, relaunch.context, request_id)
        what = "resume launch"
        since = "not heard from since it was resumed"
    else:
        reason = LaunchReason.RETRY if record.retry_of is not None else LaunchReason.DELEGATION
        request = _again(step, record, reason, record.context, request_id)
        what, since = "launch", "never heard from"
    step.update(agent_id, resumed_at=step.at)  # its silence counts from this request, as its expiry does
    step.emit(Target.TASKS, request, agent_id)
    detail = (
        f"{what} of {agent_id} requested again: {since} ({silent}), and no coordinator ticked the group "
        "for longer than a launch request lives, so its request may have expired before it was written"
    )
    step.decide(DecisionType.LAUNCH_REQUESTED, agent_id, detail, request_id=request_id)


def _again(
    step: Step, record: AgentRecord, reason: LaunchReason, context: str | None, request_id: str
) -> LaunchRequest:
    """A launch request that starts ``record``'s agent again (same id, task, depth and attempt)."""
    task = record.task or ("(the task of the previous session)" if reason is LaunchReason.RESUME else "")
    return LaunchRequest(
        request_id=request_id,
        new_agent_id=record.agent_id,
        parent_agent_id=record.parent_agent_id,
        reason=reason,
        task=task,
        context=context,
        priority=priority_of(step.state, record),
        depth=record.depth,
        attempt=record.attempt,
        expires_at=_expiry(step),
    )


def _expiry(step: Step) -> datetime | None:
    """When a launch request made now goes stale: the agent, running from now, is lost if still unheard.

    Counted from :attr:`Step.floor` (the server's time when the input came, or the group's last tick; a
    tick's own ``now`` for a launch at a tick), not from :attr:`Step.at` when that is later: a sender's
    clock ahead puts the agent's ``last_seen`` ahead, which the next tick brings back to its ``now``
    (:mod:`coordinator.rules.timeouts`), and the agent would be lost and retried while a launcher could
    still start its request beside the retry."""
    at = step.at
    floor = step.current("ticked_at") if step.entry_type is EnvelopeType.TICK else step.floor
    try:
        return min(at, floor or at) + timedelta(seconds=step.policy.lost_timeout_seconds)
    except OverflowError:  # past the year 9999: never
        return None
