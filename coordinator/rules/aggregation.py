"""Status aggregation (seeds 001/002): what happens when an agent's outcome is known.

- A failed agent (a FAILED result or ``failed`` completion, an exit without a completion, a lost agent) is
  retried once with reduced scope: a launch request with ``reason: retry`` and the next attempt number, for
  a new agent that takes the failed one's place. A failed retry (after ``Policy.max_retries`` retries) is
  escalated to a human.
- Unless its work is not critical: a delegate its requester asked for as ``independence: optional``. Seed
  001: "Retry once with reduced scope if critical ... Proceed with available results if non-critical,
  documenting the gap". It is neither retried nor escalated, and the group's status names the gap
  (``...; optional work failed: <agent>, results may be incomplete``) instead of escalating.
- An agent whose parent waits for it (``blocks_current_work``) resumes the parent with its outcome once
  that outcome is final (after its retries).
- When the group settles (every agent finished, no delegation waiting for a human), its status is reported
  once: all SUCCESS -> ``continue``; any PARTIAL, or a merged finding whose agents disagree on severity
  (seed 001: flag for human review) -> ``review``; any failure left after retries -> ``escalate``
  (failures take precedence). It is reported again when it changes: an agent declared lost completes
  after all, a severity conflict begins or ends.
- An escalation waits for a human until ``dismiss`` (:func:`on_dismiss`) takes it off the list; the
  events stream keeps both decisions.
- An agent that finishes while a ``blocks_current_work`` request of its own waits for a human has that
  request withdrawn (denied): nothing waits for its results any more.
- An agent that finishes while a blocker of its own is open, or stops after it finished, leaves that
  blocker unresolved (:func:`unresolved`): nothing will resume it, so it is kept as a violation and its
  group is reviewed rather than continued. The blocker is often the adapter's word that a result report
  did not reach the coordinator, and the findings in that report would otherwise be gone without a trace.
"""

from __future__ import annotations

from bus.directives import AnswerItem, DelegationCompleted, HumanDismiss, LaunchReason
from bus.display import first_line
from bus.events import AgentState, DecisionType
from bus.results import ResultStatus
from bus.signals import ClarificationNeeded, Independence, QuestionType, StopWork
from coordinator.rules.asked import asked_resume
from coordinator.rules.holds import still_held
from coordinator.rules.ids import retry_agent_id, retry_request_id
from coordinator.rules.launch import Launch, deliver, launch, priority_of
from coordinator.rules.step import Rejected, Step
from coordinator.rules.verdict import gaps, optional, unresolved_count, verdict
from coordinator.state import (
    FINAL_STATES,
    AgentRecord,
    Completion,
    DelegationStatus,
    Escalation,
    GroupState,
    GroupVerdict,
    Violation,
    ViolationRule,
)

__all__ = [
    "finish",
    "on_dismiss",
    "open_escalation",
    "report_group",
    "unresolved",
]


def finish(
    step: Step,
    agent_id: str,
    completion: Completion,
    *,
    decision: DecisionType = DecisionType.COMPLETED,
    state: AgentState | None = None,
) -> None:
    """Record an agent's outcome and act on it.

    The first outcome is the one aggregated. A later report from an agent already finished is counted
    in ``extra_reports`` but changes neither the outcome nor the group status, and never launches a
    second retry. It is announced only when its status differs: the protocol has an agent print both a
    structured result and a ``[COMPLETION_REPORT]``, and the second of an agreeing pair is no news. What
    the later report recorded counts all the same: blockers it lists make the group ``review`` whichever
    of the two came first.
    """
    record = step.agent(agent_id)
    if record.state in FINAL_STATES and record.completion is not None:
        step.update(agent_id, extra_reports=record.extra_reports + 1)
        kept = record.completion.status
        if completion.status is not kept:
            later = f"a later {completion.source.value} says {completion.status.value}"
            step.decide(DecisionType.COMPLETED, agent_id, f"{later}; outcome stays {kept.value}")
        report_group(step, agent_id)
        return
    for stop in (*record.earlier_blockers, record.blocker):
        if stop is not None:
            unresolved(step, agent_id, stop)
    if record.questions is not None:
        _unanswered(step, agent_id, record.questions, record.answers)
    if state is None:
        state = AgentState.FAILED if completion.status is ResultStatus.FAILED else AgentState.COMPLETED
    step.update(
        agent_id,
        state=state,
        completion=completion,
        questions=None,
        answers=(),
        next_step=None,
        blocker=None,
        earlier_blockers=(),
    )
    group = step.state.progress.render()
    detail = f"{completion.status.value}: {first_line(completion.summary)} (group: {group})"
    step.decide(decision, agent_id, detail, state=state)
    record = step.agent(agent_id)
    _withdraw_blocking_requests(step, record)
    if completion.status is ResultStatus.FAILED:
        _handle_failure(step, record, completion)
    else:
        _withdraw_escalations(step, record)
        _notify_parent(step, record, completion)
    report_group(step, agent_id)


