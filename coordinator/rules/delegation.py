"""The delegation protocol: evaluate a ``[DELEGATE_WORK]`` request, then approve, deny or ask a human.

The seed's checklist, against the policy (:func:`evaluate`):

- justified: ``delegation_reason`` has at least ``min_delegation_reason_chars`` characters;
- well defined: ``new_task_description`` has at least ``min_task_description_chars`` characters;
- independence claim: honoured as made (the coordinator cannot verify it from the signal); only the
  impossible claim is refused: ``blocks_current_work`` from an agent that has already finished;
- priority: in ``auto_approve`` or ``human_approval``;
- resources: a parallel slot (active agents < ``max_parallel_agents``; a requester that will wait for
  the delegate hands it its own slot), depth (requester depth < ``max_delegation_depth``) and the group's
  budget (agents < ``max_agents_per_group``).

A failing check denies the request with the reasons and an alternative. Otherwise an auto-approve
priority launches the delegate at once; a human-approval priority waits for APPROVE / DENY by request id
(a human's approval is not judged again, but is held to the resources: with no slot free, or past the
depth or the budget, it is rejected and the request stays pending). With ``blocks_current_work`` the
requester is ``delegating`` until its delegate's final outcome comes back as DELEGATION_COMPLETED. A
requester that finished while its request waited for a human gets no directive (it would resume a
finished agent), but an approved delegate is still launched.
"""

from __future__ import annotations

from enum import StrEnum

from bus.directives import DelegationApproved, DelegationDenied, HumanApprove, HumanDeny, LaunchReason
from bus.display import first_line
from bus.events import AgentState, DecisionType
from bus.fields import Model
from bus.signals import DelegateWork, Independence
from coordinator.policy import Policy
from coordinator.rules.aggregation import report_group
from coordinator.rules.holds import held, still_held, waits_for_delegation
from coordinator.rules.ids import delegate_agent_id
from coordinator.rules.launch import Launch, deliver, launch
from coordinator.rules.step import Rejected, Step
from coordinator.state import (
    ACTIVE_STATES,
    FINAL_STATES,
    AgentRecord,
    Delegation,
    DelegationStatus,
    GroupState,
)

__all__ = [
    "Check",
    "CheckFailure",
    "Evaluation",
    "Verdict",
    "evaluate",
    "launch_limits",
    "on_approve",
    "on_delegate",
    "on_deny",
    "pending",
]


class Check(StrEnum):
    JUSTIFIED = "justified"
    WELL_DEFINED = "well_defined"
    INDEPENDENCE = "independence"
    PRIORITY = "priority"
    SLOTS = "parallel_slots"
    DEPTH = "depth"
    BUDGET = "budget"


class CheckFailure(Model):
    check: Check
    reason: str
    alternative: str


class Verdict(StrEnum):
    APPROVE = "approve"
    DENY = "deny"
    ASK_HUMAN = "ask_human"


class Evaluation(Model):
    verdict: Verdict
    failures: tuple[CheckFailure, ...] = ()


_YOURSELF = "Continue the work yourself"


def evaluate(request: DelegateWork, requester: AgentRecord, state: GroupState, policy: Policy) -> Evaluation:
    """Run the checklist; the verdict follows from the failures and the request's priority."""
    failures = tuple(
        failure
        for failure in (
            _justified(request, policy),
            _well_defined(request, policy),
            _independence(request, requester),
            _priority(request, policy),
            _slots(request, requester, state, policy),
            _depth(requester, policy),
            _budget(state, policy),
        )
        if failure is not None
    )
    if failures:
        return Evaluation(verdict=Verdict.DENY, failures=failures)
    if request.priority in policy.auto_approve:
        return Evaluation(verdict=Verdict.APPROVE)
    return Evaluation(verdict=Verdict.ASK_HUMAN)


def _justified(request: DelegateWork, policy: Policy) -> CheckFailure | None:
    if len(request.delegation_reason.strip()) >= policy.min_delegation_reason_chars:
        return None
    return CheckFailure(
        check=Check.JUSTIFIED,
        reason="delegation_reason does not say why another agent is needed",
        alternative=f"{_YOURSELF}; if delegation is still needed, "
        "ask again with a concrete delegation_reason.",
    )


def _well_defined(request: DelegateWork, policy: Policy) -> CheckFailure | None:
    if len(request.new_task_description.strip()) >= policy.min_task_description_chars:
        return None
    return CheckFailure(
        check=Check.WELL_DEFINED,
        reason=f"new_task_description is shorter than {policy.min_task_description_chars} characters",
        alternative=f"{_YOURSELF}, or ask again with a task description "
        "that states context, goal and success criteria.",
    )


def _independence(request: DelegateWork, requester: AgentRecord) -> CheckFailure | None:
    if request.independence is not Independence.BLOCKS_CURRENT_WORK or requester.state not in FINAL_STATES:
        return None
    return CheckFailure(
        check=Check.INDEPENDENCE,
        reason=f"blocks_current_work, but {requester.agent_id} has already finished "
        f"({requester.state.value})",
        alternative="List the work under recommendations in your report.",
    )


