"""``apply``: one stream entry in, the group's next state and the envelopes to publish out.

The function is pure: no Redis, no clock, no randomness, no mutation of its arguments. Emitted envelope
ids derive from the input's id (:func:`coordinator.rules.ids.emitted_id`) and their timestamps are the
input's, so applying the same entries to the same state always gives byte-identical results.

Per entry, in order:

1. An id already in the group's window of applied ids is a duplicate: the outcome is the unchanged state
   and no emits.
2. An entry the rules cannot apply (another group's, an output type such as a directive, an answer for an
   agent without open questions, an unknown request id, ...) is rejected: the outcome holds the reason,
   one ``rejected`` decision, and the state with only the id remembered.
3. Otherwise, an envelope sent by or for an agent (signal, result, finding, heartbeat, start, exit)
   first registers or refreshes its agent (:func:`coordinator.rules.lifecycle.touch`); then the rule for
   its type runs. Human commands and ticks refer to agents but are not signs of life. A question or a
   delegation request from an agent whose outcome is decided (completed, failed) is rejected; a stop is
   kept as a blocker left unresolved (:func:`coordinator.rules.blockers.on_late_stop`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Final

from bus.envelope import Envelope, EnvelopeType
from bus.events import AgentState, DecisionType
from coordinator.policy import Policy
from coordinator.rules import (
    aggregation,
    blockers,
    clarification,
    completion,
    delegation,
    findings,
    lifecycle,
    timeouts,
)
from coordinator.rules.outcome import Emit, Outcome, Target
from coordinator.rules.run import Run
from coordinator.rules.step import Rejected, Step
from coordinator.rules.trusted import change
from coordinator.state import GroupState

__all__ = ["HANDLERS", "Emit", "Outcome", "Target", "apply"]

Handler = Callable[[Step], None]

T = EnvelopeType
HANDLERS: Final[dict[EnvelopeType, Handler]] = {
    T.CLARIFICATION_NEEDED: clarification.on_clarification,
    T.STOP_WORK: blockers.on_stop,
    T.DELEGATE_WORK: delegation.on_delegate,
    T.COMPLETION_REPORT: completion.on_completion_report,
    T.PROGRESS: lifecycle.on_progress,
    T.RESULT: completion.on_result,
    T.FINDING: findings.on_finding,
    T.ANSWER: clarification.on_answer,
    T.RESOLVE: blockers.on_resolve,
    T.RECOVER: blockers.on_recover,
    T.APPROVE: delegation.on_approve,
    T.DENY: delegation.on_deny,
    T.DISMISS: aggregation.on_dismiss,
    T.HEARTBEAT: lifecycle.on_heartbeat,
    T.AGENT_STARTED: lifecycle.on_started,
    T.AGENT_EXITED: lifecycle.on_exited,
    T.TICK: timeouts.on_tick,
}
"""The rule for each input type; any other type is an output of the coordinator and is rejected."""

_FROM_AGENT: Final = frozenset(
    {
        T.CLARIFICATION_NEEDED,
        T.STOP_WORK,
        T.DELEGATE_WORK,
        T.COMPLETION_REPORT,
        T.PROGRESS,
        T.RESULT,
        T.FINDING,
        T.HEARTBEAT,
        T.AGENT_STARTED,
        T.AGENT_EXITED,
    }
)


_WAITS: Final = frozenset({T.CLARIFICATION_NEEDED, T.STOP_WORK, T.DELEGATE_WORK})
"""The signals an agent waits on a reply to."""
_FINISHED: Final = frozenset({AgentState.COMPLETED, AgentState.FAILED})


def apply(
    state: GroupState,
    envelope: Envelope,
    policy: Policy,
    run: Run | None = None,
    arrived: datetime | None = None,
) -> Outcome:
    """Apply one entry of the group's stream to its state.

    ``arrived`` is a time by the server's clock no later than when the entry was added to the stream (its
    id's time, or an earlier entry's), when known: the entry counts as sent no earlier
    (:attr:`~coordinator.rules.step.Step.at`).

    ``run`` is for applying many entries of the group in a row, each to the state the one before
    returned (see :class:`~coordinator.rules.run.Run`): the entry's id goes into the run rather than
    into a new window, and the records and maps the run made are changed in place, so only the last
    state of a run is complete and unchanged from then on. The caller adds ``run.ids`` to its window.
    """
    alone = run is None
    if run is None:
        run = Run()
    envelope_id = envelope.id
    if (envelope_id in run.ids or envelope_id in state.window) and _seen(
        state, run, envelope_id, policy.idempotency_window
    ):  # the first test alone for the new ids, all but a few
        return Outcome(state, [], duplicate=True)
    step = Step(state, envelope, policy, run, arrived)
    try:
        _run(step)
    except Rejected as exc:
        step.undo()
        reason = str(exc)
        step = Step(state, envelope, policy, run, arrived)
        step.decide(DecisionType.REJECTED, envelope.agent_id, reason)
        outcome = step.finish(rejected=reason)
    except BaseException:  # a rule bug: the caller dead-letters the entry, which changed nothing
        step.undo()
        raise
    else:
        outcome = step.finish()
    if alone:  # the state is the run's own (finish made it), and the run ends here
        change(outcome.state, {"window": outcome.state.window.add(envelope_id, policy.idempotency_window)})
    return outcome


def _seen(state: GroupState, run: Run, envelope_id: str, limit: int) -> bool:
    """Whether ``envelope_id`` is among the last ``limit`` ids applied to the group: the run's, then
    those of the state's window before them."""
    ids = run.ids
    if envelope_id in ids:
        return limit >= len(ids) or envelope_id in list(ids)[-limit:]  # a window smaller than a run: rare
    return state.window.holds(envelope_id, limit - len(ids))


def _run(step: Step) -> None:
    type_ = step.entry_type
    if type_ is not EnvelopeType.TICK and step.entry_group_id != step.group_id:
        raise Rejected(f"entry of group {step.entry_group_id!r} applied to group {step.group_id!r}")
    handler = HANDLERS.get(type_)
    if handler is None:
        raise Rejected(f"{type_.value} is an output of the coordinator, not an input")
    if type_ in _FROM_AGENT:
        state = lifecycle.touch(step).state
        if type_ is T.STOP_WORK and state in _FINISHED:
            blockers.on_late_stop(step)  # kept: often the adapter's word that a report was lost
            return
        if type_ in _WAITS and state in _FINISHED:
            # Its outcome is decided (and aggregated, retried or escalated): a signal that would have it
            # wait again would undo that, and nothing would act on its answer.
            raise Rejected(f"agent {step.agent_id!r} is {state.value}: its {type_.value} is ignored")
    handler(step)