def _withdraw_escalations(step: Step, record: AgentRecord) -> None:
    """An attempt that completed its work (slow, not gone) settles the escalation of another attempt at
    it: no human needs to handle a failure whose work is done."""
    state = step.state
    before = [a.agent_id for a in state.attempts_before(record)]
    attempts = {record.agent_id, *before, *state.attempts_after(record)}
    settled = [e.agent_id for e in state.escalations if e.agent_id in attempts]
    if not settled:
        return
    step.replace(escalations=tuple(e for e in state.escalations if e.agent_id not in attempts))
    for agent_id in settled:
        detail = f"withdrawn: the work was completed by {record.agent_id}"
        step.decide(DecisionType.ESCALATION_DISMISSED, agent_id, detail)


def _withdraw_blocking_requests(step: Step, record: AgentRecord) -> None:
    """A request of the agent's that blocks its work and still waits for a human is moot once it has
    finished: nothing waits for the delegate's results (the checklist refuses such a request from a
    finished agent for that reason). It is denied, so that the group can settle and no human is asked."""
    # in a fixed order, not the map's: a state read back from a large Redis hash comes in the hash's own
    moot = [
        d
        for _, d in sorted(step.state.delegations.items())
        if d.requester_id == record.agent_id
        and d.status is DelegationStatus.PENDING_HUMAN
        and d.request.independence is Independence.BLOCKS_CURRENT_WORK
    ]
    if not moot:
        return
    reason = (
        f"withdrawn: {record.agent_id} finished ({record.state.value}) before a human decided, and "
        "nothing waits for the results of blocks_current_work any more"
    )
    denied = {
        d.request_id: d.model_copy(update={"status": DelegationStatus.DENIED, "reason": reason}) for d in moot
    }
    step.replace(delegations={**step.state.delegations, **denied})
    for request_id in denied:
        step.decide(DecisionType.DELEGATION_DENIED, record.agent_id, reason, request_id=request_id)


def unresolved(step: Step, agent_id: str, stop: StopWork) -> None:
    """Keep a blocker of the agent's that its outcome leaves unresolved, as an ``unresolved_blocker``
    violation (which makes its settled group ``review``)."""
    _left_open(step, agent_id, f"{stop.kind}: {stop.details.strip()}")


def _unanswered(
    step: Step, agent_id: str, asked: ClarificationNeeded, answers: tuple[AnswerItem, ...]
) -> None:
    """Questions the agent finished without (it went on with its assumptions): a blocking or required
    one left unanswered is kept like an unresolved blocker, for a human to review; optional ones are not."""
    answered = {a.question_id for a in answers}
    left = [
        q.question_id
        for q in asked.questions
        if q.question_id not in answered and q.type is not QuestionType.OPTIONAL
    ]
    if left:
        _left_open(step, agent_id, f"questions left unanswered: {', '.join(left)}")


def _left_open(step: Step, agent_id: str, detail: str) -> None:
    violation = Violation(rule=ViolationRule.UNRESOLVED_BLOCKER, detail=detail, envelope_id=step.envelope.id)
    step.update(agent_id, violations=(*step.agent(agent_id).violations, violation))
    step.decide(DecisionType.CONTRACT_VIOLATION, agent_id, f"{violation.rule.value}: {detail}")