def _priority(request: DelegateWork, policy: Policy) -> CheckFailure | None:
    if request.priority in policy.auto_approve | policy.human_approval:
        return None
    accepted = ", ".join(sorted(p.value for p in policy.auto_approve | policy.human_approval)) or "none"
    return CheckFailure(
        check=Check.PRIORITY,
        reason=f"priority {request.priority.value} is not accepted (accepted: {accepted})",
        alternative=f"{_YOURSELF}, or ask again with an accepted priority.",
    )


def launch_limits(
    requester: AgentRecord, state: GroupState, policy: Policy, request: DelegateWork | None = None
) -> str | None:
    """Why no agent can be launched for ``requester`` now (a free parallel slot, the depth, the group's
    budget), or None: the checklist's resources, which a human's choice to launch one is held to too."""
    checks = (_slots(request, requester, state, policy), _depth(requester, policy), _budget(state, policy))
    return "; ".join(f.reason for f in checks if f is not None) or None


def _slots(
    request: DelegateWork | None, requester: AgentRecord, state: GroupState, policy: Policy
) -> CheckFailure | None:
    used = state.active_count
    blocks = request is not None and request.independence is Independence.BLOCKS_CURRENT_WORK
    lends = blocks and requester.state in ACTIVE_STATES
    if lends and not requester.waiting_on:
        used -= 1  # the requester waits, so its slot goes to the delegate (to its first one: it has one)
    if used < policy.max_parallel_agents:
        return None
    return CheckFailure(
        check=Check.SLOTS,
        reason=f"no parallel slot free ({used} of {policy.max_parallel_agents} in use)",
        alternative=f"Retry the delegation when a parallel slot frees, or {_YOURSELF.lower()}.",
    )


def _depth(requester: AgentRecord, policy: Policy) -> CheckFailure | None:
    if requester.depth < policy.max_delegation_depth:
        return None
    return CheckFailure(
        check=Check.DEPTH,
        reason=f"delegation depth limit {policy.max_delegation_depth} reached "
        f"(requester depth {requester.depth})",
        alternative=f"{_YOURSELF}: delegates at this depth cannot delegate further.",
    )


def _budget(state: GroupState, policy: Policy) -> CheckFailure | None:
    if state.budget_used < policy.max_agents_per_group:
        return None
    return CheckFailure(
        check=Check.BUDGET,
        reason=f"the group's budget of {policy.max_agents_per_group} agents is used up",
        alternative=f"{_YOURSELF}.",
    )


def on_delegate(step: Step) -> None:
    request = step.payload(DelegateWork)
    request_id = request.request_id(step.envelope.agent_id)
    if request_id in step.state.delegations:  # the same block printed again (a recap): asked once
        raise Rejected(f"delegation request {request_id} was already received")
    requester = step.agent(step.envelope.agent_id)
    evaluation = evaluate(request, requester, step.state, step.policy)
    delegation = Delegation(
        request_id=request_id,
        requester_id=requester.agent_id,
        request=request,
        status=DelegationStatus.PENDING_HUMAN,
        requested_at=step.ts,
        envelope_id=step.envelope.id,
    )
    if evaluation.verdict is Verdict.APPROVE:
        _approve(step, delegation, "approved by policy")
    elif evaluation.verdict is Verdict.DENY:
        first = evaluation.failures[0]
        reason = "; ".join(f.reason for f in evaluation.failures)
        _deny(step, delegation, reason, first.alternative)
    else:
        _store(step, delegation)
        detail = f"priority {request.priority.value} needs a human: approve or deny {request_id}"
        if request.independence is Independence.BLOCKS_CURRENT_WORK:
            step.transition(
                requester.agent_id,
                _held(step, requester.agent_id),
                DecisionType.DELEGATION_PENDING,
                detail,
                request=request_id,
            )
        else:
            step.decide(DecisionType.DELEGATION_PENDING, requester.agent_id, detail, request_id=request_id)


def on_approve(step: Step) -> None:
    command = step.payload(HumanApprove)
    delegation = pending(step.state, command.request_id)
    requester = step.agent(delegation.requester_id)
    limits = launch_limits(requester, step.state, step.policy, delegation.request)
    if limits is not None:
        raise Rejected(
            f"delegation request {command.request_id} cannot be launched now: {limits} "
            "(approve it again once that changes, or deny it)"
        )
    how = f"approved by a human{': ' + command.reason.strip() if command.reason else ''}"
    _approve(step, delegation, how, command.instructions)


def on_deny(step: Step) -> None:
    command = step.payload(HumanDeny)
    delegation = pending(step.state, command.request_id)
    _deny(step, delegation, command.reason, command.alternative or f"{_YOURSELF}.", command.instructions)
    report_group(step, delegation.requester_id)