def _handle_failure(step: Step, record: AgentRecord, completion: Completion) -> None:
    if record.retried_by is not None:
        return  # a replaced attempt; its retry carries the work now
    done = step.state.completed_earlier(record)
    if done is not None:  # an earlier attempt, declared lost, came back and completed the work
        detail = f"the work was completed by {done.agent_id}, an earlier attempt: not retried"
        step.decide(DecisionType.COMPLETED, record.agent_id, detail)
        return
    if optional(step.state, record):
        detail = "optional work: not retried, and the group goes on without it (results may be incomplete)"
        step.decide(DecisionType.COMPLETED, record.agent_id, detail)
        return
    budget = step.policy.max_agents_per_group
    within = step.state.budget_used < budget
    if record.attempt <= step.policy.max_retries and within:
        _retry(step, record, completion)
        return
    reason = f"{record.agent_id} failed after {record.attempt} attempt(s): {first_line(completion.summary)}"
    if record.attempt <= step.policy.max_retries:
        reason += f" (not retried: the group's budget of {budget} agents is used up)"
    if any(e.agent_id == record.agent_id for e in step.state.escalations):
        # heard from again after its escalation, then failed again: the one in the inbox stands for both
        step.decide(DecisionType.ESCALATED, record.agent_id, f"{reason} (escalated already)")
    else:
        escalation = Escalation(
            agent_id=record.agent_id, reason=reason, envelope_id=step.envelope.id, at=step.ts
        )
        step.replace(escalations=(*step.state.escalations, escalation))
        step.update(record.agent_id, escalated=True)
        step.decide(DecisionType.ESCALATED, record.agent_id, reason)
    _notify_parent(step, record, completion)


def _retry(step: Step, record: AgentRecord, completion: Completion) -> None:
    attempt = record.attempt + 1
    new_id = retry_agent_id(step.group_id, record.agent_id, attempt)
    parent = step.find(record.parent_agent_id) if record.parent_agent_id else None
    previous = "\n\n".join(
        part
        for part in (
            f"Previous attempt {record.agent_id} ended {completion.status.value}:\n"
            f"{completion.summary.strip()}",
            completion.results,  # its report's blockers, root cause, findings: what to skip or build on
        )
        if part
    )
    launch(
        step,
        Launch(
            new_agent_id=new_id,
            request_id=retry_request_id(step.group_id, record.agent_id, attempt),
            reason=LaunchReason.RETRY,
            task=_retry_task(step.state.first_attempt(record), attempt),
            context=previous,
            parent=parent,
            depth=record.depth,
            priority=priority_of(step.state, record),
            attempt=attempt,
            blocks_parent=record.blocks_parent,
            retry_of=record.agent_id,
            name=record.name,
        ),
    )
    step.update(record.agent_id, retried_by=new_id)
    if parent is not None and record.agent_id in parent.waiting_on:
        waiting = tuple(new_id if a == record.agent_id else a for a in parent.waiting_on)
        step.update(parent.agent_id, waiting_on=waiting)
    detail = f"attempt {attempt} launched as {new_id} with reduced scope"
    step.decide(DecisionType.RETRY_REQUESTED, record.agent_id, detail)


def _retry_task(first: AgentRecord, attempt: int) -> str:
    """The task of a retry: the first attempt's own task (not its retry's, which would nest the preamble
    once per attempt), under a preamble that asks for the reduced scope."""
    original = first.task.strip() if first.task else f"(the task of agent {first.agent_id})"
    return (
        f"RETRY WITH REDUCED SCOPE (attempt {attempt}): a previous attempt at this task failed.\n"
        "Complete the critical part first and report PARTIAL rather than FAILED when some of it cannot be "
        "done; skip whatever caused the failure and list it under Blockers.\n\n"
        f"Original task:\n{original}"
    )