def pending(state: GroupState, request_id: str) -> Delegation:
    """The delegation request waiting for a human (also checked by ``approve``/``deny`` before they
    publish)."""
    delegation = state.delegations.get(request_id)
    if delegation is None:
        raise Rejected(f"unknown delegation request {request_id!r}")
    if delegation.status is not DelegationStatus.PENDING_HUMAN:
        raise Rejected(f"delegation request {request_id!r} is already {delegation.status.value}")
    return delegation


def _store(step: Step, delegation: Delegation) -> None:
    step.replace(delegations={**step.state.delegations, delegation.request_id: delegation})


def _approve(step: Step, delegation: Delegation, how: str, instructions: str | None = None) -> None:
    """Launch the delegate and tell the requester; ``instructions``: a human's, for the requester to go on
    with (a blocking request's requester is told to wait for the results first)."""
    request = delegation.request
    requester = step.agent(delegation.requester_id)
    blocks = request.independence is Independence.BLOCKS_CURRENT_WORK
    new_id = delegate_agent_id(step.group_id, delegation.request_id)
    launch(
        step,
        Launch(
            new_agent_id=new_id,
            request_id=delegation.request_id,
            reason=LaunchReason.DELEGATION,
            task=request.new_task_description.strip(),
            context=_context(request, requester),
            parent=requester,
            depth=requester.depth + 1,
            priority=request.priority,
            blocks_parent=blocks,
        ),
    )
    given = instructions.strip() if instructions else ""
    approved = {"status": DelegationStatus.APPROVED, "new_agent_id": new_id, "instructions": given or None}
    _store(step, delegation.model_copy(update=approved))
    if blocks:
        then = f"Wait: you will be resumed with the results of {new_id} when it completes."
        then += f" Then: {given}" if given else ""
        wait = None
    else:  # a human may approve it after the requester asked a question or stopped
        then = given or f"Continue your own task; {new_id} works on the delegated task in parallel."
        wait = still_held(requester, step.state, then)
    directive = DelegationApproved(
        request_id=delegation.request_id,
        new_agent_id=new_id,
        task=first_line(request.new_task_description),
        coordination=request.coordination,
        resume_instructions=wait or then,
    )
    _tell(step, requester, directive, hold=blocks or wait is not None)
    detail = f"{how}; launched {new_id}"
    if blocks and requester.state not in FINAL_STATES:
        step.update(requester.agent_id, waiting_on=(*requester.waiting_on, new_id))
        step.transition(
            requester.agent_id,
            _held(step, requester.agent_id),
            DecisionType.DELEGATION_APPROVED,
            detail,
            request=delegation.request_id,
        )
    else:
        step.decide(
            DecisionType.DELEGATION_APPROVED, requester.agent_id, detail, request_id=delegation.request_id
        )


def _held(step: Step, agent_id: str) -> AgentState:
    """The state of an agent that now waits for a delegate: ``delegating``, unless a blocker or questions
    of its own hold it first (it waits for their answers before it waits for the delegate's)."""
    return held(step.agent(agent_id), step.state) or AgentState.DELEGATING


def _deny(
    step: Step, delegation: Delegation, reason: str, alternative: str, instructions: str | None = None
) -> None:
    _store(step, delegation.model_copy(update={"status": DelegationStatus.DENIED, "reason": reason}))
    requester = step.agent(delegation.requester_id)
    then = (instructions.strip() if instructions else "") or "Continue your task without the delegated work."
    wait = still_held(requester, step.state, then)  # other delegates, a blocker, questions
    directive = DelegationDenied(
        request_id=delegation.request_id,
        reason=reason,
        alternative=alternative,
        resume_instructions=wait or then,
    )
    waits = waits_for_delegation(requester, step.state)
    _tell(step, requester, directive, hold=wait is not None)
    if requester.state is AgentState.DELEGATING and not waits:
        step.resume(requester.agent_id, DecisionType.DELEGATION_DENIED, reason, request=delegation.request_id)
    else:
        step.decide(
            DecisionType.DELEGATION_DENIED, requester.agent_id, reason, request_id=delegation.request_id
        )


def _tell(
    step: Step, requester: AgentRecord, directive: DelegationApproved | DelegationDenied, *, hold: bool
) -> None:
    """Send the answer to the requester, unless it finished meanwhile (a directive would resume it);
    ``hold``: it still waits for a delegate's results (see :func:`deliver`)."""
    if requester.state not in FINAL_STATES:
        deliver(step, requester.agent_id, directive, hold=hold)


def _context(request: DelegateWork, requester: AgentRecord) -> str:
    parts = [f"Requested by {requester.agent_id}: {request.delegation_reason.strip()}"]
    if request.context_required and request.context_required.strip():
        parts.append(f"Context:\n{request.context_required.strip()}")
    if request.coordination and request.coordination.strip():
        parts.append(f"Coordination:\n{request.coordination.strip()}")
    return "\n\n".join(parts)