def _notify_parent(step: Step, record: AgentRecord, completion: Completion) -> None:
    """Resume a parent that waits for this agent, with the agent's final outcome."""
    parent = step.find(record.parent_agent_id) if record.parent_agent_id else None
    if not record.blocks_parent or parent is None:
        return
    # the parent waits for the work's latest attempt: an earlier one that completes it answers for it
    attempts = {record.agent_id, *step.state.attempts_after(record)}
    if not attempts & set(parent.waiting_on):
        return
    waiting = tuple(a for a in parent.waiting_on if a not in attempts)
    step.update(parent.agent_id, waiting_on=waiting)
    if parent.state in FINAL_STATES:
        return
    request_id = step.state.first_attempt(record).request_id or ""
    then = _resume_after(completion.status)
    delegation = step.state.delegations.get(request_id)
    if completion.status is ResultStatus.SUCCESS and delegation is not None:
        # a human's instructions on approving it, else the prompt the request asked to be resumed with
        then = delegation.instructions or asked_resume(delegation.request.coordination) or then
    wait = still_held(step.agent(parent.agent_id), step.state, then)  # more delegates, a blocker since
    directive = DelegationCompleted(
        request_id=request_id,
        delegate_agent_id=record.agent_id,
        status=completion.status.value,
        summary=completion.summary,
        deliverables=completion.deliverables,
        results=completion.results,
        resume_instructions=wait or then,
    )
    deliver(step, parent.agent_id, directive, hold=wait is not None)
    detail = f"delegate {record.agent_id} finished {completion.status.value}"
    if waiting or parent.state is not AgentState.DELEGATING:
        detail += (
            f"; still waiting for {', '.join(waiting)}"
            if waiting
            else f"; results sent; still {parent.state.value}"
        )
        step.decide(DecisionType.DELEGATION_COMPLETED, parent.agent_id, detail, request_id=request_id)
        return
    step.resume(parent.agent_id, DecisionType.DELEGATION_COMPLETED, detail + "; resumed", request=request_id)


def _resume_after(status: ResultStatus) -> str:
    if status is ResultStatus.FAILED:
        return "The delegated work failed. Continue without it where you can and report what remains blocked."
    if status is ResultStatus.PARTIAL:  # seed 001: partial results are reviewed before they are relied on
        return (
            "The delegated work is done in part. Review its results, decide what of it you can rely on, "
            "and continue your task; report what it left undone."
        )
    return "The delegated work is done. Continue your task using its results."


def report_group(step: Step, agent_id: str) -> None:
    """Report the group status when this step settled the group, or changed the status of a settled one
    (an agent declared lost that completes after all, a severity conflict that began or ended)."""
    if not step.state.settled:
        return
    result = verdict(step.state)
    if step.initial.settled and result is step.initial.status:
        return
    step.replace(status=result)
    detail = f"{result.value}: {step.state.progress.render()}"
    conflicts = step.state.severity_conflicts
    if conflicts:
        detail += f"; {conflicts} merged finding(s) whose agents disagree on severity, for review"
    left = unresolved_count(step.state) if result is GroupVerdict.REVIEW else 0
    if left:
        detail += f"; {left} agent(s) finished with a blocker unresolved (see status), for review"
    failed = gaps(step.state)
    if failed:
        detail += f"; optional work failed: {', '.join(failed)}, results may be incomplete"
    step.decide(DecisionType.GROUP_STATUS, agent_id, detail)


def open_escalation(state: GroupState, agent_id: str) -> Escalation:
    """The agent's escalation that waits for a human (also checked by the ``dismiss`` command)."""
    for escalation in state.escalations:
        if escalation.agent_id == agent_id:
            return escalation
    record = state.agents.get(agent_id)
    escalated = {e.agent_id for e in state.escalations}
    for retry in state.attempts_after(record) if record is not None else ():
        if retry in escalated:  # the work failed again in a retry, which holds the escalation
            raise Rejected(
                f"agent {agent_id!r} has no open escalation; its retry {retry!r} has: dismiss that"
            )
    raise Rejected(f"agent {agent_id!r} has no open escalation")


def on_dismiss(step: Step) -> None:
    """DISMISS: the human has seen the agent's escalation; it leaves the inbox (the agent stays failed)."""
    note = step.payload(HumanDismiss).note
    agent_id = step.envelope.agent_id
    open_escalation(step.state, agent_id)
    step.replace(escalations=tuple(e for e in step.state.escalations if e.agent_id != agent_id))
    step.decide(DecisionType.ESCALATION_DISMISSED, agent_id, f"dismissed: {note}" if note else "dismissed")
